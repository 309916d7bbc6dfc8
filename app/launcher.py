"""`amp-console`: no subcommand opens the window, a subcommand runs headless (core.cli). No Qt here."""

from __future__ import annotations

import os
import sys

from core.process import exit_process

_GUI_FLAGS = ("--gui", "--measure-startup")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    gui = not argv or argv[0] in _GUI_FLAGS or argv[0].endswith(".toml")  # `amp-console run.toml` opens it
    if not gui:
        from core.cli.main import main as cli_main

        return cli_main(argv)
    if not _has_display():
        sys.stderr.write(
            "amp-console: error: no display to open the window on (DISPLAY, WAYLAND_DISPLAY and "
            "QT_QPA_PLATFORM are unset); run a command instead, e.g. amp-console train "
            "(amp-console --help), or set QT_QPA_PLATFORM=offscreen\n"
        )
        return 2
    from app.main import run_app

    return run_app([a for a in argv if a != "--gui"])


def console() -> None:
    """The `amp-console` script: `main`, then the process's quick exit (core.process.exit_process)."""
    exit_process(main())


def _has_display() -> bool:
    """Whether Qt has somewhere to show the window (on Linux a display or an explicit platform; elsewhere always)."""
    if not sys.platform.startswith("linux"):
        return True
    return any(os.environ.get(name) for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"))


if __name__ == "__main__":
    console()
