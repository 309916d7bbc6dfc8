"""`train`'s closing summary: each metric with its references, and a test row says that the task measured its
baseline and ceiling on the validation split (never passing them off as test figures)."""

from __future__ import annotations

import io

from core.cli.train import print_summary
from core.engine.events import RunEnded, RunStarted


def test_test_rows_say_their_references_were_measured_on_val():
    started = RunStarted(
        task="recommender",
        device="cpu",
        device_name="CPU",
        precision="bf16",
        autocast_dtype="bfloat16",
        param_dtype="float32",
        scaler=False,
        param_count=10,
        total_steps=10,
        steps_per_epoch=10,
        start_step=0,
        config={},
        ceiling={"hr@10": 0.9},
        baseline={"hr@10": 0.2},
    )
    ended = RunEnded(
        status="completed",
        message="done",
        step=10,
        epoch=1,
        final_loss=0.5,
        metrics={"hr@10": 0.6, "loss": 1.0},
        checkpoint=None,
        samples_per_second=None,
        test_metrics={"hr@10": 0.58},
    )
    out = io.StringIO()
    print_summary(ended, started, out)
    lines = out.getvalue().splitlines()
    val = next(line for line in lines if line.strip().startswith("val") and "hr@10" in line)
    test = next(line for line in lines if line.strip().startswith("test"))
    assert val.endswith("(baseline 0.2000, planted ceiling 0.9000)")
    assert test.endswith("(on val: baseline 0.2000, planted ceiling 0.9000)")
    assert not any("baseline" in line for line in lines if " loss " in line)


def test_a_failed_attempt_torchrun_restarts_prints_one_line_not_the_summary(monkeypatch, capsys):
    import argparse

    from core.cli.train import report_end

    ended = RunEnded("failed", "rank 1 died", 23, 0, None, {}, None, None)
    args = argparse.Namespace(json=False, events=False)
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "1")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    report_end(ended, None, args)
    out, err = capsys.readouterr()
    assert out == "" and err == "attempt 1 failed (rank 1 died); torchrun restarts every process\n"
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")  # the last attempt: the summary says the run failed
    report_end(ended, None, args)
    assert "run failed" in capsys.readouterr().out
