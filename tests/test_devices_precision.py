"""Device listing, precision plans, and the dtype autocast really uses inside forward."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os

import pytest
import torch

from core.devices import FP8_EMULATE_ENV, DeviceInfo, cpu_info, device_info, list_devices
from core.engine.events import RunStarted, StepMetrics
from core.engine.precision import resolve_precision
from core.engine.trainer import train
from core.errors import DeviceError, PrecisionError

FAKE_GPU = DeviceInfo(
    id="cuda:0",
    type="cuda",
    name="Fake T4",
    memory_total=16 * 2**30,
    capability="7.5",
    fp16=True,
    tensor_cores=True,
    precisions=("fp32", "fp16"),
    unsupported={"bf16": "needs 8.0", "tf32": "needs 8.0"},
)
FAKE_AMPERE = dataclasses.replace(
    FAKE_GPU,
    name="Fake A100",
    capability="8.0",
    bf16=True,
    tf32=True,
    precisions=("fp32", "tf32", "fp16", "bf16"),
    unsupported={},
)


def test_cpu_is_listed_first_with_json_fields():
    devices = list_devices()
    assert devices[0].id == "cpu"
    data = devices[0].to_dict()
    for key in ("id", "type", "name", "memory_total", "precisions", "unsupported"):
        assert key in data
    assert data["memory_total"] > 0
    fp8 = os.environ.get(FP8_EMULATE_ENV) == "1" and importlib.util.find_spec("torchao") is not None  # emulated
    assert set(data["precisions"]) == {"fp32", "bf16", "bf16-pure"} | ({"fp8"} if fp8 else set())
    assert set(data["unsupported"]) == {"fp16", "tf32"} | (set() if fp8 else {"fp8"})
    json.dumps([d.to_dict() for d in devices])  # JSON-serialisable


def test_unknown_device_is_refused_naming_available_ones():
    with pytest.raises(DeviceError, match=r"cuda:7.*available: cpu"):
        device_info("cuda:7", [cpu_info()])


def test_auto_picks_accelerator_then_cpu():
    assert device_info("auto", [cpu_info()]).id == "cpu"
    assert device_info("auto", [cpu_info(), FAKE_GPU]).id == "cuda:0"


@pytest.mark.parametrize(
    ("device", "mode", "dtype", "scaler"),
    [
        (FAKE_AMPERE, "auto", torch.bfloat16, False),
        (FAKE_GPU, "auto", torch.float16, True),
        (FAKE_AMPERE, "fp16", torch.float16, True),
        (FAKE_AMPERE, "tf32", None, False),
        (FAKE_AMPERE, "fp32", None, False),
    ],
)
def test_plans_for_gpus(device, mode, dtype, scaler):
    plan = resolve_precision(mode, device)
    assert plan.autocast_dtype == dtype
    assert plan.use_scaler is scaler
    assert plan.tf32 is (plan.mode == "tf32")


def test_auto_on_cpu_is_fp32():
    assert resolve_precision("auto", cpu_info()).mode == "fp32"


def test_refusal_names_mode_device_and_alternatives():
    with pytest.raises(PrecisionError) as err:
        resolve_precision("fp16", cpu_info())
    message = str(err.value)
    assert "fp16" in message and "cpu" in message and "bf16" in message
    with pytest.raises(PrecisionError, match="bf16.*Fake T4.*fp32, fp16"):
        resolve_precision("bf16", FAKE_GPU)


@pytest.mark.parametrize(("mode", "expected"), [("fp32", torch.float32), ("bf16", torch.bfloat16)])
def test_autocast_dtype_observed_inside_forward(tiny_config, recorder, mode, expected):
    """Run the real trainer and look at the dtype the first Linear layer actually produced."""
    seen = []
    from core.tasks.tiny.task import TinyClassifier

    original = TinyClassifier.forward

    def spy(self, x):
        out = self.fc1(x)
        seen.append((out.dtype, self.fc1.weight.dtype, torch.is_autocast_enabled("cpu")))
        return original(self, x)

    TinyClassifier.forward = spy
    try:
        ended = train(tiny_config(precision=mode, max_steps=3), sink=recorder)
    finally:
        TinyClassifier.forward = original
    assert ended.status == "completed"
    out_dtype, param_dtype, autocast_on = seen[0]
    assert out_dtype == expected
    assert param_dtype == torch.float32  # parameters stay fp32
    assert autocast_on is (mode == "bf16")
    started = recorder.of(RunStarted)[0]
    assert started.autocast_dtype == str(expected).removeprefix("torch.")
    assert started.scaler is False


# A CPU that claims fp16, so the real GradScaler code path runs here (torch has CPU fp16 autocast + scaler).
CPU_WITH_FP16 = dataclasses.replace(cpu_info(), precisions=("fp32", "fp16", "bf16"), unsupported={})


def test_scaler_is_on_only_for_fp16():
    assert resolve_precision("fp16", FAKE_GPU).use_scaler
    assert resolve_precision("fp16", CPU_WITH_FP16).make_scaler().is_enabled()
    for mode in ("fp32", "bf16"):
        assert not resolve_precision(mode, CPU_WITH_FP16).make_scaler().is_enabled()
    for mode in ("fp32", "tf32", "bf16"):
        assert not resolve_precision(mode, FAKE_AMPERE).use_scaler


def test_fp16_run_reports_scale_and_float16_autocast(tiny_config, recorder):
    ended = train(tiny_config(precision="fp16", max_steps=10), sink=recorder, devices=[CPU_WITH_FP16])
    assert ended.status == "completed"
    started = recorder.of(RunStarted)[0]
    assert (started.autocast_dtype, started.param_dtype, started.scaler) == ("float16", "float32", True)
    steps = recorder.of(StepMetrics)
    assert steps and all(s.grad_scale is not None and s.grad_scale > 0 for s in steps)


def test_only_the_devices_command_asks_gpus_for_free_memory(monkeypatch, capsys):
    """Free memory needs a CUDA context on each GPU; the window, the launcher and DDP ranks must not hold one
    on GPUs they don't train on, so a plain listing never asks; `amp-console devices` (one-shot) does."""
    from types import SimpleNamespace

    from core import devices
    from core.cli.main import main

    asked = []
    props = SimpleNamespace(major=9, minor=0, name="Fake H100", total_memory=80 * 2**30, multi_processor_count=132)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index: asked.append(index) or (60 * 2**30, 80 * 2**30))

    listed = devices.list_devices()
    assert [d.id for d in listed[1:]] == ["cuda:0", "cuda:1"]
    assert asked == [] and listed[1].memory_total == 80 * 2**30 and listed[1].memory_free is None
    assert "bf16" in listed[1].precisions and "tf32" in listed[1].precisions

    assert main(["devices", "--json"]) == 0
    assert asked == [0, 1]
    reported = json.loads(capsys.readouterr().out)
    assert reported[1]["memory_free"] == 60 * 2**30


