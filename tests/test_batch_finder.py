"""Batch-size finder: the search on a fake device that reports a memory limit (doubling then bisection converges to
the limit-derived batch, an out-of-memory trial is recovered and the next trial runs, margin and cap respected,
the CPU never runs a trial predicted over budget), real tiny-task runs on the CPU (an OOM in a training step or in
the evaluation pass is recovered on the real trainer), and `amp-console fit-batch` (--json, exit 2; --help: tests/test_cli_startup.py)."""

from __future__ import annotations

import json
import os
import tempfile

import pytest

from core.cli.main import main
from core.config import RunConfig
from core.engine.control import RunControl
from core.errors import ConfigError
from core.lab.batch_finder import (
    FITS,
    OOM,
    OVER_MARGIN,
    PREDICTED_OVER,
    FakeOutOfMemoryError,
    FakeProbe,
    FootprintPredictor,
    ModeResult,
    check_settings,
    compare_to_fp32,
    find_batch_sizes,
    search_mode,
)


class FakeWork:
    """Trial work for the fake device: takes no time and memory of its own; counts recoveries."""

    def __init__(self):
        self.ran: list[int] = []
        self.recovered = 0

    def run(self, batch: int) -> float:
        self.ran.append(batch)
        return batch * 200.0

    def recover(self) -> None:
        self.recovered += 1


def fake_search(
    limit=1000,
    per_sample=10,
    fixed=100,
    start=8,
    max_batch=65_536,
    margin=0.1,
    tolerance=0.05,
    predicts=False,
    control=None,
):
    probe = FakeProbe(limit, per_sample, fixed)
    probe.predicts = predicts
    work = FakeWork()
    result = search_mode(work, probe, "fp32", start, max_batch, margin, tolerance, control)
    return result, probe, work


def test_doubling_then_bisection_converges_to_the_batch_the_limit_allows():
    # 100 + 10 B bytes on a 1000-byte device with 10% margin: budget 900, so the largest batch is 80;
    # past 90 the device runs out of memory.
    result, probe, work = fake_search()
    assert [(t.batch, t.phase, t.status) for t in result.trials] == [
        (8, "start", FITS),
        (16, "double", FITS),
        (32, "double", FITS),
        (64, "double", FITS),
        (128, "double", OOM),
        (96, "bisect", OOM),
        (80, "bisect", FITS),
        (88, "bisect", OVER_MARGIN),
        (84, "bisect", OVER_MARGIN),
    ]
    assert result.status == "ok" and result.batch == 80 and result.first_failure == 84 and not result.capped
    assert result.limit_bytes == 1000 and result.budget_bytes == 900 and result.peak_bytes == 900
    assert result.samples_per_second == pytest.approx(80 * 2 / 0.01)
    # Every trial released its memory, and each OOM was recovered before the next trial ran.
    assert probe.released == len(result.trials) and work.recovered == 2
    assert probe.begun == [t.batch for t in result.trials]
    assert work.ran == [t.batch for t in result.trials if t.status != OOM]


@pytest.mark.parametrize("tolerance", [0.0, 0.05, 0.2])
@pytest.mark.parametrize(
    "limit,per_sample,fixed,start",
    [(1000, 10, 100, 8), (10**9, 12_345, 10**7, 64), (5_000_000, 3, 0, 1), (2**33, 2**20, 2**30, 512), (50, 7, 1, 3)],
)
def test_search_is_within_tolerance_of_the_exact_batch(limit, per_sample, fixed, start, tolerance):
    margin = 0.1
    exact = (int((1 - margin) * limit) - fixed) // per_sample  # the largest batch within the budget
    result, _probe, _work = fake_search(
        limit, per_sample, fixed, start, max_batch=10**9, margin=margin, tolerance=tolerance
    )
    assert result.batch is not None and result.batch <= exact
    assert exact - result.batch <= max(1, tolerance * result.batch), (result.batch, exact)
    if tolerance == 0:
        assert result.batch == exact
    assert result.peak_bytes <= result.budget_bytes
    assert all(t.status == FITS for t in result.trials if t.batch <= result.batch)


def test_margin_is_respected():
    no_margin, _, _ = fake_search(margin=0.0, tolerance=0.0)
    assert no_margin.batch == 90  # 100 + 900 = the whole device
    wide, _, _ = fake_search(margin=0.5, tolerance=0.0)
    assert wide.batch == 40 and wide.peak_bytes <= 500
    # Trials that ran but passed the margin are not answers.
    assert any(t.status == OVER_MARGIN for t in fake_search(tolerance=0.0)[0].trials)


def test_max_batch_caps_the_search():
    result, probe, _ = fake_search(limit=10**12, max_batch=100)
    assert [t.batch for t in result.trials] == [8, 16, 32, 64, 100]
    assert result.batch == 100 and result.capped and result.first_failure is None
    assert max(probe.begun) == 100


