"""benchmarks/control_channel_overhead.py: both sides train the same run (the off side really has no polling
thread), and the report's ratio is the on/off medians of paired windows."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_the_off_side_has_no_polling_thread_and_the_report_pairs_windows(tmp_path, monkeypatch, capsys):
    import control_channel_overhead as bench

    from core.engine import folder_control

    seen: dict[bool, bool] = {}
    real_watch = folder_control.FolderControl._watch

    def watch(self):
        seen[True] = True
        return real_watch(self)

    monkeypatch.setattr(folder_control.FolderControl, "_watch", watch)
    assert min(bench.window(30, False, tmp_path / "off", 32, 10)) > 0
    assert not seen and not any(t.name == "folder-control" for t in threading.enumerate())
    bench.window(30, True, tmp_path / "on", 32, 10)
    assert seen  # the on side polls

    monkeypatch.setattr(sys, "argv", ["bench", "--steps", "30", "--rounds", "1", "--batch-size", "32", "--json"])
    assert bench.main() == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["steps"] == 30 and result["on"] > 0 and result["off"] > 0
    assert result["ratio_low"] <= result["ratio"] <= result["ratio_high"]
