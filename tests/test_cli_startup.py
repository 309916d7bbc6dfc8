"""The CLI's first impression: `--help` and the `tasks` listing never import torch, pyarrow or numpy (each costs
a second or more); `tasks NAME` describes one task; unknown names get one line with a did-you-mean."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "pyarrow", "numpy")


def heavy_modules_after(code: str) -> list[str]:
    """Run `code` in a fresh interpreter and return which heavy modules it left imported."""
    probe = f"import sys, json\n{code}\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


# Each command runs in a fork of one fresh interpreter that has imported only the entry points (core.cli.main,
# app.launcher; neither imports a command's module): as if each had a fresh interpreter of its own.
HELP_COMMANDS = (
    [],
    ["devices"],
    ["tasks"],
    ["bench"],
    ["inspect"],
    ["data"],
    ["data", "generate"],
    ["train"],
    ["runs"],
    ["runs", "list"],
    ["runs", "tensorboard"],
    ["lr-find"],
    ["summary"],
    ["fit-batch"],
    ["sweep"],
    ["evaluate"],
)
HELP_SHOWS = {
    "lr-find": "--diverge-factor",
    "summary": "--precisions",
    "sweep": "usage: amp-console sweep",
    "fit-batch": "usage: amp-console fit-batch",
}  # besides "usage: amp-console"


def _help_name(command: list[str]) -> str:
    return " ".join(command + ["--help"])


PROBE = r"""
import contextlib, io, json, os, sys

def run(module, argv):
    main = __import__(module, fromlist=["main"]).main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    return {"code": code, "out": out.getvalue(), "err": err.getvalue(),
            "heavy": [m for m in HEAVY if m in sys.modules],
            "commands": sorted(m for m in sys.modules if m.startswith("core.cli.") and m[9:] in COMMANDS),
            "qt": any(m.startswith("PySide6") for m in sys.modules)}

plan = json.loads(sys.argv[1])
for module in {module for _, module, _ in plan}:  # what every command imports first: shared by the forks
    __import__(module)
results = {}
for name, module, argv in plan:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one command, its result on the pipe
        os.close(read)
        try:
            result = run(module, argv)
        except BaseException as exc:
            result = {"code": "crashed", "err": repr(exc), "out": "", "heavy": [], "commands": [], "qt": False}
        with os.fdopen(write, "w") as pipe:
            pipe.write(json.dumps(result))
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        results[name] = json.loads(pipe.read())
    os.waitpid(pid, 0)
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def startup(tmp_path_factory):
    """What each command of the probe printed and left imported (one interpreter for them all)."""
    from core.cli.main import COMMANDS

    runs = tmp_path_factory.mktemp("runs")
    plan = [
        ["runs list", "core.cli.main", ["runs", "--runs-dir", str(runs), "list"]],
        ["launcher --help", "app.launcher", ["--help"]],
        ["tasks", "core.cli.main", ["tasks"]],
    ]
    plan += [[_help_name(c), "core.cli.main", c + ["--help"]] for c in HELP_COMMANDS]
    code = f"HEAVY = {HEAVY!r}\nCOMMANDS = {sorted(COMMANDS)!r}\n{PROBE}"
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(plan)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("command", HELP_COMMANDS, ids=lambda c: " ".join(c) or "top")
def test_help_does_not_import_torch(startup, command):
    result = startup[_help_name(command)]
    assert result["code"] == 0, result["err"]
    assert "usage: amp-console" in result["out"] and HELP_SHOWS.get(" ".join(command), "") in result["out"]
    assert result["heavy"] == []


def test_each_command_is_listed_with_the_module_that_registers_it():
    import argparse
    import importlib

    from core.cli.main import COMMANDS

    for name, commands in COMMANDS.items():
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(f"core.cli.{name}").register(sub)
        assert tuple(sub.choices) == commands, name


@pytest.mark.slow
def test_runs_list_imports_no_other_commands_module(startup):
    result = startup["runs list"]
    assert result["code"] == 0, result["err"]
    assert result["commands"] == ["core.cli.runs"] and result["heavy"] == []


@pytest.mark.slow
def test_launcher_help_does_not_import_torch_or_qt(startup):
    result = startup["launcher --help"]
    assert result["code"] == 0 and "usage:" in result["out"], result["err"]
    assert not result["qt"] and result["heavy"] == []


@pytest.mark.slow
def test_tasks_listing_does_not_import_torch(startup):
    result = startup["tasks"]
    assert result["code"] == 0, result["err"]
    assert "recommender" in result["out"] and "d_model" in result["out"]
    assert result["heavy"] == []


