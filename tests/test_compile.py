"""RunConfig.compile: the same training as eager, compile time apart, no recompiles in steady state (a short
last batch and evaluations included), checkpoints that resume either way, the eager fallback, DDP, the finders.

torch.compile on the CPU builds C++ (inductor): the first compile in a fresh cache takes ~30 s, later ones a
few seconds (inductor's on-disk cache). Tiny models and few steps keep this file near a minute."""

from __future__ import annotations

import json

import pytest
import torch

from core.config import RunConfig
from core.engine import compiling
from core.engine.checkpoints import export_checkpoint, load_checkpoint
from core.engine.events import EvalMetrics, RunStarted, StepMetrics
from core.engine.trainer import Trainer

# torch.compile imports parts of torch that warn of their own deprecations (torch.jit.script_method); the
# suite turns warnings into errors, which would make the compile "fail" and the run fall back to eager.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:torch.*"),
]

# 1000 samples: 800 training rows = 12 batches of 64 and a short one of 32, which training drops; validation
# (200 rows) is evaluated in batches of 4096, so its only batch is "short" too.
TINY = {
    "device": "cpu",
    "precision": "fp32",
    "log_interval": 4,
    "task_options": {"samples": 1000},
    "seed": 1,
    "threads": 1,
}


def run(tmp_path, name, recorder=None, resume=None, **overrides) -> tuple[Trainer, object]:
    cfg = RunConfig.for_task("tiny", **{**TINY, "min_steps": 0, "out_dir": str(tmp_path / name), **overrides})
    trainer = Trainer(cfg, sink=recorder, resume_from=resume)
    return trainer, trainer.run()


def step_losses(folder) -> list[float]:
    lines = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [e["loss"] for e in lines if e["event"] == "StepMetrics"]


def close(a: list[float], b: list[float], tol: float = 1e-4) -> bool:
    return len(a) == len(b) and all(abs(x - y) <= tol * max(1.0, abs(x)) for x, y in zip(a, b))


def test_compiled_training_matches_eager_without_recompiling(tmp_path, recorder, monkeypatch):
    """Two epochs with a dropped short batch and an evaluation after each: the compiled run's losses and metrics
    are eager's (to float rounding: inductor fuses ops), the compile time is its own note, and nothing is
    compiled after the warm-up (dynamo is told to raise on a recompile, and its frame counter is checked)."""
    _, eager = run(tmp_path, "eager", epochs=2)
    monkeypatch.setattr(torch._dynamo.config, "error_on_recompile", True)
    trainer, compiled = run(tmp_path, "compiled", recorder, epochs=2, compile=True)
    assert eager.status == compiled.status == "completed", compiled.message
    assert trainer.steps_per_epoch == 12 and trainer.state.step == 24  # the short 13th batch is not trained on
    assert close(step_losses(tmp_path / "eager"), step_losses(tmp_path / "compiled"))
    assert compiled.metrics["accuracy"] == pytest.approx(eager.metrics["accuracy"], abs=0.006)  # one row of 200
    assert len(recorder.of(EvalMetrics)) == 2
    notes = recorder.of(RunStarted)[0].notes
    line = next(n for n in notes if n.startswith("compile: "))
    assert trainer.compile_seconds is not None, line
    assert f"in {trainer.compile_seconds:.1f} s" in line and trainer.compile_seconds > 0
    assert compiling.frames_compiled() == trainer.compile_frames  # steady state, evaluations included: none
    # The first window is timed after the compile: its samples/s is not dragged down by tens of seconds.
    first = recorder.of(StepMetrics)[0]
    assert first.elapsed_seconds < trainer.compile_seconds


def test_checkpoints_resume_compiled_from_eager_and_eager_from_compiled(tmp_path):
    """A compiled run's checkpoint holds plain keys, resumes eager and exports; an eager one resumes compiled;
    both continue as the uninterrupted eager run does."""
    run(tmp_path, "whole", max_steps=36)
    run(tmp_path, "eager", max_steps=24)
    run(tmp_path, "compiled", max_steps=24, compile=True)
    state = load_checkpoint(tmp_path / "compiled" / "checkpoint.pt")
    assert state["config"]["compile"] is True and state["step"] == 24
    assert set(state["model"]) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    _, weights, _ = export_checkpoint(tmp_path / "compiled" / "checkpoint.pt", tmp_path / "export" / "tiny")
    assert weights.exists()

    _, to_eager = run(tmp_path, "to-eager", resume=tmp_path / "compiled" / "checkpoint.pt", max_steps=36)
    trainer, to_compiled = run(
        tmp_path, "to-compiled", resume=tmp_path / "eager" / "checkpoint.pt", max_steps=36, compile=True
    )
    assert to_eager.status == to_compiled.status == "completed"
    assert trainer.compile_seconds is not None
    whole = step_losses(tmp_path / "whole")[-3:]  # steps 28, 32, 36
    assert close(step_losses(tmp_path / "to-eager")[-3:], whole)
    assert close(step_losses(tmp_path / "to-compiled")[-3:], whole)


