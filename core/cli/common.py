"""What every command shares: one-line bad-input errors (exit 2), the stop signals (Ctrl+C, SIGTERM, SIGHUP) and output
that survives a closed terminal.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator

from core.config import FIELD_SPECS
from core.errors import AmpConsoleError, ConfigError
from core.process import signal_name


def did_you_mean(word: str, known) -> str:
    """' (did you mean 'train'?)' when `word` is close to one of `known`, else ''."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


class OneLineParser(argparse.ArgumentParser):
    """argparse with bad input as one line (exit code 2) and a did-you-mean for a mistyped command, choice or flag."""

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        if extras and not hasattr(namespace, "_flags_known"):  # the innermost (sub)command's flags
            namespace._flags_known = [s for s in self._option_string_actions if s.startswith("--")]
        return namespace, extras

    def parse_args(self, args=None, namespace=None):
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            known = getattr(namespace, "_flags_known", [])
            flag = next((e.split("=", 1)[0] for e in extras if e.startswith("-")), "")
            self.error(f"unrecognized arguments: {' '.join(extras)}{did_you_mean(flag, known) if flag else ''}")
        return namespace

    def error(self, message: str) -> None:  # type: ignore[override]
        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
        if choice:
            message += did_you_mean(choice[1], (c.strip(" '") for c in choice[2].split(",")))
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)


def fail_bad_input(message: str) -> int:
    sys.stderr.write(f"amp-console: error: {message}\n")
    return 2


FLAG_NAMES = {"columns": "--column"}  # fields whose flag is not their name (--column KEY=NAME fills columns)


def flag_name(field: str) -> str:
    return FLAG_NAMES.get(field, "--" + field.replace("_", "-"))


# flags that are not RunConfig fields but name themselves in errors
CLI_ONLY_FLAGS = (
    "nproc resume nnodes nproc_per_node node_rank rdzv_endpoint rdzv_id rdzv_timeout max_restarts nodes gpus_per_node"
).split()


def describe_config_error(exc: ConfigError) -> str:
    """'--lr: 20 is out of range...' for fields that are flags, else the message as it is."""
    field = exc.field.split(".")[0]
    if field == "task_options" and "." in exc.field and ": " in str(exc):  # a task option is set with --option
        return f"--option {exc.field.split('.', 1)[1]}: {str(exc).split(': ', 1)[1]}"
    if field in FIELD_SPECS or field in CLI_ONLY_FLAGS:
        return f"{flag_name(field)}: {str(exc).split(': ', 1)[1]}"
    return str(exc)


STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
STOPPED_EXIT_CODE = 130  # a run stopped by a request that is not a signal (a control request): as Ctrl+C


def write_stderr_now(text: str) -> None:
    """Write to fd 2 without Python's buffers: safe inside a signal handler, silent when stderr is gone."""
    with contextlib.suppress(OSError):
        os.write(2, text.encode("utf-8", "backslashreplace"))


class StopBeforeStart(BaseException):
    """A stop signal arrived before the run started: the command ends (128 + signum). A BaseException, so no `except
    Exception` turns it into another error."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal_name(signum))


def end_with_parent(parent_pid: int) -> None:
    """Stop (as SIGTERM does) when process `parent_pid` ends, however it ends: PR_SET_PDEATHSIG on Linux (the parent
    starts this process from a thread that outlives it), plus a check that the parent is not gone already. Elsewhere
    the parent's end closes stdin (stop_at_end_of_input). Call it inside StopSignals."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGTERM), 0, 0, 0)  # 1: PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # no prctl to call: stdin's end of input still stops the run
            return
    if hasattr(os, "getppid") and os.getppid() != parent_pid:  # gone already (we were re-parented)
        signal.raise_signal(signal.SIGTERM)


