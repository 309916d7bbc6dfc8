"""RunConfig validation and TOML round-trip; the headless CLI's outputs and exit codes."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time

import pytest

from core.cli.main import main
from core.config import RunConfig
from core.errors import ConfigError
from tests.waiting import logged, wait_until


def test_toml_round_trip(tmp_path):
    cfg = RunConfig.for_task(
        "tiny", lr=0.003, schedule="cosine", warmup_steps=7, task_options={"hidden": 8}, out_dir=str(tmp_path / "out")
    )
    path = tmp_path / "run.toml"
    cfg.save_toml(path)
    assert RunConfig.load_toml(path) == cfg


def test_unknown_toml_key_is_an_error_naming_it(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text('task = "tiny"\nlearning_rate = 0.1\n')
    with pytest.raises(ConfigError, match="learning_rate: unknown setting"):
        RunConfig.load_toml(path)
    path.write_text('task = "tiny"\nlr = "fast"\n')
    with pytest.raises(ConfigError, match="lr: expected float"):
        RunConfig.load_toml(path)
    path.write_text("lr = = 1\n")
    with pytest.raises(ConfigError, match="bad.toml: invalid TOML.*line 1"):
        RunConfig.load_toml(path)


@pytest.mark.parametrize(
    ("changes", "field", "text"),
    [
        ({"lr": 0.0}, "lr", "between 1e-07 and 10"),
        ({"batch_size": 0}, "batch_size", "between 1"),
        ({"optimizer": "lion"}, "optimizer", "sgd, adam, adamw"),
        ({"schedule": "step"}, "schedule", "cosine"),
        ({"device": "gpu0"}, "device", "cuda:N"),
        ({"epochs": 0, "max_steps": 0}, "epochs", "would do nothing"),
        ({"grad_accum": 0}, "grad_accum", "between 1"),
        ({"task": "gpt"}, "task", "choose one of"),
        ({"task_options": {"hidden": 0}}, "task_options.hidden", "between 1"),
        ({"data": "/nope.csv"}, "data", "no such"),
    ],
)
def test_each_invalid_field_is_named_with_its_range(changes, field, text):
    errors = RunConfig.for_task("tiny").replace(**changes).errors()
    assert field in errors and text in errors[field]


def run_cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "core.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=120
    )


def train_json(capsys, *args) -> dict:
    """`amp-console train ... --json` in this process: its exit status must be 0; its summary line and stderr."""
    code = main(["train", *args, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return {**json.loads(captured.out.strip().splitlines()[-1]), "stderr": captured.err}


def test_train_json_summary_and_files(tmp_path, capsys):
    """`train --json` in this process (its exit status, stdout and stderr across a real process boundary are
    test_bad_input_from_a_real_process_is_exit_2_and_one_line's and the signal tests')."""
    out = tmp_path / "run"
    summary = train_json(capsys, "--task", "tiny", "--max-steps", "30", "--out", str(out), "--device", "cpu")
    for key in (
        "status",
        "steps",
        "epochs",
        "final_loss",
        "metrics",
        "device",
        "precision",
        "autocast_dtype",
        "checkpoint",
        "samples_per_second",
    ):
        assert key in summary
    assert summary["status"] == "completed" and summary["steps"] == 30 and summary["device"] == "cpu"
    assert {"accuracy", "loss"} <= set(summary["metrics"])
    assert (out / "checkpoint.pt").is_file() and (out / "config.toml").is_file()
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["event"] == "RunStarted" and lines[-1]["event"] == "RunEnded"
    assert "Traceback" not in summary["stderr"]


def test_resume_continues_from_the_checkpoint(tmp_path, capsys):
    out = tmp_path / "run"
    train_json(capsys, "--max-steps", "10", "--out", str(out), "--device", "cpu")
    summary = train_json(capsys, "--resume", str(out / "checkpoint.pt"), "--max-steps", "25")
    assert summary["steps"] == 25 and summary["checkpoint"] == str(out / "checkpoint.pt")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--lr", "50"], "--lr"),
        (["--lr", "abc"], "--lr"),
        (["--batch-size", "-3"], "--batch-size"),
        (["--precision", "fp16", "--device", "cpu"], "fp16"),
        (["--precision", "fp8"], "--precision"),
        (["--device", "cuda:3"], "cuda:3"),
        (["--task", "nope"], "--task"),
        (["-o", "bogus=1"], "bogus"),
        (["--resume", "missing.pt"], "missing.pt"),
        (["--config", "absent.toml"], "absent.toml"),
        (["--data", "nowhere.csv"], "--data"),
        (["--optimizer", "lion"], "--optimizer"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_it(tmp_path, monkeypatch, capsys, args, named):
    monkeypatch.chdir(tmp_path)
    try:
        code = main(["train", "--max-steps", "2", "--out", str(tmp_path / "o"), *args])
    except SystemExit as stop:  # argparse's own refusals end the process the same way
        code = stop.code
    assert code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and named in lines[0] and "Traceback" not in lines[0]


@pytest.mark.slow
def test_bad_input_from_a_real_process_is_exit_2_and_one_line(tmp_path):
    """The same rule across the process boundary: the exit status and stderr a shell or the window sees."""
    result = run_cli("train", "--max-steps", "2", "--out", str(tmp_path / "o"), "--lr", "abc", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--lr" in lines[0] and "Traceback" not in result.stderr


def test_failed_run_exits_1(tmp_path, monkeypatch, capsys):
    from core.tasks.tiny.task import TinyClassifierTask

    monkeypatch.setattr(TinyClassifierTask, "loss", lambda self, model, batch: model(batch["x"]).sum() * float("nan"))
    code = main(["train", "--max-steps", "20", "--out", str(tmp_path / "o"), "--json", "--device", "cpu"])
    assert code == 1
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["status"] == "failed"


def test_devices_json_lists_the_cpu(capsys):
    assert main(["devices", "--json"]) == 0
    devices = json.loads(capsys.readouterr().out)
    assert devices[0]["id"] == "cpu" and "fp16" in devices[0]["unsupported"]


@pytest.mark.slow
def test_core_never_imports_qt_or_the_gui():
    code = (
        "import sys, core, core.cli, core.engine.trainer, core.tasks, core.engine.checkpoints;"
        "import pkgutil, importlib;"
        "[importlib.import_module(m.name) for m in pkgutil.walk_packages(core.__path__, 'core.')];"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'app', 'shiboken6')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_ctrl_c_stops_gracefully_with_a_checkpoint(tmp_path):
    import signal

    out = tmp_path / "run"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "core.cli",
            "train",
            "--max-steps",
            "100000000",
            "--device",
            "cpu",
            "--out",
            str(out),
            "--json",
            "--batch-size",
            "8",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: logged(out, "StepMetrics"), "a step", process)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    summary = json.loads(stdout.strip().splitlines()[-1])
    assert summary["status"] == "stopped" and (out / "checkpoint.pt").is_file()
    assert "Traceback" not in stderr


@pytest.mark.slow
def test_a_program_drives_a_run_through_its_folder_and_its_end_stops_it(tmp_path):
    """--events says where the events start (metrics.jsonl, followed by offset); a stop request in the folder
    stops the run; with --end-with-parent the end of stdin stops it too (how the window drives torchrun)."""
    from core.engine.folder_control import write_request
    from core.engine.follow import MetricsFollower

    command = [sys.executable, "-m", "core.cli", "train", "--max-steps", "100000000", "--device", "cpu", "--out"]
    flags = ["--events", "--end-with-parent", str(os.getpid()), "--batch-size", "8", "--log-interval", "20"]
    for how in ("request", "end of input"):
        kinds = []
        with subprocess.Popen(
            [*command, str(tmp_path / how), *flags],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as process:
            try:
                with MetricsFollower.of_run_start(json.loads(process.stdout.readline())) as follower:
                    for line in follower.lines(deadline=time.monotonic() + 120):
                        kinds.append(line.record["event"])
                        if kinds.count("StepMetrics") == 2:
                            write_request(follower.folder, "stop") if how == "request" else process.stdin.close()
                process.wait(timeout=60)
            finally:
                process.kill()
        assert kinds[0] == "RunStarted" and kinds[-2:] == ["CheckpointSaved", "RunEnded"], kinds
        assert process.returncode == 130


def test_events_report_bad_input_as_a_json_line_naming_the_field(tmp_path, capsys):
    """A program driving `train --events` gets the field to mark, besides the one stderr line and exit 2."""
    code = main(
        [
            "train",
            "--max-steps",
            "2",
            "--out",
            str(tmp_path / "o"),
            "--events",
            "-o",
            "samples=256",
            "--batch-size",
            "64",
            "--grad-accum",
            "64",
        ]
    )
    assert code == 2
    out, err = capsys.readouterr()
    report = json.loads(out.strip().splitlines()[-1])
    assert report["field"] == "grad_accum"
    assert report["setup_error"].startswith("grad_accum: ") and "exceed" in report["setup_error"]
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_config_stdin_loads_first_then_trains_the_settings_it_is_sent(tmp_path):
    """How the window starts a training process ahead of time: ready line, then one JSON settings line."""
    from core.engine.follow import MetricsFollower

    command = [sys.executable, "-m", "core.cli", "train", "--events", "--config-stdin"]
    config = RunConfig.for_task("tiny", max_steps=6, log_interval=2, out_dir=str(tmp_path / "run"))
    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as process:
        try:
            assert json.loads(process.stdout.readline()) == {"ready": True}
            process.stdin.write(json.dumps({"config": config.to_dict(), "resume": None}) + "\n")
            process.stdin.flush()
            with MetricsFollower.of_run_start(json.loads(process.stdout.readline())) as follower:
                events = [line.record for line in follower.lines(deadline=time.monotonic() + 120)]
            process.wait(timeout=60)
        finally:
            process.kill()
    assert process.returncode == 0
    assert events[0]["event"] == "RunStarted" and events[0]["total_steps"] == 6
    assert events[-1]["event"] == "RunEnded" and events[-1]["status"] == "completed"
    assert (tmp_path / "run" / "checkpoint.pt").is_file()


@pytest.mark.parametrize(
    ("stdin", "code", "named"),
    [("", 0, None), ("not json\n", 2, "settings line"), ('{"config": {"lr": -1}}\n', 2, "lr")],
)
def test_config_stdin_closed_or_bad_settings(tmp_path, monkeypatch, capsys, stdin, code, named):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    assert main(["train", "--config-stdin"]) == code
    err = capsys.readouterr().err
    if named:
        last = err.strip().splitlines()[-1]
        assert last.startswith("amp-console: error: ") and named in last, err
        assert "Traceback" not in err


def test_a_fresh_run_never_overwrites_an_earlier_runs_checkpoint(tmp_path, monkeypatch, capsys):
    """Same output folder twice: the second run writes beside it and says where; resuming writes in place."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "runs" / "latest"
    train_json(capsys, "--max-steps", "3", "--out-dir", str(out))
    before = (out / "checkpoint.pt").read_bytes()

    second = train_json(capsys, "--max-steps", "5", "--out-dir", str(out))
    assert f"{out} holds an earlier run, which is kept: this run writes to {out}-2" in second["stderr"]
    assert (out / "checkpoint.pt").read_bytes() == before
    assert second["checkpoint"] == str(out.parent / "latest-2" / "checkpoint.pt")

    third = train_json(capsys, "--max-steps", "2", "--out-dir", str(out))
    assert third["checkpoint"].endswith("latest-3/checkpoint.pt")

    resumed = train_json(capsys, "--resume", str(out / "checkpoint.pt"), "--max-steps", "6")
    assert "holds an earlier run" not in resumed["stderr"]
    assert resumed["checkpoint"] == str(out / "checkpoint.pt")

    # Resuming a copy kept elsewhere writes beside the copy (the folder it was given), never into the folder
    # recorded inside the file.
    copy = tmp_path / "kept" / "kept.pt"
    copy.parent.mkdir()
    copy.write_bytes((out.parent / "latest-2" / "checkpoint.pt").read_bytes())
    again = train_json(capsys, "--resume", str(copy), "--max-steps", "7")
    assert again["checkpoint"] == str(copy.parent / "checkpoint.pt")


