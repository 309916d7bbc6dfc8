"""What every command shares: one-line bad-input errors (exit 2) and the Ctrl+C stop. See docs/ARCHITECTURE.md."""

from __future__ import annotations

import argparse
import signal
import sys

from core.config import FIELD_SPECS
from core.errors import ConfigError


class OneLineParser(argparse.ArgumentParser):
    """argparse that reports bad input as one line and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def fail_bad_input(message: str) -> int:
    sys.stderr.write(f"amp-console: error: {message}\n")
    return 2


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def describe_config_error(exc: ConfigError) -> str:
    """'--lr: 20 is out of range...' for fields that are flags, else the message as it is."""
    field = exc.field.split(".")[0]
    if field in FIELD_SPECS:
        return f"{flag_name(field)}: {str(exc).split(': ', 1)[1]}"
    return str(exc)


def install_sigint_stop(control, distributed: bool = False) -> None:
    """First Ctrl+C asks the run to stop gracefully (with a checkpoint); a second one aborts.

    Under torchrun every signal only asks to stop: torchrun repeats SIGINT/SIGTERM to its workers and
    kills them itself if they take too long, so escalating here would lose the final checkpoint.
    """
    if distributed:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda signum, frame: control.stop())
        return

    def handler(signum, frame):
        sys.stderr.write("\nstopping after this step (Ctrl+C again to abort)...\n")
        control.stop()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    signal.signal(signal.SIGINT, handler)