def stop_at_end_of_input(stream, control) -> threading.Thread:
    """`control.stop()` once `stream` ends: a driving program's pipe to this process closes when it ends, however it
    ends. Lines on it are ignored (pause, resume and stop are requests in the run folder)."""

    def wait() -> None:
        with contextlib.suppress(OSError, ValueError):  # input gone unreadably (a closed terminal): as its end
            for _line in stream:
                pass
        control.stop()

    thread = threading.Thread(target=wait, name="end-of-input", daemon=True)
    thread.start()
    return thread


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP all stop a run: `control.stop()`, then checkpoint, RunEnded and summary; a repeated
    signal only says so. Before `started()` a signal raises StopBeforeStart, unless `distributed` (rank 0 decides)."""

    def __init__(self, control=None, distributed: bool = False, announce: bool = True, extra: tuple = ()):
        self.control = control
        self.signals = STOP_SIGNALS + tuple(extra)  # extra: e.g. SLURM's warning signal inside a job
        self.distributed = distributed
        self.announce = announce
        self.signum: int | None = None  # the first stop signal received
        self.running = False
        self._previous: dict = {}

    def __enter__(self) -> StopSignals:
        with contextlib.suppress(ValueError):  # not the main thread: leave signals to whoever owns it
            for sig in self.signals:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for sig, handler in self._previous.items():
            # after a stop the process is on its way out: a repeated signal must not raise inside a finalizer
            signal.signal(sig, signal.SIG_IGN if self.signum is not None else handler)
        self._previous.clear()

    def started(self, control) -> None:
        """The run has begun: from now on a signal stops it with a checkpoint."""
        self.control = control
        self.running = True
        if self.signum is not None:
            control.stop()

    @property
    def exit_code(self) -> int:
        """128 + the stopping signal's number, as shells report it (130 SIGINT, 143 SIGTERM, 129 SIGHUP)."""
        return 128 + self.signum if self.signum else STOPPED_EXIT_CODE

    def check_not_stopped(self) -> None:
        """StopBeforeStart if a stop signal came before the run started: call it after code that may swallow the
        handler's exception (torch's start-up), before waiting on anything."""
        if self.signum is not None and not self.running and not self.distributed:
            raise StopBeforeStart(self.signum)

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            if self.announce:
                write_stderr_now(f"\namp-console: already stopping ({signal_name(signum)}): saving the checkpoint...\n")
            return
        self.signum = signum
        if not self.running and not self.distributed:
            raise StopBeforeStart(signum)
        if self.announce:
            write_stderr_now(
                f"\namp-console: {signal_name(signum)}: stopping after this step, then saving a checkpoint...\n"
            )
        if self.control is not None:
            self.control.stop()


