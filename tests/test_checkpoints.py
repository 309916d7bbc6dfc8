"""Checkpoints: atomic writes, safe loads, clear errors, and bitwise-exact resume."""

from __future__ import annotations

import os
import pickle

import pytest
import torch

from core.engine import checkpoints as ckpt
from core.engine.control import RunControl
from core.engine.events import RunStarted, StepMetrics
from core.engine.trainer import Trainer, train
from core.errors import CheckpointError, ConfigError
from core.files import atomic_write_bytes


def test_atomic_write_survives_a_crash_mid_write(tmp_path, monkeypatch):
    target = tmp_path / "checkpoint.pt"
    atomic_write_bytes(target, b"good old checkpoint")

    def crash(*args, **kwargs):
        raise OSError("power cut")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="power cut"):
        atomic_write_bytes(target, b"half-written new checkpoint")
    assert target.read_bytes() == b"good old checkpoint"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]  # no temp file left behind


class Payload:
    """Unpickling this runs code: exactly what a checkpoint from the internet must not be able to do."""

    def __reduce__(self):
        return (os.system, ("touch PWNED_MARKER",))


def test_malicious_pickle_is_refused_without_running_its_payload(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    evil = tmp_path / "evil.pt"
    torch.save({"format_version": 1, "model": Payload()}, evil)
    with pytest.raises(CheckpointError, match="refused.*could run code.*system"):
        ckpt.load_checkpoint(evil)
    assert not (tmp_path / "PWNED_MARKER").exists()
    raw = tmp_path / "raw.pkl"
    raw.write_bytes(pickle.dumps(Payload()))
    with pytest.raises(CheckpointError):
        ckpt.load_checkpoint(raw)
    assert not (tmp_path / "PWNED_MARKER").exists()


def test_truncated_and_foreign_files_are_clear_errors(tiny_config, tmp_path):
    ended = train(tiny_config(max_steps=5))
    with open(ended.checkpoint, "rb") as f:
        data = f.read()
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"checkpoint is corrupted \(truncated: .*cannot be trusted"):
        ckpt.load_checkpoint(truncated)
    plain = tmp_path / "plain.pt"
    torch.save({"weights": torch.zeros(2)}, plain)
    with pytest.raises(CheckpointError, match="not an AMP Console checkpoint"):
        ckpt.load_checkpoint(plain)
    with pytest.raises(CheckpointError, match="no such checkpoint"):
        ckpt.load_checkpoint(tmp_path / "missing.pt")


def test_checkpoint_of_another_model_names_the_keys(tiny_config):
    ended = train(tiny_config(max_steps=5))
    other = tiny_config(max_steps=10, task_options={"hidden": 32})
    with pytest.raises(ConfigError, match=r"keeps the task options.*hidden"):  # prepare_run says it first
        train(other, resume_from=ended.checkpoint)
    with pytest.raises(CheckpointError, match=r"shape mismatch.*fc1\.weight"):
        Trainer(other, resume_from=ended.checkpoint).run()
    state = ckpt.load_checkpoint(ended.checkpoint)
    state["model"]["extra.weight"] = torch.zeros(1)
    del state["model"]["fc2.bias"]
    model = torch.nn.Module()
    model.fc2 = torch.nn.Linear(16, 2)
    with pytest.raises(CheckpointError, match=r"missing keys fc2\.bias.*unexpected keys .*extra\.weight"):
        from core.tasks import create_task

        ckpt.load_model_state(create_task("tiny").build_model({}), state["model"], "x.pt")


def test_checkpoint_is_complete_and_loads_weights_only(tiny_config):
    ended = train(tiny_config(max_steps=12, schedule="cosine", warmup_steps=3))
    state = ckpt.load_checkpoint(ended.checkpoint)
    assert set(ckpt.REQUIRED_KEYS) <= set(state)
    assert state["step"] == 12 and state["scheduler"] is not None
    assert state["scaler"] == {}  # disabled outside fp16; fp16 runs store scale and growth tracker
    assert not any(k.startswith(("module.", "_orig_mod.")) for k in state["model"])
    assert state["versions"]["torch"] == str(torch.__version__)