def test_a_failing_compiler_falls_back_to_eager_with_one_line(tmp_path, recorder, monkeypatch):
    """torch.compile raising at the first call (here: a backend that fails as a missing C++ compiler does)."""

    def no_compiler(gm, example_inputs):
        raise RuntimeError(
            "InvalidCxxCompiler: No working C++ compiler found in torch._inductor.config.cpp.cxx: "
            "(None, 'g++')\nmore details on a second line"
        )

    monkeypatch.setattr(compiling, "compile_model", lambda model, mode: torch.compile(model, backend=no_compiler))
    _, eager = run(tmp_path, "eager", max_steps=12)
    trainer, ended = run(tmp_path, "fallback", recorder, max_steps=12, compile=True)
    assert ended.status == "completed"
    assert trainer.compile_seconds is None
    assert trainer.model is trainer.raw_model  # the plain module, not a wrapper that would fail again
    line = next(n for n in recorder.of(RunStarted)[0].notes if n.startswith("compile: "))
    assert line.startswith("compile: torch.compile failed (") and line.endswith("; running eager")
    assert "No working C++ compiler" in line and "\n" not in line and "second line" not in line
    assert step_losses(tmp_path / "fallback") == step_losses(tmp_path / "eager")


def test_a_missing_cxx_compiler_falls_back_to_eager(tmp_path, recorder, monkeypatch):
    """The real thing: inductor pointed at a C++ compiler that is not there, with empty caches."""
    import torch._inductor.config as inductor

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor-cache"))
    with inductor.patch({"cpp.cxx": (str(tmp_path / "no-such-g++"),), "fx_graph_cache": False}):
        trainer, ended = run(tmp_path, "no-cxx", recorder, max_steps=8, compile=True)
    assert ended.status == "completed" and trainer.compile_seconds is None
    line = next(n for n in recorder.of(RunStarted)[0].notes if n.startswith("compile: "))
    assert line == (
        f"compile: torch.compile failed (InvalidCxxCompiler: No working C++ compiler found in "
        f"torch._inductor.config.cpp.cxx: ('{tmp_path / 'no-such-g++'}',)); running eager"
    )


def ddp_config(out: str, **overrides) -> RunConfig:
    return RunConfig.for_task("tiny", **{**TINY, "seed": 3, "max_steps": 12, "out_dir": out, **overrides})


def _compiled_on_each_rank(rank: int, out: str) -> dict:
    from core.engine.distributed import DistContext

    trainer = Trainer(ddp_config(out, batch_size=32, compile=True), dist_ctx=DistContext.from_env())
    ended = trainer.run()
    return {"status": ended.status, "compile_seconds": trainer.compile_seconds, "notes": list(trainer.notes)}


def test_ddp_with_compile_matches_one_eager_process(tmp_path):
    """2 gloo processes (tests/test_distributed.run_ranks), each compiling its replica before DDP wraps it: the
    losses of one eager process (this one) at the same global batch (as tests/test_distributed checks for eager
    DDP)."""
    from tests.test_distributed import run_ranks

    assert Trainer(ddp_config(str(tmp_path / "one"), batch_size=64)).run().status == "completed"
    zero, one = run_ranks(_compiled_on_each_rank, str(tmp_path / "two"), timeout=450)
    assert zero["status"] == one["status"] == "completed"
    assert zero["compile_seconds"] is not None and one["compile_seconds"] is not None  # each rank compiled
    assert any(note.startswith("compile: compiled (mode default) in") for note in zero["notes"]), zero["notes"]
    assert close(step_losses(tmp_path / "one"), step_losses(tmp_path / "two"))


def test_the_lr_finder_runs_eager_and_says_so(tmp_path):
    from core.lab.lr_finder import find_lr

    cfg = RunConfig.for_task("tiny", **{**TINY, "compile": True})
    result = find_lr(cfg, steps=20)
    assert any("eager" in note and "compile" in note for note in result.notes), result.notes


def test_the_precision_sweep_measures_compiled_rows_against_fp32_eager(capsys):
    from core.cli.lab import print_sweep
    from core.lab.precision_sweep import run_sweep

    cfg = RunConfig.for_task("tiny", **TINY)
    result = run_sweep(cfg, ["fp32"], steps=5, repeats=1, isolate=False, compile_options=[True, False])
    assert [(r.label, r.status) for r in result.rows] == [("fp32", "ok"), ("fp32 + compile", "ok")]
    eager, compiled = result.rows
    assert eager.compile_seconds is None and compiled.compile_seconds is not None, compiled.reason
    assert compiled.compile_seconds > 0
    assert eager.speedup == 1.0 and compiled.speedup == pytest.approx(
        compiled.samples_per_second / eager.samples_per_second
    )
    assert abs(compiled.loss - eager.loss) <= 1e-4  # the same steps: compile changes speed, not the training
    assert result.reference == "fp32 eager" and result.row("fp32", compiled=True) is compiled
    assert result.recommended == "fp32" and result.recommended_label in ("fp32", "fp32 + compile")
    print_sweep(result)
    out = capsys.readouterr().out
    assert "fp32 + compile" in out and f"compiled in {compiled.compile_seconds:.1f} s" in out
    assert "speed and mem are against fp32 eager" in out


def test_the_batch_finder_tries_sizes_eager_and_says_so(monkeypatch):
    from core.lab.batch_finder import FakeProbe, find_batch_sizes

    def no_compile(*args, **kwargs):
        raise AssertionError("the batch finder compiled")

    monkeypatch.setattr(compiling, "compile_for_run", no_compile)
    cfg = RunConfig.for_task("tiny", **{**TINY, "compile": True})
    result = find_batch_sizes(cfg, ["fp32"], probe=FakeProbe(1000, 10, 100), steps=2, eval_rows=128)
    assert result.mode("fp32").batch == 80  # what tests/test_batch_finder finds eager on this fake device
    assert any("tried eager" in note for note in result.notes), result.notes
