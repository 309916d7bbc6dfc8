"""Issue 44 item 4: a run whose loss goes non-finite names the module and offers re-runs that may cure it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook

from core.devices import FP8_EMULATE_ENV
from core.engine.events import RunEnded
from core.engine.trainer import train

# lr tops out at 10, where the tiny task's loss grows without reaching inf soon: fc1 overflows from step 12 on.
DIVERGE = {
    "precision": "bf16",
    "lr": 10,
    "optimizer": "sgd",
    "max_steps": 40,
    "log_interval": 5,
    "checkpoint_interval": 5,
}


def overflow_fc1(monkeypatch) -> None:
    original, calls = torch.nn.Linear.forward, {"n": 0}

    def forward(self, x):
        out = original(self, x)
        if self.out_features == 16 and self.training:
            calls["n"] += 1
            out = out * float("inf") if calls["n"] > 12 else out
        return out

    monkeypatch.setattr(torch.nn.Linear, "forward", forward)


def diverged(tiny_config, recorder, monkeypatch, **overrides) -> RunEnded:
    overflow_fc1(monkeypatch)
    ended = train(tiny_config(**{**DIVERGE, **overrides}, eval_interval=10**6), sink=recorder)
    assert ended.status == "failed", ended.message
    return ended


def test_bf16_divergence_names_the_module_and_offers_fixes(tiny_config, recorder, monkeypatch):
    ended = diverged(tiny_config, recorder, monkeypatch)
    assert "first produced by module fc1" in ended.message and ended.checkpoint
    labels = [fix["label"] for fix in ended.fixes]
    assert len(labels) >= 2 and labels[0].startswith("lower LR") and labels[1].startswith("fp32")
    folder = tiny_config().out_dir
    lower = ended.fixes[0]
    assert lower["changes"] == {"lr": 1.0, "out_dir": f"{folder}-lr-div10"}
    assert lower["resume"] == ended.checkpoint and lower["note"] == f"rerun_of: {folder}, fix: {labels[0]}"


def test_cli_prints_each_fix_as_a_command_that_runs(tmp_path, monkeypatch, capsys):
    import shlex

    from core.cli.main import main
    from core.engine.run_record import read_note, read_run
    from core.runs.compare import differing_config

    forward = torch.nn.Linear.forward
    overflow_fc1(monkeypatch)
    folder = tmp_path / "run"
    flags = ["--task", "tiny", "--device", "cpu", "--precision", "bf16", "--lr", "10", "--optimizer", "sgd"]
    flags += ["--max-steps", "40", "--log-interval", "5", "--checkpoint-interval", "5", "--out", str(folder)]
    assert main(["train", *flags]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if "re-run with" in line]
    assert len(lines) >= 2 and "lower LR" in lines[0] and "fp32" in lines[1]
    argv = shlex.split(lines[0].split(": ", 1)[1])
    assert argv[:2] == ["amp-console", "train"] and "--resume" in argv and argv[argv.index("--lr") + 1] == "1"
    monkeypatch.setattr(torch.nn.Linear, "forward", forward)  # not undo(): it would drop conftest's runs root too
    assert main([*argv[1:], "--max-steps", "12"]) == 0
    note = f"rerun_of: {folder}, fix: lower LR to 1"
    assert read_note(f"{folder}-lr-div10")[0] == note and read_run(f"{folder}-lr-div10")["notes"][-1] == note
    assert main(["train", "--resume", f"{folder}-lr-div10/checkpoint.pt", "--max-steps", "14"]) == 0
    assert note not in read_run(f"{folder}-lr-div10")["notes"]  # a resume's start notes are its own
    differing = differing_config([read_run(folder), read_run(f"{folder}-lr-div10")])
    assert "lr" in differing and "note" not in differing  # the note is the runs' own row in a comparison


@pytest.fixture
def poison_fc2():
    """From optimizer step 13 on, each step writes NaN into fc2's weight (any optimizer: a global step hook): the
    weights diverge, no module overflows on the weights the run had before."""
    calls = {"n": 0}

    def poison(optimizer, _args, _kwargs):
        calls["n"] += 1
        if calls["n"] > 12:
            with torch.no_grad():
                for group in optimizer.param_groups:
                    for param in group["params"]:
                        if param.shape == (2, 16):
                            param.fill_(float("nan"))

    handle = register_optimizer_step_post_hook(poison)
    yield
    handle.remove()


@pytest.mark.parametrize("precision", ["fp32", "bf16-pure"])
def test_weights_that_diverged_blame_no_module(precision, tiny_config, recorder, poison_fc2):
    ended = train(tiny_config(**{**DIVERGE, "precision": precision}, eval_interval=10**6), sink=recorder)
    assert ended.status == "failed" and "is now non-finite" in ended.message
    assert "first produced by" not in ended.message  # fc2 makes NaN only from its own NaN weights
    assert not any(fix["label"].startswith("fp32 for module") for fix in ended.fixes)


@pytest.mark.parametrize("precision", ["fp32", "bf16-pure", "fp8"])
def test_an_overflow_is_named_on_the_last_good_weights_in_every_mode(precision, tiny_config, recorder, monkeypatch):
    if precision == "fp8":
        pytest.importorskip("torchao")
        monkeypatch.setenv(FP8_EMULATE_ENV, "1")
    ended = diverged(tiny_config, recorder, monkeypatch, precision=precision)
    assert "first produced by module fc1" in ended.message and "parameter fc1.weight" in ended.message
    assert any(fix["label"] == "fp32 for module fc1" for fix in ended.fixes) == (precision != "fp32")


DIVERGING_TASK = """
import os

