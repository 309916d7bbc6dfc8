"""The window's device tools on a task file's model in a child process, so its code never runs in the window;
and compare precisions' one mode in a fresh process (`measure`, for its own peak memory).
`run_tool(name, config, progress, control, **kwargs)` calls TOOLS[name] here for a built-in task, else in
`python -m core.lab.tool_child` (a core.process.JsonChild): its progress is relayed, a stop is passed on and the
child is killed TOOL_STOP_GRACE s after a stop it did not finish in; a child that dies is one line naming the file.
"""

from __future__ import annotations

import importlib
import inspect
import math
import sys

TOOLS = {
    "lr_finder": "core.lab.lr_finder:find_lr",
    "batch_finder": "core.lab.batch_finder:find_batch_sizes",
    "summary": "core.lab.model_summary:summarize",
    "compare": "core.lab.precision_sweep:run_sweep",
    "inspector": "core.lab.dtype_inspector:inspect_dtypes",
}
COMMAND = [sys.executable, "-m", "core.lab.tool_child"]
TOOL_STOP_GRACE = 10.0  # seconds a stopped tool has to return what it measured before its child is killed


def _function(where: str):
    """A function named "module:function" (the tools are named, not imported: a tool imports this module)."""
    module, function = where.split(":")
    return getattr(importlib.import_module(module), function)


def _call(name: str, config, progress, control, kwargs: dict):
    tool = _function(TOOLS[name])
    accepted = inspect.signature(tool).parameters
    given = {"progress": progress, "control": control}
    return tool(config, **kwargs, **{k: v for k, v in given.items() if k in accepted})


def in_child(method: str, *args, named: str, progress=None, control=None, stop_grace: float | None = None, env=None):
    """`method`(*args) ("run" or "measure", below) in a fresh child process, which `named` names in its errors; after
    a stop it has `stop_grace` s (default TOOL_STOP_GRACE) to answer."""
    from core.process import JsonChild

    grace = TOOL_STOP_GRACE if stop_grace is None else stop_grace
    child = JsonChild(COMMAND, named, env=env)
    try:
        return child.call(method, *args, progress=progress, control=control, limit=math.inf, stop_grace=grace)
    finally:
        child.close()


def run_tool(name: str, config, progress=None, control=None, **kwargs):
    """TOOLS[name](config, **kwargs): here for a built-in task (or with a test's injected probe), else in a child."""
    if not config.task_file or kwargs.get("probe") is not None:
        return _call(name, config, progress, control, kwargs)
    return in_child("run", name, config.to_dict(), kwargs, named=config.task_file, progress=progress, control=control)


def _config(values: dict):
    from core.config import RunConfig
    from core.tasks import load_config_task

    load_config_task(values)  # a task file: the one the window's (or the sweep's) process was given
    return RunConfig.from_dict(values)


def _run(state: dict, name: str, config: dict, kwargs: dict):
    return _call(name, _config(config), state["progress"], state["control"], kwargs)


def _measure(state: dict, config: dict, mode: str, steps: int, repeats: int, warmup_windows: int):
    """Compare precisions' one mode in a process of its own (core.lab.precision_sweep.measure_mode_isolated)."""
    measure_mode, report = _function("core.lab.precision_sweep:measure_mode"), state["progress"]
    return measure_mode(_config(config), mode, steps, repeats, warmup_windows, on_window=lambda *w: report(list(w)))


def main() -> None:
    from core.engine.control import RunControl
    from core.process import answer_requests

    control = RunControl()
    answer_requests({"run": _run, "measure": _measure}, {"control": control}, stop=control.stop)


if __name__ == "__main__":
    main()