@contextlib.contextmanager
def stop_signals_held() -> Iterator[None]:
    """Stop signals that arrive inside the block are raised again when it ends, so a step like renaming a finished file
    into place is never cut in two. Main thread only (Python runs handlers there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {}
    for number in STOP_SIGNALS:
        previous[number] = signal.signal(number, lambda received, _frame: caught.append(received))
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
        for number in caught:
            signal.raise_signal(number)


class SafeStream:
    """stdout/stderr that never crash the run: once a write fails (EIO, EPIPE, ENOSPC) the descriptor is pointed at
    /dev/null and further output is dropped."""

    def __init__(self, stream):
        self._stream = stream
        self.broken = False

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                return self._stream.write(text)
            except (OSError, ValueError):
                self._break()
        return len(text)

    def flush(self) -> None:
        if self.broken:
            return
        try:
            self._stream.flush()
        except (OSError, ValueError):
            self._break()

    def _break(self) -> None:
        self.broken = True
        with contextlib.suppress(OSError, ValueError, AttributeError):
            fd = self._stream.fileno()
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, fd)
            os.close(devnull)
        with contextlib.suppress(OSError, ValueError):  # the rest buffered goes to /dev/null: the final flush succeeds
            self._stream.flush()

    def isatty(self) -> bool:
        try:
            return not self.broken and self._stream.isatty()
        except (OSError, ValueError):
            return False

    def __getattr__(self, name):
        return getattr(self._stream, name)


@contextlib.contextmanager
def safe_standard_streams():
    """sys.stdout and sys.stderr as SafeStreams for the duration of a command."""
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = (s if isinstance(s, SafeStream) else SafeStream(s) for s in saved)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < 1e9:
        raise argparse.ArgumentTypeError(f"{text} is out of range: must be above 0 seconds")
    return value


def add_task_file_flag(parser) -> None:
    """--task REFERENCE for a command that reads a run or checkpoint whose task is not built in."""
    parser.add_argument(
        "--task",
        metavar="FILE.py:CLASS",
        help="the task file of a run whose task is not built in (path/to/my_task.py:MyTask or "
        "package.module:MyTask); loading it runs its code",
    )


def add_option_flag(parser, example: str = "hidden=32", what: str = "task option") -> None:
    """-o/--option KEY=VALUE, repeatable, into args.task_options (core.cli.train.parse_option reads each)."""
    parser.add_argument(
        "--option", "-o", action="append", default=[], metavar="KEY=VALUE", dest="task_options",
        help=f"{what}, e.g. -o {example} (repeatable; `amp-console tasks NAME` lists a task's)",
    )  # fmt: skip


def add_runs_dir_flag(parser, what: str = "the runs root", **kwargs) -> None:
    """--runs-dir DIR: `what` it is, then where it defaults to."""
    from core.engine.run_record import RUNS_DIR_ENV

    default = f"${RUNS_DIR_ENV}, else your data folder, e.g. ~/.local/share/amp-console/runs"
    parser.add_argument("--runs-dir", metavar="DIR", help=f"{what} (default: {default})", **{"default": None, **kwargs})


def add_checkpoint_args(parser) -> None:
    """RUN_OR_CHECKPOINT, --best / --last, --runs-dir and --task, as core.cli.evaluate.chosen_checkpoint reads them."""
    parser.add_argument(
        "target",
        metavar="RUN_OR_CHECKPOINT",
        help="a checkpoint file, a run folder, or a run id / unique prefix / folder name",
    )
    which = parser.add_mutually_exclusive_group()
    which.add_argument(
        "--best", action="store_true", help="a run's best checkpoint (the default, unless its summary advised the last)"
    )
    which.add_argument(
        "--last",
        action="store_true",
        help="a run's last checkpoint (the default when it kept no best, or its summary advised it)",
    )
    add_runs_dir_flag(parser, "the runs root to look run ids up in")
    add_task_file_flag(parser)


def load_task_argument(args) -> None:
    """Load the user task --task names, if any: args.task becomes its name (args.task_file, if any, its reference)."""
    value = getattr(args, "task", None)
    from core.tasks.user_tasks import is_reference

    if isinstance(value, str) and is_reference(value):
        from core.tasks import add_task, task_source

        args.task = add_task(value).name
        if hasattr(args, "task_file"):
            args.task_file = task_source(args.task)


RUNS_CODE = "Loading a task runs its Python code, with your permissions. Load only files you trust."  # as the window's


def load_recorded_task(source, assume_yes: bool = False) -> str:
    """Load the user task the run (a folder, a checkpoint in one) or sweep `source` recorded, when it is not loaded
    yet: with `assume_yes` (--yes), or once the user answers y on a terminal; otherwise one line saying to add --task
    FILE or --yes (a task file runs code: never loaded only because a run names it). Returns the reference loaded."""
    from core.engine.run_record import recorded_task
    from core.tasks import add_task, task_names, task_source

    name, reference = recorded_task(source)
    task_names()  # installed tasks are known: they load without asking, as in the window
    if not reference or task_source(name):
        return ""
    if not assume_yes:
        if not sys.stdin.isatty():
            raise AmpConsoleError(
                f"task {name!r} is defined in {reference}, which is not loaded here (loading a task runs its "
                f"code): add --task {reference}, or --yes to load it"
            )
        sys.stderr.write(f"{RUNS_CODE}\n\n{reference}\n\nLoad it? [y/N] ")
        sys.stderr.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            raise AmpConsoleError(f"task {name!r} was not loaded: its code did not run (--task {reference} loads it)")
    add_task(reference)
    return reference


def naming_task_file(command: str | None, reference: str) -> str | None:
    """`command`, an `amp-console ...` line to print, runnable as printed for the user task file `reference`: its
    `--task NAME` becomes `--task reference`, else `--task reference` is added; as it is without a reference."""
    import shlex

    if not command or not reference:
        return command
    parts = shlex.split(command)
    if "--task" in parts[:-1]:
        parts[parts.index("--task") + 1] = reference
    else:
        parts += ["--task", reference]
    return shlex.join(parts)