def make_checkpoint(tmp_path, capsys, *flags) -> str:
    code = main(
        [
            "train",
            "--max-steps",
            "4",
            "--out",
            str(tmp_path / "first"),
            "--device",
            "cpu",
            "--threads",
            "1",
            "--log-interval",
            "2",
            *flags,
        ]
    )
    capsys.readouterr()
    assert code == 0
    return str(tmp_path / "first" / "checkpoint.pt")


def test_resume_never_writes_where_the_checkpoint_file_says(tmp_path, capsys):
    """A crafted checkpoint naming an unrelated folder: the run writes beside the checkpoint, or to --out."""
    import torch

    state = torch.load(make_checkpoint(tmp_path, capsys), map_location="cpu", weights_only=True)
    elsewhere = tmp_path / "unrelated"
    state["config"]["out_dir"] = str(elsewhere)
    crafted = tmp_path / "mail" / "crafted.pt"
    crafted.parent.mkdir()
    torch.save(state, crafted)
    assert main(["train", "--resume", str(crafted), "--max-steps", "6", "--json", "--threads", "1"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["checkpoint"] == str(
        crafted.parent / "checkpoint.pt"
    )
    assert (
        main(["train", "--resume", str(crafted), "--max-steps", "6", "--out", str(tmp_path / "mine"), "--threads", "1"])
        == 0
    )
    assert (tmp_path / "mine" / "checkpoint.pt").is_file() and not elsewhere.exists()


def test_resume_applies_the_config_file_under_the_flags_and_names_the_changes(tmp_path, capsys):
    checkpoint = make_checkpoint(tmp_path, capsys, "--lr", "0.01")
    settings = tmp_path / "more.toml"
    settings.write_text("lr = 0.003\nmax_steps = 8\nbatch_size = 16\n")
    code = main(["train", "--resume", checkpoint, "--config", str(settings), "--batch-size", "32", "--threads", "1"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "with changed settings: lr 0.01 -> 0.003, batch_size 64 -> 32, max_steps 4 -> 8" in err
    saved = RunConfig.load_toml(tmp_path / "first" / "config.toml")
    assert (saved.lr, saved.max_steps, saved.batch_size) == (0.003, 8, 32)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--task", "sentiment"], "--task: "),
        (["-o", "hidden=7"], "task_options: "),
        (["--config", "OPTIONS"], "task_options: "),
        (["--max-steps", "3"], "--max-steps: "),
        (["--max-steps", "4"], "--max-steps: "),
    ],
)
def test_resume_refuses_another_model_or_an_end_already_reached(tmp_path, capsys, extra, named):
    checkpoint = make_checkpoint(tmp_path, capsys)
    options = tmp_path / "options.toml"
    options.write_text("[task_options]\nhidden = 7\n")
    args = [str(options) if arg == "OPTIONS" else arg for arg in extra]
    code = main(["train", "--resume", checkpoint, "--threads", "1", *args])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and named in lines[0], lines
    if named == "--max-steps: ":
        assert lines[0].endswith(
            f"is at step 4, so max steps {extra[1]} is already reached: give a larger value to train on"
        )


def test_resume_keeps_options_that_build_the_same_model(tmp_path, capsys):
    """Writing out a task option's default is no change (the window's form writes every option)."""
    from core.tasks import get_task_class

    checkpoint = make_checkpoint(tmp_path, capsys)
    hidden = next(o.default for o in get_task_class("tiny").options if o.name == "hidden")
    assert main(["train", "--resume", checkpoint, "--max-steps", "5", "-o", f"hidden={hidden}", "--threads", "1"]) == 0
