"""LR range test: the suggestions on synthetic curves (an early spike, noise), a real tiny-task run in fp32 and bf16
on the CPU (finite suggestion in range, no files left, divergence stop), and `amp-console lr-find`."""

from __future__ import annotations

import json
import math
import os
import random
import tempfile

import pytest

from core.cli.main import main
from core.errors import ConfigError
from core.lab.lr_finder import (
    DEFAULT_DIVERGE_FACTOR,
    DEFAULT_END_LR,
    DEFAULT_SMOOTHING,
    DEFAULT_START_LR,
    DEFAULT_STEPS,
    METHODS,
    check_settings,
    lr_schedule,
    smooth_losses,
    suggest,
)


def synthetic_curve(steps: int = 100, spike: int = 0, noise: float = 0.0, seed: int = 0):
    """A range-test-like curve over 1e-7..1: flat at 2.3 until 1e-4, falling to 0.5 at about 1e-2 (steepest near
    1e-3), then diverging; `spike` first points 5x the plateau; `noise` relative Gaussian noise."""
    rng = random.Random(seed)
    lrs = lr_schedule(1e-7, 1.0, steps)
    losses = []
    for i, lr in enumerate(lrs):
        x = math.log10(lr)
        loss = 0.5 + 1.8 / (1 + math.exp(3.0 * (x + 3.0)))  # the descent, centred on 1e-3
        if x > -1.5:
            loss += 3.0 * (x + 1.5) ** 2  # divergence past ~3e-2
        if i < spike:
            loss *= 5.0
        losses.append(loss * (1 + noise * rng.gauss(0, 1)))
    return lrs, losses


def pick(method: str, steps: int = 100, spike: int = 0, noise: float = 0.0, seed: int = 0):
    lrs, losses = synthetic_curve(steps, spike, noise, seed)
    return suggest(lrs, smooth_losses(losses, DEFAULT_SMOOTHING), method, losses)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("spike", [0, 1, 3], ids=lambda s: f"spike{s}")
@pytest.mark.parametrize("noise", [0.0, 0.05], ids=lambda n: f"noise{n}")
def test_suggestion_is_in_the_descent_despite_an_early_spike_and_noise(method, spike, noise):
    for seed in range(5):
        s = pick(method, spike=spike, noise=noise, seed=seed)
        assert s.lr is not None, s.explanation
        # The descent runs from about 1e-4.5 to 1e-2; a spike-fooled pick would sit at the very start (1e-7).
        assert 10**-4.5 <= s.lr <= 2e-2, (method, spike, noise, seed, s)
        assert s.method == method and s.explanation.startswith(method) and f"{s.lr:.1e}" in s.explanation


def test_the_spike_does_not_move_the_suggestion_much():
    for method in METHODS:
        clean, spiked = pick(method), pick(method, spike=2)
        assert abs(math.log10(spiked.lr) - math.log10(clean.lr)) < 0.5, (method, clean, spiked)


def test_no_suggestion_when_the_loss_never_falls_or_too_few_points():
    lrs = lr_schedule(1e-7, 1.0, 50)
    flat = [2.0 + 0.01 * math.sin(i) for i in range(50)]
    for method in METHODS:
        s = suggest(lrs, smooth_losses(flat), method, flat)
        assert s.lr is None and s.explanation.startswith(method)
        s = suggest(lrs[:3], [2.0, 1.0, 0.5], method)
        assert s.lr is None and "too few" in s.explanation


def test_defaults_and_bad_settings():
    assert (DEFAULT_START_LR, DEFAULT_END_LR, DEFAULT_STEPS, DEFAULT_DIVERGE_FACTOR) == (1e-7, 1.0, 100, 4.0)
    schedule = lr_schedule(1e-7, 1.0, 8)
    assert schedule[0] == 1e-7 and schedule[-1] == pytest.approx(1.0) and len(schedule) == 8
    check_settings(1e-7, 1.0, 100, 4.0, 0.05)
    for args, field in [
        ((1.0, 1e-7, 100, 4.0, 0.05), "start_lr"),
        ((0.0, 1.0, 100, 4.0, 0.05), "start_lr"),
        ((1e-7, float("inf"), 100, 4.0, 0.05), "end_lr"),
        ((1e-7, 1.0, 1, 4.0, 0.05), "steps"),
        ((1e-7, 1.0, 100, 1.0, 0.05), "diverge_factor"),
        ((1e-7, 1.0, 100, 4.0, 0.0), "smoothing"),
    ]:
        with pytest.raises(ConfigError) as info:
            check_settings(*args)
        assert info.value.field == field