def test_task_infos_read_from_source_match_the_classes():
    """The torch-free catalog says exactly what the Task classes say (name, text, options, defaults)."""
    from core.tasks import TASKS, task_infos

    infos = task_infos()
    assert list(infos) == list(TASKS)
    for name, cls in TASKS.items():
        info = infos[name]
        assert (info.name, info.description, info.primary_metric, info.tokens_key, info.defaults) == (
            cls.name,
            cls.description,
            cls.primary_metric,
            cls.tokens_key,
            cls.defaults,
        )
        assert [(o.name, o.default, o.help, o.minimum, o.maximum, o.choices) for o in info.options] == [
            (o.name, o.default, o.help, o.minimum, o.maximum, o.choices) for o in cls.options
        ]


def test_catalog_falls_back_when_the_source_is_not_literal(tmp_path):
    from core.tasks.catalog import read_task_info

    module = tmp_path / "computed.py"
    module.write_text(
        "class ComputedTask(Task):\n    name = 'computed'\n    description = 'x'\n    options = tuple(make_options())\n"
    )
    assert read_task_info(module, "ComputedTask") is None
    module.write_text(
        "class LiteralTask(Task):\n    name = 'lit'\n    description = 'one line'\n"
        "    options = (TaskOption('buckets', 1 << 16, 'hash buckets', 16, 1 << 26),)\n"
        "    defaults = {'lr': 3e-3}\n"
    )
    info = read_task_info(module, "LiteralTask")
    assert info.options[0].default == 65536 and info.options[0].maximum == 2**26 and info.defaults == {"lr": 3e-3}


def test_data_suffixes_match_the_importers():
    from core.cli.data import OUTPUT_SUFFIXES
    from core.data.importers import SUFFIXES

    assert set(OUTPUT_SUFFIXES) == set(SUFFIXES)


def test_tasks_name_shows_options_help_defaults_and_ranges(capsys):
    assert main(["tasks", "recommender"]) == 0
    out = capsys.readouterr().out
    assert "d_model" in out and "embedding / hidden width" in out and "8 to 4,096" in out
    assert "auto | full | sampled" in out and "trainable parameters" in out and "1,000 to 1,000,000,000" in out


def test_tasks_name_json_has_the_parameter_count(capsys):
    assert main(["tasks", "tiny", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["name"] == "tiny" and data["parameters"] == 10 * 16 + 16 + 16 * 2 + 2
    assert {
        "name": "hidden",
        "default": 16,
        "help": "hidden units",
        "minimum": 1,
        "maximum": 4096,
        "choices": None,
    } in data["options"]


def test_tasks_listing_shows_option_help(capsys):
    assert main(["tasks"]) == 0
    out = capsys.readouterr().out
    assert "fraction of labels flipped" in out and "listwise | ranknet" in out


def test_unknown_task_is_one_line_with_a_suggestion(capsys):
    assert main(["tasks", "recomender"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "did you mean 'recommender'" in err and "tiny, sentiment, ranking, recommender" in err


LAUNCH_PROBE = r"""
import contextlib, io, json, subprocess, sys
from core.cli.main import main

class Started(Exception):
    pass

def popen(command, *args, **kwargs):
    raise Started(json.dumps({"torch": "torch" in sys.modules, "command": command}))

subprocess.Popen = popen
results = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            results.append({"code": main(argv), "err": err.getvalue()})
        except Started as exc:
            results.append(json.loads(str(exc)))
print(json.dumps(results))
"""


@pytest.mark.slow
def test_a_cpu_launch_leaves_torch_to_its_workers(tmp_path, capsys):
    """`train --nproc 2 --device cpu` starts torchrun without importing torch (seconds before the first rank
    starts), and still refuses a bad task option as a one-process run does."""
    bad = ["train", "--task", "tiny", "--device", "cpu", "-o", "hiden=3", "--out", str(tmp_path / "bad")]
    launch = ["train", "--task", "recommender", "--device", "cpu", "--nproc", "2", "--out", str(tmp_path / "run")]
    code = subprocess.run(
        [sys.executable, "-c", LAUNCH_PROBE, json.dumps([launch, bad + ["--nproc", "2"]])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert code.returncode == 0, code.stderr
    started, refused = json.loads(code.stdout.strip().splitlines()[-1])
    assert "core.cli.loopback_torchrun" in started["command"] and started["torch"] is False
    assert main(bad) == 2
    assert refused == {"code": 2, "err": capsys.readouterr().err}
    assert "tiny has no option 'hiden' (did you mean 'hidden'?)" in refused["err"]
