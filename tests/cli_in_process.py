"""`amp-console ARGV` run in the test's own process, through core.cli.main."""

from __future__ import annotations

from core.cli.main import main


def cli(capsys, *argv) -> tuple[int, str, str]:
    """The command's exit code and what it wrote to stdout and stderr (`capsys` reads them); paths and numbers
    in `argv` are passed as text."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err
