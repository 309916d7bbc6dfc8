"""Read a task's description, options and defaults from its module's syntax tree, without torch; a class whose
attributes are not literals gets None, and the registry imports it instead.
"""

from __future__ import annotations

import ast
import operator
from pathlib import Path

from core.tasks.options import TASK_ATTRIBUTES, TaskInfo, TaskOption

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
}


class _NotLiteral(Exception):
    pass


def _value(node: ast.AST):
    """A literal expression's value: constants, tuples/lists/dicts, arithmetic on numbers, TaskOption(...)."""
    match node:
        case ast.Constant(value=value):
            return value
        case ast.Tuple(elts=elts) | ast.List(elts=elts):
            return tuple(_value(e) for e in elts)
        case ast.Dict(keys=keys, values=values) if None not in keys:
            return {_value(k): _value(v) for k, v in zip(keys, values)}
        case ast.UnaryOp(op=ast.USub(), operand=operand):
            return -_value(operand)
        case ast.BinOp(left=left, op=op, right=right) if type(op) in _BINARY:
            a, b = _value(left), _value(right)
            if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)):
                raise _NotLiteral
            return _BINARY[type(op)](a, b)
        case ast.Call(func=ast.Name(id="TaskOption"), args=args, keywords=keywords):
            return TaskOption(
                *(_value(a) for a in args), **{k.arg: _value(k.value) for k in keywords if k.arg is not None}
            )
    raise _NotLiteral


SOURCE_LIMIT = 4 * 2**20  # bytes of a task's source read on the window's thread; a longer one is only imported


def read_source(source: Path | str) -> bytes:
    """A task module's source, opened only as a regular file of at most SOURCE_LIMIT bytes."""
    from core.files import open_regular

    with open_regular(source) as file:
        data = file.read(SOURCE_LIMIT + 1)
    if len(data) > SOURCE_LIMIT:
        raise ValueError(f"its source is longer than {SOURCE_LIMIT >> 20} MiB: not read, only imported")
    return data


def _classes(source: Path | str) -> list[ast.ClassDef]:
    try:
        tree = ast.parse(read_source(source).decode("utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return []
    return [n for n in tree.body if isinstance(n, ast.ClassDef)]


def task_class_names(source: Path | str) -> list[str]:
    """The names of the Task classes in the file at `source`, in file order, read without running it."""
    found: list[str] = []
    for node in _classes(source):
        if any(ast.unparse(b) in ("Task", *found) for b in node.bases):
            found.append(node.name)
    return found


def find_task_class(source: Path | str) -> str | None:
    """The name of the one class in `source` that derives from Task directly; None otherwise."""
    found = [n.name for n in _classes(source) if [ast.unparse(b) for b in n.bases] == ["Task"]]
    return found[0] if len(found) == 1 else None


def read_task_info(source: Path | str, class_name: str) -> TaskInfo | None:
    """The TaskInfo of class `class_name` in the module at `source`; None when it is not plain literals."""
    cls = next((n for n in _classes(source) if n.name == class_name), None)
    if cls is None or [ast.unparse(b) for b in cls.bases] != ["Task"]:
        return None
    values: dict = {}
    for statement in cls.body:
        match statement:
            case ast.Assign(targets=[ast.Name(id=attr)], value=value) if attr in TASK_ATTRIBUTES:
                pass
            case ast.AnnAssign(target=ast.Name(id=attr), value=value) if attr in TASK_ATTRIBUTES and value:
                pass
            case _:
                continue
        try:
            values[attr] = _value(value)
        except (_NotLiteral, TypeError, ValueError, ArithmeticError):
            return None
    if not isinstance(values.get("name"), str) or not isinstance(values.get("description"), str):
        return None
    options = values.get("options", ())
    if not all(isinstance(o, TaskOption) for o in options):
        return None
    own = any(isinstance(f, ast.FunctionDef) and f.name == "configure_optimizers" for f in cls.body)
    return TaskInfo(**values, own_optimizer=own)