def test_a_start_that_does_not_fit_is_halved_then_bisected():
    result, _, work = fake_search(start=512, tolerance=0.0)
    assert [(t.batch, t.phase) for t in result.trials][:4] == [
        (512, "start"),
        (256, "halve"),
        (128, "halve"),
        (64, "halve"),
    ]
    assert result.batch == 80 and work.recovered >= 3


def test_nothing_fits_gives_no_batch():
    result, probe, _ = fake_search(limit=1000, fixed=2000, start=4)
    assert result.status == "ok" and result.batch is None and [t.batch for t in result.trials] == [4, 2, 1]
    assert probe.released == 3


def test_cpu_style_prediction_never_runs_a_trial_predicted_over_budget():
    # budget 9000 of 10,000; 10 bytes a sample: batch 900 is the answer, and nothing above it may run.
    result, probe, _ = fake_search(limit=10_000, per_sample=10, fixed=0, start=100, predicts=True)
    assert result.batch == 900
    assert max(probe.begun) == 900 and not any(t.status == OOM for t in result.trials)
    skipped = [t for t in result.trials if t.status == PREDICTED_OVER]
    assert skipped and all(t.peak_bytes > result.budget_bytes for t in skipped)


def test_footprint_predictor():
    p = FootprintPredictor()
    assert p.predict(10) is None
    p.add(10, 1000)
    assert p.predict(10) is None and p.predict(20) == 2000  # one point: proportional (conservative)
    p.add(20, 1500)
    assert p.predict(40) == 2500  # a line through the two largest: 500 + 50 B
    p.add(40, 1400)  # noise: a falling line falls back to proportional
    assert p.predict(80) == 2800


def test_stop_ends_the_search_after_the_current_trial():
    control = RunControl()
    probe, work = FakeProbe(1000, 10, 100), FakeWork()
    seen = []

    def on_trial(trial, count, budget):
        seen.append(trial.batch)
        if count == 2:
            control.stop()

    result = search_mode(work, probe, "fp32", 8, 1000, control=control, on_trial=on_trial)
    assert result.status == "stopped" and seen == [8, 16] and result.batch == 16


def test_comparison_sentence():
    modes = [
        ModeResult("fp32", "ok", batch=100, samples_per_second=1000.0),
        ModeResult("tf32", "skipped", reason="no"),
        ModeResult("bf16", "ok", batch=180, samples_per_second=2100.0),
    ]
    compare_to_fp32(modes)
    assert modes[2].comparison == "bf16 fits 1.8× the fp32 batch (180 vs 100) at 2.1× the samples/s"
    assert modes[2].batch_ratio == pytest.approx(1.8) and modes[2].speed_ratio == pytest.approx(2.1)
    assert modes[0].comparison == "" and modes[1].comparison == ""


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"margin": 0.95}, "margin"),
        ({"margin": -0.1}, "margin"),
        ({"steps": 0}, "steps"),
        ({"tolerance": 0.7}, "tolerance"),
        ({"start": 0}, "start"),
        ({"max_batch": 0}, "max_batch"),
        ({"start": 200, "max_batch": 100}, "start"),
    ],
)
def test_bad_settings_name_the_field(kwargs, field):
    with pytest.raises(ConfigError) as info:
        check_settings(**kwargs)
    assert info.value.field == field


# ----------------------------------------------------------------------------- the real engine on the CPU
def tiny(**values) -> RunConfig:
    return RunConfig.for_task("tiny", device="cpu", **values).validate()


def leftover_folders() -> set[str]:
    return {p for p in os.listdir(tempfile.gettempdir()) if p.startswith("amp-fit-batch-")}


