"""Device-mismatch diagnosis (core.engine.diagnosis): a deliberately misplaced tensor (on the meta device) is named
with both devices, in the trainer's failure, the pre-flight placement check and the CLI's one-line error."""

from __future__ import annotations

import pytest
import torch

from core.cli.main import main
from core.config import RunConfig
from core.engine.diagnosis import (
    explain_device_mismatch,
    explain_exception,
    find_misplaced,
    mismatch_devices,
)
from core.engine.trainer import Trainer
from core.tasks import TASKS
from core.tasks.tiny.task import TinyClassifier, TinyClassifierTask


class MaskedClassifier(TinyClassifier):
    """Keeps a plain tensor attribute on the meta device: model.to(device) does not move it."""

    def __init__(self):
        super().__init__()
        self.mask = torch.ones(16, device="meta")

    def forward(self, x):
        return self.fc2(self.relu(self.fc1(x)) * self.mask)


class MisplacedAttributeTask(TinyClassifierTask):
    name = "misplaced_attr"

    def build_model(self, info):
        return MaskedClassifier()


class MisplacedBatchTask(TinyClassifierTask):
    name = "misplaced_batch"

    def loss(self, model, batch):
        return super().loss(model, {"x": batch["x"].to("meta"), "y": batch["y"]})


@pytest.fixture
def bad_tasks(monkeypatch):
    for cls in (MisplacedAttributeTask, MisplacedBatchTask):
        monkeypatch.setitem(TASKS, cls.name, cls)


def test_trainer_failure_names_the_attribute_and_both_devices(bad_tasks, tmp_path):
    cfg = RunConfig.for_task("misplaced_attr", device="cpu", precision="fp32", max_steps=2, out_dir=str(tmp_path))
    ended = Trainer(cfg).run()
    assert ended.status == "failed"
    assert "meta" in ended.message and "cpu" in ended.message
    assert "tensor attribute mask" in ended.message and "register_buffer" in ended.message


def test_trainer_failure_names_the_misplaced_batch_tensor(bad_tasks, tmp_path):
    cfg = RunConfig.for_task("misplaced_batch", device="cpu", precision="fp32", max_steps=2, out_dir=str(tmp_path))
    ended = Trainer(cfg).run()
    assert ended.status == "failed"
    assert "meta" in ended.message and "cpu" in ended.message
    assert "batch['x']" in ended.message and ".to(" in ended.message
    assert "module fc1 (Linear)" in ended.message


def test_cuda_style_message_names_module_batch_field_and_fix():
    model = TinyClassifier()  # on the CPU while the run wants cuda:0: every tensor is misplaced
    exc = RuntimeError(
        "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and "
        "cpu! (when checking argument for argument mat1 in method wrapper_CUDA_addmm)"
    )
    text = explain_device_mismatch(exc, model, {"x": torch.zeros(2, 10)}, "cuda:0")
    assert "cuda:0 and on cpu" in text
    assert "parameter fc1.weight of module fc1 (Linear) is on cpu" in text
    assert "model.to('cuda:0')" in text
    only_batch = find_misplaced(None, {"x": torch.zeros(1), "n": 3}, "meta")
    assert [(m.kind, m.name, m.device) for m in only_batch] == [("batch field", "x", "cpu")]
    assert "batch['x'].to('meta')" in only_batch[0].fix("meta")


@pytest.mark.parametrize(
    "text, devices",
    [
        (
            "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
            ("cuda:0", "cpu"),
        ),
        (
            "Expected all tensors to be on the same device, but got mat1 is on cpu, different from other tensors on cuda:0 "
            "(when checking argument in method wrapper_CUDA_addmm)",
            ("cpu", "cuda:0"),
        ),
        ("Tensor on device meta is not on the expected device cpu!", ("meta", "cpu")),
        (
            "Input and parameter tensors are not at the same device, found input tensor at cpu and parameter tensor at "
            "cuda:1",
            ("cpu", "cuda:1"),
        ),
        ("Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be the same", ("cpu", "cuda")),
        ("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)", None),
    ],
)
def test_mismatch_messages_of_several_torch_ops_are_recognised(text, devices):
    assert mismatch_devices(text) == devices


def test_other_errors_keep_their_first_line():
    assert explain_exception(ValueError("bad thing\nmore")) == "ValueError: bad thing"


@pytest.mark.parametrize("command", [["inspect", "--precision", "fp32"], ["summary", "--precisions", "fp32"]])
def test_cli_lab_tools_exit_2_with_one_line_naming_both_devices(bad_tasks, capsys, command):
    """inspect and summary share core.engine.diagnosis.mismatch_as_device_error."""
    assert main([*command, "--task", "misplaced_attr", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "meta" in err and "cpu" in err and "mask" in err


def test_cli_train_exits_1_with_the_diagnosis(bad_tasks, capsys, tmp_path):
    code = main(
        [
            "train",
            "--task",
            "misplaced_batch",
            "--device",
            "cpu",
            "--precision",
            "fp32",
            "--max-steps",
            "2",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 1
    out = capsys.readouterr()
    assert "batch['x']" in out.out + out.err and "meta" in out.err
