"""No code outside the tasks branches on a task's name: what differs between tasks is each task's to say
(its Task class, its serving part: core.tasks.serving), so a new task needs no edit elsewhere.

A module's syntax tree is searched for a built-in task's name used to choose: compared (`task == "tiny"`,
`task in ("ranking", "sentiment")`), matched (`case "ranking":`), or a table's key (`{"tiny": ...}`,
`TABLE["recommender"]`). Docstrings, messages and arguments (`predictor._need("sentiment")`, a method's name)
do not count. core/tasks (the tasks and the catalogue that lists them) and tests may name tasks.
"""

from __future__ import annotations

import ast
from pathlib import Path

from core.tasks import TASK_NAMES

ROOT = Path(__file__).resolve().parent.parent


def _names_a_task(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in TASK_NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_task(element) for element in node.elts)
    return False


def task_name_switches(source: str) -> list[str]:
    """'line N: what' for each place `source` chooses by a built-in task's name."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(_names_a_task(n) for n in (node.left, *node.comparators)):
            found.append(f"line {node.lineno}: compared with a task's name")
        elif isinstance(node, ast.Dict) and any(k is not None and _names_a_task(k) for k in node.keys):
            found.append(f"line {node.lineno}: a table keyed by task names")
        elif isinstance(node, ast.Subscript) and _names_a_task(node.slice):
            found.append(f"line {node.lineno}: looked up by a task's name")
        elif isinstance(node, ast.MatchValue) and _names_a_task(node.value):
            found.append(f"line {node.lineno}: matched against a task's name")
    return found


def _modules() -> list[str]:
    """Every module of core/ and app/ outside core/tasks, as a path from the repository's root."""
    paths = [*(ROOT / "core").rglob("*.py"), *(ROOT / "app").rglob("*.py")]
    return sorted(
        p.relative_to(ROOT).as_posix() for p in paths if not p.relative_to(ROOT).as_posix().startswith("core/tasks/")
    )


def test_the_scan_finds_each_way_of_choosing_by_a_task_name():
    assert len(task_name_switches('if task == "tiny":\n    pass')) == 1
    assert len(task_name_switches('ok = task in ("ranking", "sentiment")')) == 1
    assert len(task_name_switches('x = "recommender" != state["task"]')) == 1
    assert len(task_name_switches('NAMES = {"tiny": "x", "ranking": "features"}')) == 1
    assert len(task_name_switches('name = NAMES["sentiment"]')) == 1
    assert len(task_name_switches('match task:\n    case "ranking":\n        pass')) == 1
    allowed = (
        '"""A tiny model; ranking and sentiment."""\n'
        'predictor._need("sentiment")\n'
        'raise ValueError("needs a ranking checkpoint")\n'
        "if task == other:\n    pass\n"
        'x = {"rows": 1}["rows"]\n'
    )
    assert task_name_switches(allowed) == []


def test_no_module_outside_the_tasks_switches_on_a_task_name():
    found = {
        module: switches
        for module in _modules()
        if (switches := task_name_switches((ROOT / module).read_text(encoding="utf-8")))
    }
    assert not found, "choosing by a task's name (ask the task: its Task class or serving part): " + "; ".join(
        f"{module} {', '.join(switches)}" for module, switches in found.items()
    )


def test_the_modules_that_served_each_task_its_own_way_are_scanned():
    """Export, predict, the standalone serve.py and `data generate` each once chose by a task's name: they are
    among the modules the scan reads (a move that took one out of core/ or app/ would hide it)."""
    assert {
        "core/runs/export.py",
        "core/runs/predict.py",
        "core/cli/predict.py",
        "core/runs/file_predict.py",
        "core/runs/file_input.py",
        "core/runs/serve.py",
        "core/cli/data.py",
    } <= set(_modules())


def test_the_preview_package_is_scanned_and_clean():
    """The Model preview builds its pages from the kinds a task's serving declares: every module of the
    package is scanned, none is excused."""
    preview = {m for m in _modules() if m.startswith("app/panels/preview/")}
    assert {"app/panels/preview/__init__.py", "app/panels/preview/pages.py", "app/panels/preview/widgets.py"} <= preview
