"""The window's work on a trained model in a child process, so a task file's code never runs in the window.

`python -m core.runs.predictor_child [REFERENCE ...]` lists the task files the user added (the one a checkpoint
names is loaded when it names it), then answers each JSON line {"method", "args", "kwargs"} of its stdin with one
line {"result"} or {"error": one line} until its stdin ends (the task's prints go to stderr). METHODS: load (the
preview's Predictor), its preview calls, export and evaluate. `ChildPredictor` is the preview's Predictor held in
such a child; `call_once` runs one method in a child of its own (core.process.run_child; a built-in task's here).
A call may take `work_limit()` s (WORK_LIMIT_ENV); at the limit, or when the child dies, its process group is
killed and the call raises one line naming the task file.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, fields, is_dataclass
from typing import IO, Any, cast

WORK_LIMIT_ENV = "AMP_CONSOLE_CHILD_SECONDS"
OBJECT = "__object__"  # a dataclass answer (a Recommendation, a ranking Query) travels as {OBJECT: its fields}


def work_limit() -> float:
    """Seconds one call to the child may take (1800 unless WORK_LIMIT_ENV says)."""
    try:
        return max(float(os.environ.get(WORK_LIMIT_ENV, "")), 0.1)
    except ValueError:
        return 1800.0


def command(references: list[str]) -> list[str]:
    return [sys.executable, "-m", "core.runs.predictor_child", *references]


def task_files(source: str) -> tuple[str, list[str]] | None:
    """For work on the run or checkpoint `source`: (what a child's one-line error names: the run's task file, else
    `source`; the task files this process added, which the child lists, to load the one the checkpoint names).
    None for a run of a built-in task, or a checkpoint file while no task file was added: none of their code runs."""
    from core.engine.run_record import recorded_task
    from core.tasks import task_names, task_source
    from core.tasks.user_tasks import installed_tasks

    task, task_file = recorded_task(source)
    references = sorted({task_source(name) for name in task_names()} - {""} - set(installed_tasks().values()))
    return (task_file or str(source), references) if task_file or (not task and references) else None


def plain(value):
    """`value` as JSON values: arrays as lists, dataclasses as {OBJECT: fields}."""
    if is_dataclass(value) and not isinstance(value, type):
        return {OBJECT: {f.name: plain(getattr(value, f.name)) for f in fields(value)}}
    if hasattr(value, "tolist"):  # numpy arrays and scalars, tensors
        return value.tolist()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    return [plain(v) for v in value] if isinstance(value, (list, tuple)) else value


def revive(value):
    """plain's JSON back, a dataclass as an object with its fields as attributes."""
    from types import SimpleNamespace

    if isinstance(value, dict):
        return SimpleNamespace(**revive(value[OBJECT])) if OBJECT in value else {k: revive(v) for k, v in value.items()}
    return [revive(v) for v in value] if isinstance(value, list) else value


def preview_parts(predictor) -> tuple[object, str]:
    """(the preview's examples, a note): the examples from the run's data; when that cannot be read (a data file
    moved since) the note says why the pickers are empty (typed inputs still work)."""
    from core.errors import AmpConsoleError

    try:
        if getattr(predictor.serving, "preview", None) is not None:
            return predictor.preview_examples(), ""
    except (AmpConsoleError, OSError) as exc:
        return None, f"No examples from the run's data: {exc}"
    return None, ""


# ============================================================================== in the child
def _load(state: dict, source: str, which: str, device: str) -> dict:
    from core.runs.predict import load_predictor

    predictor = state["predictor"] = load_predictor(source, which=which, device=device)
    examples, note = preview_parts(predictor)
    spec = getattr(predictor.serving, "preview", None)
    names = ("task", "checkpoint", "step", "epoch", "metrics", "config", "notes", "n_features")
    return {n: getattr(predictor, n) for n in names} | {
        "checkpoint": str(predictor.checkpoint),
        "device": str(predictor.device),
        "preview": None if spec is None else asdict(spec),
        "examples": examples,
        "note": note,
    }


def _export(_state: dict, source: str, destination: str, fmt: str | None) -> tuple[str, str]:
    """(the status line, the log line) of an export: a serving folder in format `fmt`, else checkpoint files."""
    from pathlib import Path

    if fmt:
        from core.runs.export import export_model

        line = "Exported " + export_model(source, destination, fmt).summary().removeprefix("exported ")
        return line, line
    from core.engine.checkpoints import export_checkpoint

    paths = [str(p) for p in export_checkpoint(source, destination)]
    names = ", ".join(Path(p).name for p in paths)
    return f"Exported to {names} in {Path(paths[0]).parent}", "Exported: " + ", ".join(paths)


def _evaluate(_state: dict, checkpoint: str, device: str | None, folder: str) -> dict:
    """The evaluation report of `checkpoint`, written in `folder`."""
    from core.runs.evaluation_report import evaluation_report, write_report

    report = evaluation_report(checkpoint, device=device)
    write_report(report, folder)
    return report


def _predictor_call(name: str):
    def call(state: dict, *args, **kwargs):
        predictor = state["predictor"]
        return (
            predictor.serving.preview_quality(*args)
            if name == "preview_quality"
            else getattr(predictor, name)(*args, **kwargs)
        )

    return call


METHODS = {"load": _load, "export": _export, "evaluate": _evaluate} | {
    name: _predictor_call(name) for name in ("preview_answer", "preview_explain", "preview_quality")
}