@pytest.mark.parametrize("schedule", ["cosine", "onecycle"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_resume_is_bitwise_identical_to_an_uninterrupted_run(tmp_path, tiny_config, recorder, schedule, precision):
    common = {
        "max_steps": 40,
        "log_interval": 5,
        "schedule": schedule,
        "warmup_steps": 5,
        "precision": precision,
        "optimizer": "adamw",
        "task_options": {"samples": 2048},
        "batch_size": 32,
        "grad_accum": 2,
        "weight_decay": 0.01,
    }
    straight = train(tiny_config(out_dir=str(tmp_path / "a"), **common), sink=recorder)
    straight_losses = [s.loss for s in recorder.of(StepMetrics)]

    control, first_losses = RunControl(), []

    def stop_at_15(event):
        if isinstance(event, StepMetrics):
            first_losses.append(event.loss)
            if event.step == 15:
                control.stop()

    part = train(tiny_config(out_dir=str(tmp_path / "b"), **common), sink=stop_at_15, control=control)
    assert part.status == "stopped" and part.step == 15
    resumed_losses = []
    rest = train(
        tiny_config(out_dir=str(tmp_path / "b"), **common),
        resume_from=part.checkpoint,
        sink=lambda e: resumed_losses.append(e.loss) if isinstance(e, StepMetrics) else None,
    )
    assert rest.status == "completed" and rest.step == 40
    assert first_losses + resumed_losses == straight_losses  # exact, not approximately
    a = ckpt.load_checkpoint(straight.checkpoint)["model"]
    b = ckpt.load_checkpoint(rest.checkpoint)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_export_writes_full_checkpoint_safetensors_and_manifest(tiny_config, tmp_path):
    import json

    from safetensors.torch import load_file

    ended = train(tiny_config(max_steps=5))
    full, weights, manifest = ckpt.export_checkpoint(ended.checkpoint, tmp_path / "export" / "tiny-model")
    assert ckpt.load_checkpoint(full)["step"] == 5
    tensors = load_file(weights)
    assert set(tensors) == {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}
    assert all(t.dtype == torch.float32 for t in tensors.values())
    info = json.loads(manifest.read_text())
    assert info["task"] == "tiny" and info["precision"]["mode"] == "fp32" and "accuracy" in info["metrics"]


@pytest.mark.parametrize("payload", [b"", b"garbage" * 10, b"PK\x03\x04" + b"\x00" * 64, b"\x80\x02]q\x00."])
def test_any_garbage_file_is_a_checkpoint_error(tmp_path, payload):
    path = tmp_path / "garbage.pt"
    path.write_bytes(payload)
    with pytest.raises(CheckpointError, match="garbage.pt"):
        ckpt.load_checkpoint(path)


MODES = ("fp32", "bf16", "fp16")


def checkpoint_notes(recorder) -> list[str]:
    """The run's notes about its checkpoint (leaving out others, such as the thread count chosen)."""
    return [n for n in recorder.of(RunStarted)[0].notes if not n.startswith(("threads:", "resuming "))]


@pytest.mark.parametrize(("first", "then"), [(a, b) for a in MODES for b in MODES if a != b])
def test_resume_in_another_precision_mode(tiny_config, recorder, first, then):
    """fp16 -> fp32/bf16 drops the GradScaler state, fp32/bf16 -> fp16 starts a fresh one; a note says so."""
    from tests.test_devices_precision import CPU_WITH_FP16

    part = train(tiny_config(precision=first, max_steps=4), devices=[CPU_WITH_FP16])
    assert (ckpt.load_checkpoint(part.checkpoint)["scaler"] != {}) == (first == "fp16")
    rest = train(
        tiny_config(precision=then, max_steps=8), devices=[CPU_WITH_FP16], resume_from=part.checkpoint, sink=recorder
    )
    assert rest.status == "completed" and rest.step == 8, rest.message
    article = {"fp16": "an fp16", "fp32": "an fp32", "bf16": "a bf16"}[first]
    if first == "fp16":
        expected = f"resumed an fp16 checkpoint in {then}: its GradScaler state is not used; "
    elif then == "fp16":
        expected = f"resumed {article} checkpoint in fp16: the GradScaler starts fresh (loss scale 65536); "
    else:
        expected = f"resumed {article} checkpoint in {then}; "
    expected += (
        f"the weights and optimizer state are kept (float32) but the steps compute in {then}: not an exact resume"
    )
    assert checkpoint_notes(recorder) == [expected]
    state = ckpt.load_checkpoint(rest.checkpoint)
    assert state["precision"]["mode"] == then and (state["scaler"] != {}) == (then == "fp16")


def test_resume_in_the_same_mode_keeps_the_scaler_state_and_says_nothing(tiny_config, recorder):
    from tests.test_devices_precision import CPU_WITH_FP16

    part = train(tiny_config(precision="fp16", max_steps=4), devices=[CPU_WITH_FP16])
    saved = ckpt.load_checkpoint(part.checkpoint)["scaler"]
    train(
        tiny_config(precision="fp16", max_steps=5, log_interval=1),
        devices=[CPU_WITH_FP16],
        resume_from=part.checkpoint,
        sink=recorder,
    )
    assert checkpoint_notes(recorder) == []
    assert recorder.of(StepMetrics)[0].grad_scale == saved["scale"]


def test_a_checkpoint_with_one_optimizer_group_resumes_into_decay_groups(tiny_config, monkeypatch):
    """Checkpoints written before weight decay was split into groups held one group of every parameter."""
    from core.engine import optimizers

    def one_group(model, decay):
        return [{"params": list(model.parameters()), "weight_decay": decay}]

    with monkeypatch.context() as patch:
        patch.setattr(optimizers, "parameter_groups", one_group)
        old = train(tiny_config(max_steps=4, schedule="cosine", warmup_steps=2, weight_decay=0.1))
    saved = ckpt.load_checkpoint(old.checkpoint)
    assert len(saved["optimizer"]["param_groups"]) == 1
    from core.engine.trainer import Trainer

    trainer = Trainer(
        tiny_config(max_steps=8, schedule="cosine", warmup_steps=2, weight_decay=0.1), resume_from=old.checkpoint
    )
    trainer.setup()
    try:
        names = {id(p): n for n, p in trainer.raw_model.named_parameters()}
        order = [n for n, _ in trainer.raw_model.named_parameters()]
        for group in trainer.optimizer.param_groups:
            # the 4-step cosine had reached 0; the 8-step one it now follows is at step 4: (1 + cos(pi/3)) / 2
            assert group["lr"] == pytest.approx(0.75 * trainer.cfg.lr)
            for param in group["params"]:
                old_state = saved["optimizer"]["state"][order.index(names[id(param)])]
                assert torch.equal(trainer.optimizer.state[param]["exp_avg"], old_state["exp_avg"])
        assert trainer.scheduler.base_lrs == [trainer.cfg.lr] * 2
    finally:
        trainer.cleanup()
    assert (
        train(
            tiny_config(max_steps=8, schedule="cosine", warmup_steps=2, weight_decay=0.1), resume_from=old.checkpoint
        ).status
        == "completed"
    )
