"""Hostile checkpoints: corrupted, truncated, foreign, crafted or structurally odd files are refused with one
line naming what is wrong (through load_checkpoint, a Trainer resume, export, and the CLI), a crafted pickle
never runs, and a resume with another optimizer, grouping or a bad RNG state runs on with a note."""

from __future__ import annotations

import copy
import io
import os
import random
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from core.config import RunConfig
from core.engine import checkpoints as ckpt
from core.engine.events import RunStarted
from core.engine.trainer import Trainer, train
from core.errors import CheckpointError

pytestmark = pytest.mark.reliability

ROOT = Path(__file__).resolve().parents[2]
RESUMED = "its state starts fresh; weights, step, schedule and RNG are resumed"


def config(out_dir, **overrides) -> RunConfig:
    values = {
        "device": "cpu",
        "precision": "fp32",
        "out_dir": str(out_dir),
        "log_interval": 2,
        "max_steps": 4,
        "optimizer": "sgd",
        "schedule": "cosine",
        "warmup_steps": 1,
        "task_options": {"samples": 512},
    }
    return RunConfig.for_task("tiny", **{**values, **overrides})


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    """One real checkpoint (tiny task, sgd, 4 steps) that every case below damages in its own way."""
    folder = tmp_path_factory.mktemp("saved")
    ended = train(config(folder / "run"))
    assert ended.status == "completed", ended.message
    return Path(ended.checkpoint)


@pytest.fixture
def state(saved) -> dict:
    return copy.deepcopy(ckpt.load_checkpoint(saved))


def write(path: Path, state) -> Path:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    path.write_bytes(buffer.getvalue())
    return path


def refused(path: Path, pattern: str) -> str:
    """load_checkpoint refuses `path` with one line that starts with the path and matches `pattern`."""
    with pytest.raises(CheckpointError) as caught:
        ckpt.load_checkpoint(path)
    return one_line(caught.value, path, pattern)


def one_line(exc: BaseException, path: Path, pattern: str) -> str:
    import re

    message = str(exc)
    assert "\n" not in message and message.startswith(f"{path}: "), message
    assert re.search(pattern, message), message
    return message


def resume_refused(path: Path, tmp_path: Path, pattern: str, **overrides) -> str:
    """A Trainer resumed from `path` raises before the run starts, and writes nothing."""
    out = tmp_path / "resumed"
    with pytest.raises(CheckpointError) as caught:
        Trainer(config(out, max_steps=6, **overrides), resume_from=path).run()
    assert not out.exists()
    return one_line(caught.value, path, pattern)


def checkpoint_notes(recorder) -> list[str]:
    """The run's notes about its checkpoint (leaving out others: the thread count chosen, the settings changed, a
    validation split too small to choose the best checkpoint by)."""
    notes = recorder.of(RunStarted)[0].notes
    return [n for n in notes if not n.startswith(("threads:", "resuming ")) and "are too few to choose" not in n]


# ------------------------------------------------------------------ integrity


def test_a_flipped_bit_in_the_weights_is_a_crc_mismatch(saved, state, tmp_path):
    data = bytearray(saved.read_bytes())
    weights = state["model"]["fc1.weight"].numpy().tobytes()
    at = data.index(weights) + 37
    data[at] ^= 0x40
    damaged = tmp_path / "flipped.pt"
    damaged.write_bytes(bytes(data))
    member = member_at(saved, at)
    message = refused(damaged, r"checkpoint is corrupted \(CRC mismatch in data/\d+\); it cannot be trusted$")
    assert member.startswith("data/") and f"CRC mismatch in {member})" in message
    resume_refused(damaged, tmp_path, r"CRC mismatch in data/\d+")
    with pytest.raises(CheckpointError) as caught:
        ckpt.export_checkpoint(damaged, tmp_path / "export" / "model")
    assert str(caught.value) == message and not (tmp_path / "export").exists()


def member_at(path: Path, offset: int) -> str:
    """The zip member whose data holds byte `offset` of `path`, without the archive's top folder."""
    import struct

    data = path.read_bytes()
    for member in zipfile.ZipFile(path).infolist():
        name_length, extra_length = struct.unpack("<HH", data[member.header_offset + 26 : member.header_offset + 30])
        start = member.header_offset + 30 + name_length + extra_length
        if start <= offset < start + member.file_size:
            return member.filename.split("/", 1)[1]
    raise AssertionError(f"no member holds offset {offset}")


