"""Work around a PySide6 bug on Python < 3.12: Qt methods returning void drop a reference to None.

PySide6 6.12's wheels return `None` from void methods without taking a reference, which is only harmless
where None is immortal (Python >= 3.12). On 3.11 each call (QPainter.setPen, QWidget.update, ...) lowers
None's reference count by one; a few thousand calls in, the interpreter aborts with
"Fatal Python error: none_dealloc" (bool-returning paths do the same to True/False: "bool_dealloc").
Where the leak is detected, we give None, True and False the effectively infinite reference count Python
3.12 gives them. Nothing is done on interpreters or PySide6 builds without the bug.
"""

from __future__ import annotations

import ctypes
import sys

_IMMORTAL = 1 << 60
_checked = False


def void_calls_leak_none() -> bool:
    """True when calling a void Qt method lowers None's reference count (the bug)."""
    from PySide6.QtCore import QPoint

    point = QPoint()
    before = sys.getrefcount(None)
    for _ in range(100):
        point.setX(1)
    return sys.getrefcount(None) < before - 50


def protect_none() -> bool:
    """Apply the workaround once if needed; returns whether it was applied."""
    global _checked
    if _checked:
        return False
    _checked = True
    if sys.version_info >= (3, 12) or not void_calls_leak_none():
        return False
    # ob_refcnt is the first field of every CPython object (Py_ssize_t), at the object's address.
    for singleton in (None, True, False):
        ctypes.c_ssize_t.from_address(id(singleton)).value += _IMMORTAL
    return True