def test_real_tiny_run_on_the_cpu(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its own temp folder: other runs' folders come and go
    before = leftover_folders()
    updates = []
    result = find_batch_sizes(
        tiny(), ["fp32", "fp16", "bf16"], max_batch=256, steps=2, eval_rows=256, progress=updates.append
    )
    assert leftover_folders() == before
    assert result.device_type == "cpu" and result.estimate and result.notes and result.max_batch == 256
    fp32, fp16, bf16 = (result.mode(m) for m in ("fp32", "fp16", "bf16"))
    assert fp16.status == "skipped" and "GPU" in fp16.reason
    for m in (fp32, bf16):
        assert m.status == "ok" and m.batch == 256 and m.capped and not m.reason
        assert [t.batch for t in m.trials] == [64, 128, 256]
        assert all(t.status == FITS and t.peak_bytes > 0 and t.samples_per_second > 0 for t in m.trials)
        assert m.limit_bytes > m.budget_bytes > 0
    assert bf16.compute_dtype == "bfloat16" and bf16.comparison.startswith("bf16 and fp32 both fit the cap")
    assert [u.phase for u in updates if u.mode == "fp32"] == ["setup", "trial", "trial", "trial", "done"]
    assert all(u.describe() for u in updates)
    json.dumps(result.to_dict())


def test_real_run_on_a_fake_device_recovers_the_oom_trials():
    result = find_batch_sizes(tiny(), ["fp32"], probe=FakeProbe(1000, 10, 100), steps=2, eval_rows=128)
    fp32 = result.mode("fp32")
    assert fp32.batch == 80 and [t.status for t in fp32.trials].count(OOM) == 2
    first_oom = next(i for i, t in enumerate(fp32.trials) if t.status == OOM)
    assert any(t.fits for t in fp32.trials[first_oom + 1 :])  # the model trains on after the OOM trials


def test_an_oom_inside_a_real_step_or_the_evaluation_is_recovered(monkeypatch):
    """The OOM comes from inside the trainer's step (after a backward: gradients and optimizer state exist) or
    from the evaluation pass; the trial is recorded as out of memory and the next trial trains normally."""
    import core.engine.evaluation as evaluation
    from core.tasks.tiny.task import TinyClassifierTask as TinyTask

    real_loss, real_eval = TinyTask.loss, evaluation.evaluate_split

    def loss(self, model, batch):
        value = real_loss(self, model, batch)
        if batch["x"].shape[0] > 200:
            value.backward()
            raise FakeOutOfMemoryError("fake: out of memory in the step")
        return value

    def evaluate_split(task, model, split, batch_size, dist, autocast):
        if 100 < batch_size <= 200:
            raise FakeOutOfMemoryError("fake: out of memory in the evaluation")
        return real_eval(task, model, split, batch_size, dist, autocast)

    monkeypatch.setattr(TinyTask, "loss", loss)
    monkeypatch.setattr(evaluation, "evaluate_split", evaluate_split)
    result = find_batch_sizes(tiny(), ["fp32"], probe=FakeProbe(10**12, 1), steps=2, eval_rows=256, tolerance=0.0)
    fp32 = result.mode("fp32")
    assert [(t.batch, t.status) for t in fp32.trials][:4] == [(64, FITS), (128, OOM), (96, FITS), (112, OOM)]
    assert fp32.batch == 100 and fp32.first_failure == 101
    step_oom = find_batch_sizes(
        tiny(), ["fp32"], probe=FakeProbe(10**12, 1), steps=3, start=128, eval_rows=0, tolerance=0.0
    ).mode("fp32")
    assert [(t.batch, t.status) for t in step_oom.trials][:3] == [(128, FITS), (256, OOM), (192, FITS)]
    assert step_oom.batch == 200


# ----------------------------------------------------------------------------- the command
def test_cli_json(capsys):
    code = main(
        [
            "fit-batch",
            "--task",
            "tiny",
            "--device",
            "cpu",
            "--precisions",
            "fp32,bf16",
            "--max-batch",
            "128",
            "--steps",
            "1",
            "--eval-rows",
            "64",
            "--json",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0
    data = json.loads(out.strip().splitlines()[-1])
    assert [m["mode"] for m in data["modes"]] == ["fp32", "bf16"]
    assert data["modes"][0]["batch"] == 128 and data["estimate"] is True and data["max_batch"] == 128
    assert data["train_command"].startswith("amp-console train --task tiny --device cpu --precision ")
    assert "--batch-size 128" in data["train_command"] and "fit-batch [1/2] fp32: trial 1" in err


def test_cli_table(capsys):
    code = main(
        [
            "fit-batch",
            "--task",
            "tiny",
            "--device",
            "cpu",
            "--precisions",
            "fp32",
            "--start",
            "32",
            "--max-batch",
            "64",
            "--steps",
            "1",
            "--eval-rows",
            "64",
            "--limit",
            "8GiB",
        ]
    )
    out, _err = capsys.readouterr()
    assert code == 0
    assert "limit 8 GiB, budget 7.2 GiB" in out and "fp32: largest batch 64 (the --max-batch cap" in out
    assert "use it: amp-console train --task tiny --device cpu --precision fp32 --batch-size 64" in out


@pytest.mark.parametrize(
    "flags,needle",
    [
        (["--margin", "1.5"], "--margin"),
        (["--steps", "0"], "--steps"),
        (["--precisions", "fp99"], "--precisions"),
        (["--limit", "lots"], "--limit"),
        (["--start", "200", "--max-batch", "100"], "--start"),
        (["--tolerance", "2"], "--tolerance"),
        (["--eval-rows", "-1"], "--eval-rows"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(capsys, flags, needle):
    code = main(["fit-batch", "--task", "tiny", "--device", "cpu", *flags])
    _out, err = capsys.readouterr()
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and needle in err, err


def test_cli_start_above_the_training_rows_is_bad_input(capsys):
    code = main(["fit-batch", "--task", "tiny", "--device", "cpu", "--start", "100000"])
    _out, err = capsys.readouterr()
    assert code == 2
    assert err.strip().splitlines()[-1].startswith("amp-console: error: --start: 100000"), err


def test_parse_size():
    from core.cli.tune_batch import parse_size

    assert parse_size("8GiB") == 8 * 2**30 and parse_size("512 MB") == 512 * 10**6 and parse_size("2e9") == 2 * 10**9
    with pytest.raises(ConfigError):
        parse_size("0")