_plain_build = RegressionTask.build_model


def _overflow(module, inputs, output):  # while AMP_TEST_DIVERGE is set: inf from the 13th training forward on
    if module.training and os.environ.get("AMP_TEST_DIVERGE"):
        module.calls = getattr(module, "calls", 0) + 1
        return output * float("inf") if module.calls > 12 else output
    return output


def _overflowing_model(self, info):
    model = _plain_build(self, info)
    model[0].register_forward_hook(_overflow)
    return model


RegressionTask.build_model = _overflowing_model
"""


@pytest.mark.parametrize("every", [5, 1000], ids=["from-its-checkpoint", "from-the-start"])
def test_a_task_files_fixes_are_commands_that_run_as_printed(tmp_path, monkeypatch, capsys, every):
    import shlex

    from core.cli.main import main
    from core.engine.run_record import read_run

    source = Path(__file__).parent / "fixtures" / "user_tasks" / "regression_task.py"
    path = tmp_path / "diverging_task.py"
    path.write_text(source.read_text() + DIVERGING_TASK)
    monkeypatch.setenv("AMP_TEST_DIVERGE", "1")
    folder = tmp_path / "run"
    flags = ["--task", str(path), "--device", "cpu", "--precision", "bf16", "--option", "hidden=8", "--lr", "0.003"]
    flags += ["--max-steps", "20", "--log-interval", "5", "--checkpoint-interval", str(every), "--out", str(folder)]
    assert main(["train", *flags]) == 1
    line = next(line for line in capsys.readouterr().out.splitlines() if "re-run with lower LR" in line)
    argv = shlex.split(line.split(": ", 1)[1])
    assert argv[argv.index("--task") + 1] == str(path)  # the file, not a name only it registers
    assert ("--resume" in argv) == (every == 5)
    monkeypatch.delenv("AMP_TEST_DIVERGE")
    assert main(argv[1:]) == 0, capsys.readouterr().err
    run = read_run(f"{folder}-lr-div10")["config"]
    assert run["lr"] == 0.0003 and run["task_options"]["hidden"] == 8 and run["precision"] == "bf16"
