"""The GPU suite's own smoke test: `--device cpu --quick` runs every section and writes the JSON report."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_gpu_suite_quick_on_cpu_writes_report_and_table(tmp_path):
    out = tmp_path / "suite.json"
    proc = subprocess.run([sys.executable, "benchmarks/gpu_suite.py", "--device", "cpu", "--quick", "--out", str(out)],
                          cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, capture_output=True,
                          text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert set(report["sections"]) == {"devices", "sweep", "overhead", "mfu", "training", "ddp"}
    assert report["errors"] == {}
    assert report["sections"]["training"]["bf16"]["status"] == "ok"
    assert report["sections"]["training"]["fp16"]["status"] == "skipped"  # a GPU mode
    assert report["sections"]["mfu"]["flops_per_step"] > 0
    assert all(t["result"] == "n/a" for t in report["targets"])  # the targets are for GPUs
    assert proc.stdout.strip().splitlines()[-1].startswith("  target ")  # the table is printed last