# ----------------------------------------------------------------------------- real runs (CPU, tiny task)
def _temp_entries() -> set[str]:
    return {e for e in os.listdir(tempfile.gettempdir()) if e.startswith("amp-lr-find-")}


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_tiny_run_gives_a_finite_suggestion_in_range_and_leaves_no_files(precision, tmp_path, monkeypatch):
    from core.config import RunConfig
    from core.lab.lr_finder import find_lr

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AMP_CONSOLE_RUNS_DIR", str(tmp_path / "runs"))
    before = _temp_entries()
    seen = []
    result = find_lr(
        RunConfig.for_task("tiny", device="cpu", precision=precision),
        start_lr=1e-5,
        end_lr=1.0,
        steps=30,
        progress=seen.append,
    )
    assert result.precision == precision and result.device == "cpu"
    assert result.autocast_dtype == ("bfloat16" if precision == "bf16" else None) and not result.scaler
    assert len(result.lrs) == len(result.losses) == len(result.smoothed) > 0
    assert all(math.isfinite(v) for v in result.losses + result.smoothed)
    assert result.lrs == sorted(result.lrs) and result.lrs[0] == pytest.approx(1e-5)
    s = result.suggestion
    assert s.lr is not None and math.isfinite(s.lr) and 1e-5 <= s.lr <= 1.0, s
    assert result.lrs[s.index] == s.lr and set(result.suggestions) == set(METHODS)
    assert [p.phase for p in seen][0] == "setup" and seen[-1].phase == "done" and seen[-1].result is result
    assert sum(p.phase == "step" for p in seen) == result.steps_run
    assert list(tmp_path.iterdir()) == [] and not (_temp_entries() - before)  # no run folder, no temp folder left
    json.dumps(result.to_dict())


def test_a_large_end_lr_stops_at_divergence():
    from core.config import RunConfig
    from core.lab.lr_finder import find_lr

    result = find_lr(
        RunConfig.for_task("tiny", device="cpu", precision="fp32", optimizer="sgd", momentum=0.9),
        start_lr=1e-3,
        end_lr=1e6,
        steps=60,
    )
    assert result.stopped_early, result
    assert "4x the best" in result.stopped_early or "the loss was" in result.stopped_early
    assert result.steps_run < 60 and result.lrs[-1] < 1e6
    assert all(math.isfinite(v) for v in result.losses)


def test_stop_request_ends_the_test_with_the_points_so_far():
    from core.config import RunConfig
    from core.engine.control import RunControl
    from core.lab.lr_finder import find_lr

    control = RunControl()

    def progress(update):
        if update.phase == "step" and update.step == 8:
            control.stop()

    result = find_lr(
        RunConfig.for_task("tiny", device="cpu", precision="fp32"), steps=30, progress=progress, control=control
    )
    assert result.steps_run == 8 and "stopped by request" in result.stopped_early and len(result.losses) == 8


# ----------------------------------------------------------------------------- the CLI
def test_cli_json_is_one_object_with_the_curve(capsys, tmp_path):
    csv = tmp_path / "curve.csv"
    code = main(
        [
            "lr-find",
            "--task",
            "tiny",
            "--device",
            "cpu",
            "--precision",
            "bf16",
            "--steps",
            "25",
            "--start-lr",
            "1e-5",
            "--method",
            "steepest",
            "--csv",
            str(csv),
            "--json",
        ]
    )
    out, err = capsys.readouterr()
    data = json.loads(out.strip().splitlines()[-1])
    assert code == (0 if data["suggestion"]["lr"] is not None else 1)
    assert data["method"] == "steepest" and data["suggestion"]["method"] == "steepest"
    assert len(data["lrs"]) == len(data["losses"]) == len(data["smoothed"]) and data["precision"] == "bf16"
    if data["suggestion"]["lr"] is not None:
        assert data["train_command"].startswith("amp-console train --task tiny --device cpu --precision bf16 --lr ")
    assert "lr-find" in err and "step 10/25" in err  # progress on stderr
    assert csv.read_text().splitlines()[0] == "lr,loss,smoothed"
    assert len(csv.read_text().splitlines()) == len(data["lrs"]) + 1


def test_cli_table(capsys):
    main(["lr-find", "--task", "tiny", "--device", "cpu", "--steps", "25", "--start-lr", "1e-5"])
    out = capsys.readouterr().out
    assert "smoothed" in out and "suggested: valley" in out and "also: steepest" in out and "ended:" in out


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--start-lr", "1", "--end-lr", "0.1"], "--start-lr"),
        (["--start-lr", "-1"], "--start-lr"),
        (["--steps", "0"], "--steps"),
        (["--diverge-factor", "0.5"], "--diverge-factor"),
        (["--smoothing", "2"], "--smoothing"),
        (["--precision", "fp16"], "fp16"),  # a GPU mode on the CPU
        (["--csv", "/nonexistent-folder/curve.csv"], "--csv"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(capsys, argv, flag):
    assert main(["lr-find", "--task", "tiny", "--device", "cpu", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and flag in err