def test_flipped_bytes_anywhere_are_refused_or_change_nothing(saved, state, tmp_path):
    """At seeded offsets across the file (zip headers, pickle, tensor data, directory): either a one-line
    refusal or, where the byte carries nothing (a timestamp, alignment padding), exactly the same contents."""
    data = saved.read_bytes()
    rng = random.Random(20240517)
    offsets = sorted(rng.sample(range(len(data)), 24)) + [0, 5, len(data) - 10, len(data) - 1]
    refusals = 0
    for at in offsets:
        damaged = tmp_path / f"flip-{at}.pt"
        damaged.write_bytes(data[:at] + bytes([data[at] ^ (1 << rng.randrange(8))]) + data[at + 1 :])
        try:
            loaded = ckpt.load_checkpoint(damaged)
        except CheckpointError as exc:
            one_line(
                exc,
                damaged,
                r"checkpoint is corrupted|not a checkpoint file|not a readable checkpoint|"
                r"bad checkpoint|not an AMP Console checkpoint",
            )
            refusals += 1
            continue
        assert all(torch.equal(loaded["model"][k], v) for k, v in state["model"].items()), f"offset {at}"
        assert loaded["step"] == state["step"] and loaded["config"] == state["config"], f"offset {at}"
    assert refusals >= len(offsets) * 3 // 4


def test_truncated_copies_are_refused(saved, tmp_path):
    data = saved.read_bytes()
    for keep in (1, 4, 30, 100, len(data) // 3, len(data) // 2, len(data) - 23, len(data) - 1):
        cut = tmp_path / f"cut-{keep}.pt"
        cut.write_bytes(data[:keep])
        refused(
            cut,
            r"checkpoint is corrupted \(truncated: the zip directory at its end is missing\); it cannot "
            r"be trusted|not a checkpoint file",
        )


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"", r"not a checkpoint file \(the file is empty\)$"),
        (
            b"root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/usr/sbin/nologin\n",
            r"not a checkpoint file \(a text file starting 'root:x:0:0:root:/root:/b', not a PyTorch zip archive\)$",
        ),
        (b"\x00\x01\x02\xff" * 40, r"not a checkpoint file \(binary data, not a PyTorch zip archive\)$"),
    ],
)
def test_files_that_are_not_checkpoints_say_so(tmp_path, content, says):
    path = tmp_path / "passwd"
    path.write_bytes(content)
    refused(path, says)
    resume_refused(path, tmp_path, says)


