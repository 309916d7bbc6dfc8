"""The `amp-console` entry point: no subcommand opens the window; a subcommand runs headless (core.cli).

Nothing Qt is imported here, so headless commands start fast and work where Qt is not installed.
"""

from __future__ import annotations

import sys

_GUI_FLAGS = ("--gui", "--measure-startup")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    gui = not argv or argv[0] in _GUI_FLAGS or argv[0].endswith(".toml")  # `amp-console run.toml` opens it
    if not gui:
        from core.cli.main import main as cli_main

        return cli_main(argv)
    from app.main import run_app

    return run_app([a for a in argv if a != "--gui"])


if __name__ == "__main__":
    sys.exit(main())
