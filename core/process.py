"""How a console process ends (exit_process), how one stops a child's process group (StopEscalation), the one
way to run a child with a time limit (run_child), and the one way to talk to a child that runs user code in
JSON lines (JsonChild here, answer_requests there)."""

from __future__ import annotations

import gc
import math
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

# After a stop request: this long to finish the step and write the checkpoint, then SIGINT to the process
# group (every rank stops on it with a checkpoint); after as long again, SIGKILL.
STOP_GRACE_SECONDS = 30.0
POSIX = os.name == "posix"


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_process(code: int | None) -> NoReturn:
    """`sys.exit(code)` without the interpreter's last full collections over every object alive (torch's
    included): what exists is frozen first. atexit handlers, flushing and finalizers run as usual."""
    gc.freeze()
    sys.exit(code)


def signal_group(pid: int, sig: int) -> None:
    """Send `sig` to the process group `pid` leads (started with start_new_session). Where there are no
    groups: SIGINT terminates the process, SIGKILL kills its children and then it. A gone process is fine."""
    if pid <= 0:
        return
    if POSIX:
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        return
    import psutil

    try:
        process = psutil.Process(pid)
        if sig == signal.SIGINT:
            process.terminate()
            return
        for child in process.children(recursive=True):
            child.kill()
        process.kill()
    except psutil.Error:
        pass


class StopEscalation:
    """A stop that escalates: `poll()` sends SIGINT to the group once `grace` seconds have passed since the
    stop was asked, and SIGKILL after as long again. `due_in()` says when to poll next (for a timer)."""

    def __init__(self, pid: int, grace: float = STOP_GRACE_SECONDS):
        self.pid, self.grace = pid, grace
        self.asked_at = time.monotonic()
        self.interrupted = self.killed = False

    def poll(self) -> None:
        elapsed = time.monotonic() - self.asked_at
        if not self.interrupted and elapsed >= self.grace:
            self.interrupted = True
            signal_group(self.pid, signal.SIGINT)
        if not self.killed and elapsed >= 2 * self.grace:
            self.killed = True
            signal_group(self.pid, getattr(signal, "SIGKILL", signal.SIGTERM))

    def due_in(self) -> float:
        """Seconds until the next escalation (0 when it is due; inf when nothing is left to send)."""
        if self.killed:
            return float("inf")
        target = self.grace * (2 if self.interrupted else 1)
        return max(0.0, target - (time.monotonic() - self.asked_at))


@dataclass(frozen=True)
class Child:
    """How a child run by run_child ended (`code` None: killed by a signal)."""

    code: int | None
    out: str
    err: str
    timed_out: bool = False

    def problem(self, what: str, limit: float = 0.0) -> str:
        """'' when it exited 0; else one line: `what` and how it ended (its stderr's last line where it said one)."""
        if self.timed_out:
            return f"{what} did not finish in {limit:g} s: stopped"
        if self.code == 0:
            return ""
        lines = [line for line in self.err.splitlines() if line.strip() and not line.startswith("USDT")]
        how = "it was killed by a signal" if self.code is None else f"it ended with exit code {self.code}"
        return f"{what}: {lines[-1].strip()}" if lines else f"{what}: {how}"