def test_a_zip_that_is_not_a_torch_file(tmp_path):
    path = tmp_path / "photos.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("holiday/readme.txt", "not weights")
    refused(path, r"not a checkpoint file \(a zip archive, but not a PyTorch file: it has no data.pkl\)$")
    compressed = tmp_path / "compressed.pt"
    with zipfile.ZipFile(compressed, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("archive/data.pkl", b"\x80\x02}q\x00." * 1000)
    refused(compressed, r"not a checkpoint file \(data.pkl is compressed")


class Payload:
    """Unpickling this would run code: it creates a marker file."""

    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_with_a_payload_never_runs(tmp_path, state):
    marker = tmp_path / "PAYLOAD_RAN"
    crafted = copy.deepcopy(state)
    crafted["metrics"] = Payload(str(marker))
    in_zip = write(tmp_path / "crafted.pt", crafted)
    refused(in_zip, r"refused: the file needs arbitrary unpickling, which could run code .*system")
    resume_refused(in_zip, tmp_path, r"refused: .*could run code")
    with pytest.raises(CheckpointError, match="could run code"):
        ckpt.export_checkpoint(in_zip, tmp_path / "export" / "model")
    bare = tmp_path / "bare.pt"
    bare.write_bytes(__import__("pickle").dumps(Payload(str(marker)), protocol=2))
    refused(bare, r"not a checkpoint file \(a bare pickle, not a PyTorch zip archive; it is not unpickled\)$")
    assert not marker.exists()


# ------------------------------------------------------------------ finite values


def test_nan_weights_are_refused_naming_the_tensor_and_count(tmp_path, state):
    state["model"]["fc1.weight"][:] = float("nan")
    state["model"]["fc2.weight"][0, 0] = float("inf")
    path = write(tmp_path / "nan.pt", state)
    says = r"weights are not finite \(fc1.weight has 160 NaN/inf values\); the checkpoint cannot be resumed$"
    refused(path, says)
    resume_refused(path, tmp_path, says)
    with pytest.raises(CheckpointError) as caught:
        ckpt.export_checkpoint(path, tmp_path / "export" / "model")
    one_line(caught.value, path, says)
    assert not (tmp_path / "export").exists()


def test_non_finite_optimizer_state_is_refused(tmp_path, state):
    state["optimizer"]["state"][2]["momentum_buffer"][1, :3] = float("-inf")  # fc2.weight (one group, model order)
    refused(
        write(tmp_path / "inf.pt", state),
        r"optimizer state is not finite \(state\[2\].momentum_buffer has 3 "
        r"NaN/inf values\); the checkpoint cannot be resumed$",
    )


# ------------------------------------------------------------------ structure


def _list_model(s):
    s["model"] = list(s["model"].values())


def _drop_optimizer(s):
    del s["optimizer"]


def _set(key, value):
    def change(s):
        s[key] = value

    return change


def _config(**changes):
    def change(s):
        s["config"].update(changes)

    return change


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            _list_model,
            r"bad checkpoint: model should be a dict of tensors \(parameter name -> tensor\), not a list of 4$",
        ),
        (_drop_optimizer, r"checkpoint lacks optimizer$"),
        (_set("step", -3), r"bad checkpoint: step should be an integer >= 0, not int -3$"),
        (_set("step", 2.5), r"bad checkpoint: step should be an integer >= 0, not float 2.5$"),
        (_set("step", "4"), r"bad checkpoint: step should be an integer >= 0, not str '4'$"),
        (_set("epoch", True), r"bad checkpoint: epoch should be an integer >= 0, not bool True$"),
        (_set("config", "lr=0.1"), r"bad checkpoint: config should be a dict of settings, not str 'lr=0.1'$"),
        (_config(bogus=1), r"bad checkpoint: config.bogus: unknown setting in the checkpoint"),
        (_config(lr="fast"), r"bad checkpoint: config.lr: expected float, got str 'fast'$"),
        (_config(task="ghost"), r"bad checkpoint: config.task: "),
        (_set("task", ["tiny"]), r"bad checkpoint: task should be a task name, not a list of 1$"),
        (_set("format_version", "1"), r"checkpoint format str '1' is not supported \(this version reads 1\)$"),
        (
            _set("scaler", {"scale": "big"}),
            r"bad checkpoint: scaler.scale should be a finite number > 0, not str 'big'$",
        ),
        (_set("metrics", {"accuracy": torch.zeros(3)}), r"bad checkpoint: metrics\['accuracy'\] should be a number"),
        (
            _set("optimizer", {"state": {}, "param_groups": [{"params": "all"}]}),
            r"bad checkpoint: optimizer.param_groups\[0\] should be a dict with a list of parameter numbers",
        ),
        (_set("optimizer", [1, 2]), r"bad checkpoint: optimizer should be a dict of 'state' and 'param_groups', not"),
        (_set("format_version", torch.ones(3)), r"checkpoint format a float32 tensor of shape \(3,\) is not supported"),
        (
            _set("scaler", {"scale": 10**400}),
            r"bad checkpoint: scaler.scale should be a finite number > 0, not an int$",
        ),
        (_set("scheduler", "cosine"), r"bad checkpoint: scheduler should be a dict \(or None\), not str 'cosine'$"),
        (_set("vocabulary", {"item": 5}), r"bad checkpoint: vocabulary\['item'\] should be a list of ids, not int 5$"),
        (
            lambda s: s["model"].update({3: torch.zeros(1)}),
            r"bad checkpoint: model should be keyed by parameter names, "
            r"not key 3$",
        ),
        (
            lambda s: s["optimizer"]["param_groups"][0].update(momentum=float("nan")),
            r"bad checkpoint: optimizer.param_groups\[0\].momentum should be a finite number, not float nan$",
        ),
        (
            lambda s: s["optimizer"]["state"].update({9: {}}),
            r"bad checkpoint: optimizer.state\[9\] is the state of no parameter in optimizer.param_groups$",
        ),
    ],
)
def test_structurally_odd_checkpoints_name_the_key(tmp_path, state, change, says):
    change(state)
    path = write(tmp_path / "odd.pt", state)
    refused(path, says)
    if change is _list_model or change is _drop_optimizer:  # also through a resume and an export
        resume_refused(path, tmp_path, says)
        with pytest.raises(CheckpointError, match=says):
            ckpt.export_checkpoint(path, tmp_path / "export" / "model")


def test_tensors_of_the_wrong_shape_for_the_model(tmp_path, state):
    wrong = copy.deepcopy(state)
    wrong["model"]["fc1.weight"] = torch.zeros(10, 16)
    resume_refused(
        write(tmp_path / "shape.pt", wrong),
        tmp_path,
        r"the checkpoint does not fit this model: shape mismatch fc1.weight \(10, 16\) vs \(16, 10\)$",
    )
    state["optimizer"]["state"][0]["momentum_buffer"] = torch.zeros(3)
    resume_refused(
        write(tmp_path / "momentum.pt", state),
        tmp_path,
        r"the optimizer state does not fit this model: the state of fc1.weight: momentum_buffer has "
        r"shape \(3,\), the parameter \(16, 10\)$",
    )