def main(argv: list[str]) -> None:
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the task's prints go to stderr: stdout carries the answers only
    from core.errors import AmpConsoleError
    from core.tasks import remember_task
    from core.text import first_line

    for reference in argv:  # listed from its source: loaded (its code run) when a checkpoint names its task
        remember_task(reference)
    state: dict = {}
    for line in sys.stdin:
        try:
            request = json.loads(line)
            method = METHODS[request["method"]]
            answer = {"result": plain(method(state, *request.get("args", ()), **request.get("kwargs", {})))}
        except BaseException as exc:  # the task's code may raise anything, SystemExit included: one line
            answer = {
                "error": str(exc) if isinstance(exc, AmpConsoleError) else f"{type(exc).__name__}: {first_line(exc)}"
            }
        out.write(json.dumps(answer, default=str) + "\n")
        out.flush()
    os._exit(0)  # not waiting for threads the task's code may have started


# ============================================================================== in the window
def _answer(line: str | None):
    """The child's answer line: its result, its error as an AmpConsoleError; None when there was none."""
    from core.errors import AmpConsoleError

    try:
        answer = json.loads(line or "")
    except ValueError:
        return None
    if isinstance(answer, dict) and "error" in answer:
        raise AmpConsoleError(str(answer["error"]))
    return answer if isinstance(answer, dict) and "result" in answer else None


def _request(method: str, args, kwargs) -> str:
    return json.dumps({"method": method, "args": plain(list(args)), "kwargs": plain(kwargs)}) + "\n"


def call_once(method: str, source: str, *args):
    """METHODS[method](source, *args): in a child of its own (core.process.run_child) where a task file's code may
    run (task_files), else here (a built-in task's code is trusted)."""
    from core.errors import AmpConsoleError
    from core.process import run_child

    files = task_files(source)
    if files is None:
        return METHODS[method]({}, source, *args)
    named, references = files
    child = run_child(command(references), _request(method, (source, *args), {}), work_limit())
    lines = child.out.strip().splitlines()
    answer = None if child.timed_out else _answer(lines[-1] if lines else None)
    if answer is None:
        what = f"{named}: {method} in a child process"
        raise AmpConsoleError(child.problem(what, work_limit()) or f"{what}: no answer")
    return revive(answer["result"])


class ChildPredictor:
    """The preview's Predictor for a task file's model: what the preview reads of a Predictor, its calls answered
    by a child process that holds the real one. A dead or stopped child leaves every later call one line."""

    def __init__(self, files: tuple[str, list[str]]):
        """The child started, for `files` (task_files of the checkpoint): `load` loads the model there."""
        import queue
        import subprocess
        import tempfile
        import threading
        import weakref

        from core.process import child_environment

        self.named, self._ended = files[0], ""
        self._err = tempfile.TemporaryFile("w+")
        self._process = subprocess.Popen(
            command(files[1]),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            text=True,
            start_new_session=True,
            env=child_environment(),
        )
        self._lines: queue.Queue = queue.Queue()
        threading.Thread(target=_read_lines, args=(self._process.stdout, self._lines), daemon=True).start()
        self._lock = threading.Lock()
        self.close = weakref.finalize(self, _stop, self._process, self._err)  # called, or when it is collected

    def load(self, source: str, which: str, device: str) -> ChildPredictor:
        from types import SimpleNamespace

        from core.tasks.serving import PreviewSpec

        info = self.call("load", str(source), which, device)
        values: dict[str, Any] = {
            k: tuple(v) if isinstance(v, list) else v for k, v in (info.pop("preview") or {}).items()
        }
        spec = PreviewSpec(**values) if values else None
        self.serving = SimpleNamespace(
            preview=spec, preview_quality=lambda labels: self.call("preview_quality", labels)
        )
        self.examples, self.note = info.pop("examples"), info.pop("note")
        for name, value in info.items():
            setattr(self, name, value)
        return self

    def preview_answer(self, *args, **kwargs):
        return self.call("preview_answer", *args, **kwargs)

    def preview_explain(self, text: str):
        return self.call("preview_explain", text)

    def call(self, method: str, *args, **kwargs):
        """METHODS[method](*args, **kwargs) in the child; AmpConsoleError with its one line."""
        import queue
        import time

        from core.errors import AmpConsoleError
        from core.process import Child

        with self._lock:
            if self._ended:
                raise AmpConsoleError(self._ended)
            try:
                stdin = cast(IO[str], self._process.stdin)
                stdin.write(_request(method, args, kwargs))
                stdin.flush()
            except OSError:
                pass  # it is gone: said below
            deadline, line, timed_out = time.monotonic() + work_limit(), None, False
            while line is None and not timed_out:
                try:
                    line = self._lines.get(timeout=0.2)
                except queue.Empty:
                    if self._process.poll() is not None:  # it ended: its last line, if any, is on its way
                        try:
                            line = self._lines.get(timeout=1.0)
                        except queue.Empty:
                            line = ""
                    timed_out = time.monotonic() > deadline
            answer = None if timed_out else _answer(line)
            if answer is not None:
                return revive(answer["result"])
            self._err.seek(0)
            errors = self._err.read()
            self.close()
            code = self._process.wait()  # reaped by close, here or on another thread
            child = Child(None if code < 0 else code, "", errors, timed_out)
            what = f"{self.named}: {method} in the preview's child process"
            self._ended = child.problem(what, work_limit()) or f"{what}: no answer"
            raise AmpConsoleError(self._ended)


def _read_lines(stream, lines) -> None:
    """(A thread's.) Each line the child writes, then "" at its end."""
    with stream:
        for line in stream:
            lines.put(line)
    lines.put("")


def _stop(process, err) -> None:
    """Kill the child's process group and reap it; its stdin and stderr file closed."""
    import signal

    from core.process import signal_group

    signal_group(process.pid, getattr(signal, "SIGKILL", 9))
    process.wait()
    for stream in (process.stdin, err):
        try:
            stream.close()
        except OSError:  # a request it never read
            pass


if __name__ == "__main__":
    main(sys.argv[1:])
