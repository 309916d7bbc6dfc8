"""benchmarks/run_history.py: a small runs root made as the engine writes it (every run listed, the sweep's
trials one level down, the killed ones interrupted), and every figure of the table measured end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))


def test_the_generated_root_is_what_the_engine_leaves(tmp_path):
    from run_history import make_runs

    from core.engine.run_index import indexed_runs

    ids = make_runs(tmp_path / "runs", 120)
    runs = indexed_runs(tmp_path / "runs")
    assert sorted(r["id"] for r in runs) == sorted(ids) and len(set(ids)) == 120
    assert any("/" in r["name"] for r in runs)  # sweep trials
    assert {r["status"] for r in runs} >= {"completed", "stopped", "failed", "interrupted"}
    assert sum(bool(r["note"]) for r in runs) == 120 // 7 + (120 % 7 > 3)
    run = runs[0]
    assert run["config"]["task"] == run["task"] and run["checkpoints"]["best"]["path"].endswith("best.pt")
    assert (Path(run["folder"]) / "metrics.jsonl").read_text().count("\n") > 200


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_benchmark_measures_every_figure(capsys):
    from run_history import main

    assert main(["--runs", "30", "--json", "--repeat", "1"]) == 0  # each figure's own fresh process, as it runs them
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["runs"] == 30 and result["index_mib"] > 0
    for key in ("cold_list", "warm_list", "warm_list_json", "show"):
        assert result[key]["code"] == 0 and not result[key]["torch"] and result[key]["process_s"] > 0
    for key in ("window_cold", "window_warm"):
        assert result[key]["rows"] == result[key]["cleared_rows"] == 30
        assert 0 < result[key]["filtered_rows"] < 30 and result[key]["filter_stall_ms"] >= 0
