"""A resume checks first (core.engine.prepare.resume_notes, in prepare_run): another device, precision, process count
or version is said before the run starts, with what it means for the resume; only what cannot run is refused."""

from __future__ import annotations

import pytest

from core.engine import checkpoints as ckpt
from core.engine.prepare import prepare_run
from core.engine.trainer import train
from core.errors import ConfigError

INEXACT = "not an exact resume"


@pytest.fixture
def one_process_fp32(tiny_config):
    """A checkpoint of a 1-process fp32 run on the CPU, batch 64: (its path, its state)."""
    ended = train(tiny_config(precision="fp32", max_steps=4, batch_size=64))
    return ended.checkpoint, ckpt.load_checkpoint(ended.checkpoint)


def notes_of(path, state, processes=1, **flags) -> list[str]:
    return prepare_run({"max_steps": 8, **flags}, resume=path, state=state, processes=processes).notes


def test_an_unchanged_resume_says_nothing(one_process_fp32):
    assert notes_of(*one_process_fp32) == [
        "resuming " + one_process_fp32[0] + " with changed settings: max_steps 4 -> 8"
    ]


def test_another_precision_and_process_count_are_said_with_what_they_mean(one_process_fp32):
    path, state = one_process_fp32
    assert state["device"] == "cpu"  # saved now, compared on resume
    bf16 = notes_of(path, state, precision="bf16")[1:]
    assert bf16 == [
        "resumed an fp32 checkpoint in bf16; the weights and optimizer state are kept (float32) but the steps "
        f"compute in bf16: {INEXACT}"
    ]
    two = notes_of(path, state, processes=2)[1:]
    assert two == [
        "resumed a checkpoint of 1 process on 2: fresh random streams (dropout, sampling) are seeded for rank 1 from "
        f"seed + rank; the global batch is 128 rows a step (was 64; --batch-size is per process), so the steps take "
        f"other rows: {INEXACT}"
    ]
    same_rows = notes_of(path, state, processes=2, batch_size=32)
    assert same_rows[-1].endswith(
        "the global batch stays 64 rows a step, so the steps take the same rows: exact but for the random streams"
    )


def test_another_device_and_version_are_said(one_process_fp32):
    path, state = one_process_fp32
    state = {**state, "device": "cuda:0", "versions": {**state["versions"], "torch": "2.0.1"}}
    notes = notes_of(path, state)[1:]
    assert (
        notes[0]
        == f"trained on cuda, resumes on cpu: the state moves over, but other kernels round differently: {INEXACT}"
    )
    assert notes[1].startswith(f"{path} was saved by torch 2.0.1 -> ") and notes[1].endswith(INEXACT)


def test_what_cannot_run_here_is_refused_with_its_reason(one_process_fp32):
    path, state = one_process_fp32
    gpu_run = {**state, "config": {**state["config"], "device": "cuda:3", "precision": "fp16"}}
    with pytest.raises(ConfigError, match=r"trained on cuda:3, which this machine does not have .*give --device"):
        notes_of(path, gpu_run)
    with pytest.raises(
        ConfigError, match=r"resumes in fp16, which cpu .* cannot run: fp16 autocast .*--precision fp32"
    ):
        notes_of(path, gpu_run, device="cpu")  # the checkpoint's fp16 on this machine's CPU
    assert notes_of(path, gpu_run, device="cpu", precision="bf16")[1].startswith("resumed an fp32 checkpoint in bf16")
