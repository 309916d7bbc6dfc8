"""The window's work on a trained model in a child process, so a task file's code never runs in the window:
`python -m core.runs.predictor_child [REFERENCE ...]` lists the task files the user added, then answers METHODS (load:
the preview's Predictor; its preview calls; export; evaluate) as core.process.answer_requests does. `ChildPredictor`
is the preview's Predictor held in such a child; `call_once` runs one method in a child of its own (a built-in task's
here). A call may take `work_limit()` s; at the limit, or when the child dies, it raises one line naming the task file.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict
from typing import Any

from core.process import JsonChild

WORK_LIMIT_ENV = "AMP_CONSOLE_CHILD_SECONDS"


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
    from core.process import answer_requests
    from core.tasks import remember_task

    for reference in argv:  # listed from its source: loaded (its code run) when a checkpoint names its task
        remember_task(reference)
    answer_requests(METHODS, {})


# ============================================================================== in the window
def call_once(method: str, source: str, *args):
    """METHODS[method](source, *args): in a child of its own (a core.process.JsonChild) where a task file's code
    may run (task_files), else here (a built-in task's code is trusted)."""
    files = task_files(source)
    if files is None:
        return METHODS[method]({}, source, *args)
    child = JsonChild(command(files[1]), files[0])
    try:
        return child.call(method, source, *args, limit=work_limit())
    finally:
        child.close()


class ChildPredictor(JsonChild):
    """The preview's Predictor for a task file's model: what the preview reads of a Predictor, its calls answered
    by a child process that holds the real one. A dead or stopped child leaves every later call one line."""

    def __init__(self, files: tuple[str, list[str]]):
        """The child started, for `files` (task_files of the checkpoint): `load` loads the model there."""
        super().__init__(command(files[1]), files[0])

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
        return super().call(method, *args, limit=work_limit(), **kwargs)


if __name__ == "__main__":
    main(sys.argv[1:])