def child_environment() -> dict[str, str]:
    """This process's environment, with its import path: a child imports what this process can."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(entry for entry in sys.path if entry)}


def run_child(
    argv: list[str], stdin: str = "", seconds: float = 60.0, started: Callable[[int], None] | None = None
) -> Child:
    """Run `argv` as the leader of a process group of its own, `stdin` its input; its outputs go to files (a process
    it forked holds no pipe open past its exit). At `seconds`, and whenever it ends, its whole group is killed.
    `started(pid)` is called once it runs (another thread may signal_group it). A failed start is exit code 127."""
    import subprocess
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        try:
            child = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                text=True,
                start_new_session=True,
                env=child_environment(),
            )
        except OSError as exc:
            return Child(127, "", f"{argv[0]}: {exc.strerror or exc}")
        if started is not None:
            started(child.pid)
        timed_out = False
        try:
            child.communicate(stdin, timeout=seconds)
        except subprocess.TimeoutExpired:
            timed_out = True
        except OSError:  # its stdin closed early (it exited before reading): how it ended says why
            pass
        finally:
            signal_group(child.pid, getattr(signal, "SIGKILL", signal.SIGTERM))  # what it started included
            child.wait()
        out.seek(0)
        err.seek(0)
        code = child.returncode
        return Child(None if code < 0 else code, out.read(), err.read(), timed_out)


# ============================================================================== JSON-line children
OBJECT, TYPE = "__object__", "__type__"  # a dataclass travels as {OBJECT: its fields, TYPE: "module:Name"}


def plain(value):
    """`value` as JSON values: arrays as lists, dataclasses as {OBJECT: fields, TYPE: where the class is}."""
    from dataclasses import fields, is_dataclass

    if is_dataclass(value) and not isinstance(value, type):
        kind = type(value)
        return {
            OBJECT: {f.name: plain(getattr(value, f.name)) for f in fields(value)},
            TYPE: f"{kind.__module__}:{kind.__qualname__}",
        }
    if hasattr(value, "tolist"):  # numpy arrays and scalars, tensors
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return [plain(v) for v in value] if isinstance(value, (list, tuple)) else value


def revive(value):
    """plain's JSON back: a dataclass of the console's own (core.*) as itself, any other as an object with its
    fields as attributes (no other module is imported for it)."""
    if isinstance(value, list):
        return [revive(v) for v in value]
    if not isinstance(value, dict):
        return value
    if OBJECT not in value:
        return {k: revive(v) for k, v in value.items()}
    values = {str(k): revive(v) for k, v in dict(value[OBJECT]).items()}
    return _rebuilt(str(value.get(TYPE, "")), values)


def _rebuilt(where: str, values: dict):
    import dataclasses
    import importlib
    from types import SimpleNamespace

    module, _, name = where.partition(":")
    try:
        if not module.startswith("core."):
            raise LookupError(module)
        kind: Any = importlib.import_module(module)
        for part in name.split("."):
            kind = getattr(kind, part)
        init = {f.name for f in dataclasses.fields(kind) if f.init}
        made = kind(**{k: v for k, v in values.items() if k in init})
        for key, item in values.items():
            if key not in init:
                object.__setattr__(made, key, item)
        return made
    except Exception:  # not ours, or its fields changed: its values, as attributes
        return SimpleNamespace(**values)


class JsonChild:
    """A child process (the leader of its own group) that answers JSON-line requests (`answer_requests`): user
    code runs there, never here. `call` waits for the answer, relays {"progress"} lines to `progress` and sends
    {"stop"} once `control` asks; past `limit` s or once the child dies, it is killed and every later call raises
    one line naming `named`."""

    def __init__(self, argv: list[str], named: str, env: dict[str, str] | None = None):
        import queue
        import subprocess
        import tempfile
        import threading
        import weakref

        self.named, self._ended = named, ""
        self._err = tempfile.TemporaryFile("w+")
        self._process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            start_new_session=True,
            env=env or child_environment(),
        )
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=_read_lines, args=(self._process.stdout, self._lines), daemon=True).start()
        self._lock = threading.Lock()
        self.close = weakref.finalize(self, _stop_child, self._process, self._err)  # called, or when collected

    def _send(self, message: dict) -> None:
        import json

        try:
            assert self._process.stdin is not None  # opened with PIPE
            self._process.stdin.write(json.dumps(plain(message)) + "\n")
            self._process.stdin.flush()
        except OSError:
            pass  # it is gone: how it ended says why

    def call(
        self,
        method: str,
        *args,
        progress: Callable | None = None,
        control=None,
        limit: float,
        stop_grace: float = math.inf,
        **kwargs,
    ):
        """`method`(*args, **kwargs) in the child: its answer; AmpConsoleError with one line when there is none.
        After a stop, the child has `stop_grace` s to answer."""
        import queue

        from core.errors import AmpConsoleError

        with self._lock:
            if self._ended:
                raise AmpConsoleError(self._ended)
            self._send({"method": method, "args": list(args), "kwargs": kwargs})
            deadline, line, timed_out, stop_sent = time.monotonic() + limit, None, False, False
            while not timed_out:
                if control is not None and control.stop_requested and not stop_sent:
                    stop_sent = True
                    self._send({"stop": True})
                    deadline = min(deadline, time.monotonic() + stop_grace)
                try:
                    line = self._lines.get(timeout=0.2)
                except queue.Empty:
                    if self._process.poll() is not None:  # it ended: its last line, if any, is on its way
                        try:
                            line = self._lines.get(timeout=1.0)
                        except queue.Empty:
                            line = ""
                    else:
                        timed_out = time.monotonic() > deadline
                        continue
                answer = parse_answer(line)
                if answer is not None and "progress" in answer:
                    if progress is not None:
                        progress(revive(answer["progress"]))
                    continue
                if answer is not None and "result" in answer:
                    return revive(answer["result"])
                break
            self._err.seek(0)
            errors = self._err.read()
            self.close()
            code = self._process.wait()  # reaped by close, here or on another thread
            child = Child(None if code < 0 else code, "", errors, timed_out)
            what = f"{self.named}: {method} in a child process"
            self._ended = (
                f"{what} was stopped: it did not end within {stop_grace:g} s of the stop"
                if stop_sent and timed_out
                else child.problem(what, limit) or f"{what}: no answer"
            )
            raise AmpConsoleError(self._ended)


def parse_answer(line: str | None) -> dict | None:
    """The child's answer line as a dict; None when it is none. An {"error"} is raised as the core.errors type
    the child raised (its field and details kept), else as an AmpConsoleError."""
    import json

    from core import errors

    try:
        answer = json.loads(line or "")
    except ValueError:
        return None
    if isinstance(answer, dict) and "error" in answer:
        kind = getattr(errors, str(answer.get("kind")), None)
        kind = kind if isinstance(kind, type) and issubclass(kind, errors.AmpConsoleError) else errors.AmpConsoleError
        error = kind.__new__(kind)
        Exception.__init__(error, str(answer["error"]))  # the child's line as it was, whatever the type's arguments
        error.field, error.details = str(answer.get("field", "")), str(answer.get("details", ""))  # type: ignore[attr-defined]
        raise error
    return answer if isinstance(answer, dict) else None


def _read_lines(stream, lines) -> None:
    """(A thread's.) Each line the child writes, then "" at its end."""
    with stream:
        for line in stream:
            lines.put(line)
    lines.put("")


def _stop_child(process, err) -> None:
    """Kill the child's process group and reap it; its stdin and stderr file closed."""
    signal_group(process.pid, getattr(signal, "SIGKILL", 9))
    process.wait()
    for stream in (process.stdin, err):
        try:
            stream.close()
        except OSError:  # a request it never read
            pass


def answer_requests(methods: dict[str, Callable], state: dict, stop: Callable[[], None] | None = None):
    """(In a child.) Answer each JSON line {"method", "args", "kwargs"} of stdin with one line {"result"} or
    {"error": one line}, until stdin ends; `state["progress"](value)` writes a {"progress"} line meanwhile, and a
    {"stop"} line or stdin's end calls `stop`. What the task's code prints goes to stderr: stdout carries the answers only."""
    import json
    import queue
    import threading
    import traceback

    from core.errors import AmpConsoleError
    from core.text import first_line

    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    lock = threading.Lock()

    def write(message: dict) -> None:
        with lock:
            out.write(json.dumps(message, default=str) + "\n")
            out.flush()

    state["progress"] = lambda value: write({"progress": plain(value)})
    requests: queue.Queue = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            if line.startswith('{"stop"'):
                if stop is not None:
                    stop()
            else:
                requests.put(line)
        if stop is not None:  # stdin's end: the parent is gone, so is whoever waits for the work under way
            stop()
        requests.put(None)

    threading.Thread(target=read, daemon=True).start()
    while (line := requests.get()) is not None:
        try:
            request = revive(json.loads(line))
            method = methods[request["method"]]
            answer = {"result": plain(method(state, *request.get("args", ()), **request.get("kwargs", {})))}
        except BaseException as exc:  # the task's code may raise anything, SystemExit included: one line
            ours = isinstance(exc, AmpConsoleError)
            answer = {
                "error": str(exc) if ours else f"{type(exc).__name__}: {first_line(exc)}",
                "kind": type(exc).__name__ if ours else "",
                "field": getattr(exc, "field", "") or "",
                "details": getattr(exc, "details", "") or ("" if ours else traceback.format_exc()),
            }
        write(answer)
    os._exit(0)  # not waiting for threads the task's code may have started
