"""The GPU suite: `--device cpu --quick` runs every section and writes the JSON report; its verdicts read right."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_suite  # noqa: E402

SECTIONS = {
    "devices",
    "sweep",
    "mfu",
    "training",
    "fp8",
    "overhead",
    "profile",
    "datapath",
    "compile",
    "sweep_more",
    "compile_fp32",
    "ddp",
}


@pytest.mark.slow  # the eager rows are measured in fresh processes, as on any CPU
@pytest.mark.timeout(1200)
def test_gpu_suite_quick_on_cpu_writes_report_and_table(tmp_path, capsys, monkeypatch):
    from core.devices import FP8_EMULATE_ENV

    monkeypatch.setenv(FP8_EMULATE_ENV, "1")  # fp8's rows measured here too, emulated
    out = tmp_path / "suite.json"
    # No time budget: on a loaded machine the suite's own budget would skip sections, which is its job on a GPU
    # box but not what this test checks (that every section runs and reports).
    code = gpu_suite.main(["--device", "cpu", "--quick", "--out", str(out), "--budget-s", "1e9"])
    stdout, stderr = capsys.readouterr()
    assert code == 0, stdout + stderr
    report = json.loads(out.read_text())
    s = report["sections"]
    assert set(s) == SECTIONS
    assert report["errors"] == {} and report["skipped"] == {}
    assert report["compile_backend"] == "eager"  # the smoke test's compile: graphs captured, no kernels built
    rows = {r["label"]: r for r in s["sweep"]["rows"]}
    for label in ("fp32", "bf16", "bf16 + act. ckpt", "bf16 + compile", "fp32 + compile"):
        assert rows[label]["status"] == "ok", rows[label]
        assert rows[label]["samples_per_second"] > 0
    assert rows["bf16 + compile"]["compiled"] and rows["bf16 + compile"]["compile_seconds"] > 0
    assert rows["bf16 + act. ckpt"]["checkpointed"] and not rows["bf16"]["checkpointed"]
    assert rows["tf32"]["status"] == rows["fp16"]["status"] == "skipped"  # GPU modes
    assert s["sweep"]["reference"] == "fp32 eager" and rows["bf16 + compile"]["speedup"] > 0
    # Training: bf16 and fp32 evaluated on the same validation users, fp16 a GPU mode.
    runs = s["training"]["runs"]
    assert runs["bf16"]["status"] == runs["fp32"]["status"] == "ok"
    assert runs["fp16"]["status"] == "skipped"
    quality = s["training"]["quality"]
    assert quality["metric"] == "hr@10_full_filtered" and quality["users"] == runs["fp32"]["users_evaluated"] > 0
    assert quality["noise"] > 0 and quality["diff"] == pytest.approx(quality["bf16"] - quality["fp32"])
    assert s["mfu"]["flops_per_step"] > 0
    assert set(report["summary"]["mfu_by_row"]) == {
        "bf16",
        "bf16 + compile",
        "fp8",
        "bf16-pure",
        "wide bf16",
        "wide fp8",
    }
    # fp8 and bf16-pure beside fp32, then fp32, bf16 and fp8 on the wider shape, compared among themselves.
    assert rows["fp8"]["status"] == rows["bf16-pure"]["status"] == "ok" and rows["fp8"]["loss"] > 0
    wide = {r["label"]: r for r in s["fp8"]["wide"]["rows"]}
    assert set(wide) == {"fp32", "bf16", "fp8"} and all(r["status"] == "ok" for r in wide.values()), wide
    assert s["fp8"]["wide"]["shape"] == gpu_suite.QUICK_LARGE_SHAPE and wide["fp8"]["speedup"] > 0
    # Profile: CPU self time on the CPU, every category that the step has shows up, the shares add up.
    profile = s["profile"]
    assert profile["time"] == "CPU self time" and sum(profile["share"].values()) == pytest.approx(1.0)
    for category in ("attention", "matmuls", "chunked loss", "optimizer", "layer norm"):
        assert profile["share"][category] > 0, (category, profile["share"])
    assert 0 < len(profile["top_ops"]) <= 10
    # Data path: the staged run went through HostStaging, the others did not.
    datapath = s["datapath"]
    assert datapath["host_staged"]["staging"] and not datapath["host_plain"]["staging"]
    assert datapath["staged_over_device"] > 0 and datapath["batch_bytes"] > 0
    assert s["compile"]["overhead"]["compiled"] and s["overhead"]["compiled"] is False
    targets = {t["target"]: t for t in report["targets"]}
    assert len(targets) == 6 and all(t["result"] == "n/a" for t in targets.values())  # the targets are for GPUs
    assert all(t["value"] is not None for t in targets.values())  # ... but every value is measured
    assert "best: bf16" in targets["bf16 peak memory <= 0.6x fp32"]["detail"]
    lines = stdout.strip().splitlines()
    assert lines[-1].startswith("  target ")  # the table is printed last
    assert any(line.startswith("  profile (bf16") for line in lines)
    assert any(line.startswith("  datapath (bf16)") for line in lines)
    assert any(line.startswith("  wide 64 fp8") for line in lines)


def test_quality_check_is_two_binomial_standard_errors():
    fp32 = {"quality": 0.30, "quality_metric": "hr@10_full_filtered", "users_evaluated": 2000}
    se = (0.3 * 0.7 / 2000) ** 0.5  # about the standard error at p ~ 0.3
    close = gpu_suite.quality_check({"quality": 0.30 + 1.9 * se}, fp32)
    assert close["within_noise"] and close["noise"] == pytest.approx(2 * close["standard_error"])
    far = gpu_suite.quality_check({"quality": 0.35}, fp32)
    assert not far["within_noise"] and far["diff"] == pytest.approx(0.05)
    assert gpu_suite.quality_check({"quality": None}, fp32) is None


def _report(**sections) -> dict:
    rows = [
        {
            "label": "fp32",
            "mode": "fp32",
            "status": "ok",
            "speedup": 1.0,
            "memory_ratio": 1.0,
            "samples_per_second": 100.0,
            "step_ms": 100.0,
            "checkpointed": False,
            "compiled": False,
        },
        {
            "label": "bf16",
            "mode": "bf16",
            "status": "ok",
            "speedup": 2.5,
            "memory_ratio": 0.7,
            "samples_per_second": 250.0,
            "step_ms": 40.0,
            "checkpointed": False,
            "compiled": False,
        },
        {
            "label": "bf16 + act. ckpt",
            "mode": "bf16",
            "status": "ok",
            "speedup": 2.0,
            "memory_ratio": 0.5,
            "samples_per_second": 200.0,
            "step_ms": 50.0,
            "checkpointed": True,
            "compiled": False,
        },
        {
            "label": "bf16 + compile",
            "mode": "bf16",
            "status": "ok",
            "speedup": 3.0,
            "memory_ratio": 0.7,
            "samples_per_second": 300.0,
            "step_ms": 1000 / 30,
            "checkpointed": False,
            "compiled": True,
        },
    ]
    return {"sections": {"sweep": {"rows": rows}, **sections}}


def test_targets_on_cuda_pick_the_best_rows_and_say_which():
    overhead = {"mode": "bf16", "compiled": False, "engine_over_minimal": 0.95}
    compiled = {"mode": "bf16", "compiled": True, "engine_over_minimal": 0.99}
    report = _report(
        mfu={"mode": "bf16", "flops_per_step": 1e12, "matmul_ceiling_flops": 60e12},
        overhead=overhead,
        compile={"overhead": compiled},
        training={"quality": {"diff": 0.01, "noise": 0.02, "users": 2000}},
        datapath={"staged_over_device": 0.9, "copy_hidden": False},
    )
    report["summary"] = gpu_suite.derive(report)
    targets = {t["target"]: t for t in gpu_suite.check_targets(report, is_cuda=True)}
    memory = targets["bf16 peak memory <= 0.6x fp32"]
    assert (memory["value"], memory["result"], memory["detail"]) == (0.5, "PASS", "best: bf16 + act. ckpt")
    mfu = targets["bf16 MFU >= 45% of matmul ceiling"]  # 1 TFLOP x 30 steps/s of 60 TFLOP/s: the compiled row
    assert mfu["value"] == pytest.approx(0.5) and mfu["result"] == "PASS" and "bf16 + compile" in mfu["detail"]
    engine = targets["engine / minimal loop >= 0.97"]  # compile measured faster: compile on both sides counts
    assert engine["value"] == 0.99 and engine["result"] == "PASS" and "compile on both sides" in engine["detail"]
    assert targets["bf16 samples/s >= 2x fp32"]["result"] == "PASS"
    assert targets["bf16 val HR@10 within noise of fp32"]["result"] == "PASS"
    assert targets["host data: staged >= 0.95x on device"]["result"] == "FAIL"
    # Without the compiled figure the eager one counts, and says so; off CUDA nothing is judged.
    del report["sections"]["compile"]
    report["summary"] = gpu_suite.derive(report)
    targets = {t["target"]: t for t in gpu_suite.check_targets(report, is_cuda=True)}
    engine = targets["engine / minimal loop >= 0.97"]
    assert engine["result"] == "FAIL" and engine["detail"].startswith("eager on both sides")
    assert {t["result"] for t in gpu_suite.check_targets(report, is_cuda=False)} == {"n/a"}