@pytest.mark.parametrize(
    "garbage",
    [
        {"torch": torch.zeros(7, dtype=torch.float64), "numpy": {}, "python": []},
        "not a state",
        "numpy keys",
        "missing python",
    ],
)
def test_garbage_rng_state_is_skipped_with_a_note(tmp_path, state, garbage, recorder):
    if garbage == "numpy keys":
        state["rng"]["numpy"]["keys"] = state["rng"]["numpy"]["keys"][:100]
    elif garbage == "missing python":
        del state["rng"]["python"]
    else:
        state["rng"] = garbage
    path = write(tmp_path / "rng.pt", state)
    ended = train(config(tmp_path / "resumed", max_steps=6), resume_from=path, sink=recorder)
    assert ended.status == "completed" and ended.step == 6, ended.message
    notes = checkpoint_notes(recorder)
    assert len(notes) == 1 and notes[0].startswith("the checkpoint's random state is not usable (rng"), notes
    assert notes[0].endswith("): the random streams (dropout, sampling) start fresh from seed + rank")
    torch.rand(3), random.random(), __import__("numpy").random.rand(3)  # every generator is left usable


# ------------------------------------------------------------------ another optimizer or grouping


@pytest.mark.parametrize(("first", "then"), [("sgd", "adamw"), ("adamw", "sgd"), ("adam", "adamw")])
def test_a_resume_with_another_optimizer_starts_its_state_fresh(tmp_path, first, then, recorder):
    part = train(config(tmp_path / "a", optimizer=first, max_steps=3))
    rest = train(config(tmp_path / "a", optimizer=then, max_steps=7), resume_from=part.checkpoint, sink=recorder)
    assert rest.status == "completed" and rest.step == 7, rest.message
    assert checkpoint_notes(recorder) == [f"optimizer changed from {first} to {then}: {RESUMED}"]
    assert recorder.of(RunStarted)[0].start_step == 3
    saved = ckpt.load_checkpoint(rest.checkpoint)
    keys = {"sgd": {"momentum_buffer"}, "adam": {"step", "exp_avg", "exp_avg_sq"}}[then.removesuffix("w")]
    assert all(set(entry) == keys for entry in saved["optimizer"]["state"].values())
    # the schedule continued: the last LR is the cosine's at step 7 of 7, not a restarted schedule's
    assert saved["scheduler"]["last_epoch"] == 7


def test_a_resume_with_other_parameter_groups_starts_the_optimizer_fresh(tmp_path, saved, monkeypatch, recorder):
    from core.engine import optimizers

    # Decay and no-decay groups saved; now a grouping that is neither those two nor one group of everything.
    decayed = train(config(tmp_path / "a", max_steps=3, weight_decay=0.1))
    assert decayed.status == "completed", decayed.message
    monkeypatch.setattr(
        optimizers,
        "parameter_groups",
        lambda model, decay: [{"params": [p], "weight_decay": decay} for p in model.parameters()],
    )
    rest = train(config(tmp_path / "b", max_steps=6, weight_decay=0.1), resume_from=decayed.checkpoint, sink=recorder)
    assert rest.status == "completed" and rest.step == 6, rest.message
    assert checkpoint_notes(recorder) == [
        f"the optimizer's parameter groups changed (2 groups of 2+2 saved, 4 groups of 1+1+1+1 now): {RESUMED}"
    ]


# ------------------------------------------------------------------ end to end


@pytest.mark.slow
def test_the_cli_refuses_hostile_checkpoints_with_one_line_and_exit_2(tmp_path, saved):
    data = bytearray(saved.read_bytes())
    data[len(data) // 2] ^= 0x10
    flipped = tmp_path / "flipped.pt"
    flipped.write_bytes(bytes(data))
    text = tmp_path / "passwd"
    text.write_text("root:x:0:0:root:/root:/bin/bash\n")
    for path, says in ((flipped, "checkpoint is corrupted ("), (text, "not a checkpoint file (a text file")):
        done = subprocess.run(
            [sys.executable, "-m", "core.cli", "train", "--resume", str(path), "--out-dir", str(tmp_path / "out")],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=100,
        )
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and str(path) in lines[0] and says in lines[0], done.stderr
        assert "Traceback" not in done.stderr + done.stdout
        assert not (tmp_path / "out").exists()
