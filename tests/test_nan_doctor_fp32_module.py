"""Issue 44 item 4: the NaN doctor's "fp32 for the offending module" fix (RunConfig.fp32_modules). The tiny task's
fc1 squares its outputs times 1e5, which overflows float16 but not float32; the CPU is told it runs fp16 (torch has
CPU fp16 autocast and GradScaler), so the real fp16 path runs here."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from core.devices import device_info
from core.engine.events import RunEnded, RunStarted, event_or_none
from core.engine.precision import resolve_precision
from core.engine.trainer import train
from core.errors import ConfigError
from core.files import read_jsonl
from tests.test_devices_precision import CPU_WITH_FP16

FP16 = {"precision": "fp16", "max_steps": 60, "log_interval": 5, "checkpoint_interval": 5, "eval_interval": 10**6}


@pytest.fixture
def fp16_overflow(monkeypatch):
    """fc1 (16 outputs) overflows in float16; every device list names the CPU with fp16."""
    original = torch.nn.Linear.forward

    def forward(self, x):
        out = original(self, x)
        return torch.log1p((out * 1e5).square()) if self.out_features == 16 else out

    monkeypatch.setattr(torch.nn.Linear, "forward", forward)
    monkeypatch.setattr("core.devices.list_devices", lambda free_memory=False: [CPU_WITH_FP16])
    monkeypatch.setattr("core.engine.trainer.list_devices", lambda free_memory=False: [CPU_WITH_FP16])


def test_fp32_for_the_offending_module_cures_an_fp16_overflow_and_resumes_with_it(tiny_config, fp16_overflow, capsys):
    import shlex

    from core.cli.main import main
    from core.cli.train import fix_command

    diverged = train(tiny_config(**FP16))
    assert diverged.status == "failed" and "first produced by module fc1" in diverged.message, diverged.message
    fix = next(f for f in diverged.fixes if f["label"] == "fp32 for module fc1")
    folder = tiny_config().out_dir
    assert fix["changes"] == {"fp32_modules": "fc1", "out_dir": f"{folder}-fp32-fc1"}

    argv = shlex.split(fix_command(fix))
    assert argv[argv.index("--fp32-modules") + 1] == "fc1" and argv[argv.index("--resume") + 1] == diverged.checkpoint
    assert main([*argv[1:], "--max-steps", "60", "--json"]) == 0, capsys.readouterr().err
    run = Path(f"{folder}-fp32-fc1")
    assert main(["train", "--resume", str(run / "checkpoint.pt"), "--max-steps", "80"]) == 0  # the flag not given
    events = [event_or_none(r) for r in read_jsonl(run / "metrics.jsonl")]
    starts, ends = ([e for e in events if isinstance(e, kind)] for kind in (RunStarted, RunEnded))
    assert [s.config["fp32_modules"] for s in starts] == ["fc1", "fc1"] and starts[0].start_step > 0
    assert "in float32 outside autocast: fc1" in starts[1].notes
    assert [e.status for e in ends] == ["completed"] * 2 and all(math.isfinite(e.final_loss) for e in ends)
    assert 'fp32_modules = "fc1"' in (run / "config.toml").read_text()


def test_fp32_modules_in_bf16_pure_keep_float32_weights_and_unknown_names_are_refused(tiny_config):
    from core.tasks import create_task

    model = create_task("tiny", {}).build_model({})
    plan = resolve_precision("bf16-pure", device_info("cpu"))
    assert plan.prepare_model(model, "fc1") == ["in float32 outside autocast: fc1"]
    assert model.fc1.weight.dtype == torch.float32 and model.fc2.weight.dtype == torch.bfloat16
    with plan.autocast():
        out = model.fc1(torch.randn(4, 10, dtype=torch.bfloat16))
    assert out.dtype == torch.float32
    with pytest.raises(ConfigError, match="fp32_modules: the model has no module 'fc9'; its modules include fc1"):
        plan.prepare_model(create_task("tiny", {}).build_model({}), "fc9")
    recorder = []
    ended = train(tiny_config(precision="bf16-pure", max_steps=10, fp32_modules="fc1"), sink=recorder.append)
    assert ended.status == "completed", ended.message
    notes = next(e for e in recorder if isinstance(e, RunStarted)).notes  # fc1's 176 values take 4 bytes each
    assert any("adamw state take 3.02 KiB instead of 3.28 KiB in fp32 (210 parameters" in n for n in notes), notes


def test_fp8_leaves_fp32_modules_out_of_float8(monkeypatch):
    pytest.importorskip("torchao")
    from core.devices import FP8_EMULATE_ENV, cpu_info, with_low_precision

    monkeypatch.setenv(FP8_EMULATE_ENV, "1")
    plan = resolve_precision("fp8", with_low_precision(cpu_info()))
    model = torch.nn.Sequential(torch.nn.Linear(32, 32), torch.nn.Linear(32, 32), torch.nn.Linear(32, 1))
    notes = plan.prepare_model(model, "0")
    assert "1 of 3 Linear layers train in float8: 1; left in bf16: 0 (in float32: fp32_modules); 2" in notes[1]
    assert type(model[0]) is torch.nn.Linear
    with plan.autocast():
        assert model[0](torch.randn(2, 32)).dtype == torch.float32
