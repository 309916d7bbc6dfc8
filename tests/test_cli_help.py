"""--help of every command and subcommand shows no argparse internals; a mistyped command, choice or flag gets a
did-you-mean."""

from __future__ import annotations

import argparse

import pytest

from core.cli.main import build_parser, main


def _command_paths(parser: argparse.ArgumentParser, path=()) -> list[tuple[str, ...]]:
    paths = [path]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                paths += _command_paths(sub, (*path, name))
    return paths


def _run(capsys, *argv) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ended:
        main(list(argv))
    out, err = capsys.readouterr()
    return ended.value.code, out, err


def test_no_help_shows_suppress(capsys):
    paths = _command_paths(build_parser())
    assert len(paths) > 20
    for path in paths:
        code, out, _ = _run(capsys, *path, "--help")
        assert code == 0 and "usage:" in out, path
        assert "SUPPRESS" not in out, (path, [line for line in out.splitlines() if "SUPPRESS" in line])


@pytest.mark.parametrize(
    ("argv", "suggestion"),
    [
        (("trian",), "did you mean 'train'?"),
        (("train", "--precison", "bf16"), "did you mean '--precision'?"),
        (("train", "--precision", "bf17"), "did you mean 'bf16'?"),
        (("runs", "lsit"), "did you mean 'list'?"),
    ],
)
def test_did_you_mean(capsys, argv, suggestion):
    code, _, err = _run(capsys, *argv)
    assert code == 2 and suggestion in err and len(err.strip().splitlines()) == 1


def test_no_suggestion_for_nothing_close(capsys):
    code, _, err = _run(capsys, "train", "--zzzzzzzz")
    assert code == 2 and "did you mean" not in err


@pytest.mark.parametrize("command", [["lr-find"], ["summary"], ["inspect"]])
def test_the_lab_commands_take_every_precision_and_optimizer_a_run_takes(command):
    from core.config import FIELD_SPECS

    parser = build_parser(command[0])
    for mode in FIELD_SPECS["precision"].choices:
        if command != ["summary"]:
            assert parser.parse_args([*command, "--precision", mode]).precision == mode
    for name in FIELD_SPECS["optimizer"].choices:
        if command != ["inspect"]:
            assert parser.parse_args([*command, "--optimizer", name]).optimizer == name
