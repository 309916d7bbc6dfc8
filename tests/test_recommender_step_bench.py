"""benchmarks/recommender_step.py --quick: the engine's recommender step and the hand-written SASRec both train
and are reported side by side (no timing is asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_quick_mode_reports_the_engine_and_the_reference():
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "recommender_step.py"), "--quick", "--cpu", "-1", "--json",
         "--options", "interactions=20000,items=200"],
        capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.strip().splitlines()
    assert any(line.strip().startswith("reference") and "positions/s" in line for line in lines)
    assert any(line.strip().startswith("engine") and "positions/s" in line and "ratio" in line for line in lines)
    result = json.loads(lines[-1])
    (row,) = result["rows"]
    assert row["engine"] > 0 and row["reference"] > 0 and row["rounds"] >= 2
    assert row["ratio"] == pytest.approx(row["engine"] / row["reference"])
    assert row["engine_loss"] == row["engine_loss"] and row["reference_loss"] == row["reference_loss"]  # not NaN
    assert result["options"] == {"interactions": 20000, "items": 200}