@pytest.mark.parametrize(
    "flags, fast, named, not_named",
    [
        # The reported CPU: avx512_bf16 without AMX must not claim AMX.
        ({"avx512f", "avx512_bf16"}, True, ["avx512_bf16"], ["AMX"]),
        ({"avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"}, True, ["AMX bf16 tiles", "avx512_bf16"], []),
        ({"amx_bf16"}, False, ["emulated"], ["hardware:", "tiles"]),  # bf16 tiles need the tile unit too
        ({"avx2", "fma"}, False, ["emulated", "slower than fp32"], ["hardware:"]),
        ({"fp", "asimd", "bf16"}, True, ["Arm bf16"], ["AMX"]),  # aarch64's Features line
        (set(), False, ["unknown"], ["emulated"]),
    ],
)
def test_cpu_bf16_summary_names_only_what_the_flags_have(flags, fast, named, not_named):
    from core.devices import cpu_bf16_support

    has, line = cpu_bf16_support(flags)
    assert has is fast
    assert all(word in line for word in named), line
    assert not any(word in line for word in not_named), line


def test_cpu_info_json_agrees_with_its_summary(monkeypatch):
    from core import devices

    monkeypatch.setattr(devices, "_cpu_flags", lambda: {"avx512f", "avx512_bf16", "amx_bf16"})
    info = devices.cpu_info()
    assert info.details["amx"] is False and info.details["avx512_bf16"] is True and info.bf16_fast
    assert "AMX" not in info.details["bf16_speed"] and "avx512_bf16" in info.details["bf16_speed"]
