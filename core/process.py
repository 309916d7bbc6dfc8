"""The end of a console process (the CLI, a rank, a torchrun agent, a sweep's per-mode process).

A shared leaf of the engine (see docs/ARCHITECTURE.md).
"""

from __future__ import annotations

import gc
import sys
from typing import NoReturn


def exit_process(code: int | None) -> NoReturn:
    """`sys.exit(code)` without the interpreter's last full garbage collections over every object alive.

    After torch's import (and its optimizers', which bring in torch._dynamo) those collections walk millions of
    objects that are about to go anyway: ~0.6 s of the ~0.8 s between the last line and the exit of every
    process. Freezing what exists takes microseconds and leaves the exit as it was otherwise: atexit handlers
    (logging's flush, weakref finalizers, multiprocessing's children), buffered output flushed, modules torn
    down and objects freed by their reference counts; only garbage cycles that exist now are left to the
    operating system."""
    gc.freeze()
    sys.exit(code)
