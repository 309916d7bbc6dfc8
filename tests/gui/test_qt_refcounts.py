"""The installed PySide6 must not leak references to None/True/False on void and bool Qt calls.

PySide6-Essentials 6.12.0 does on Python < 3.12, and the interpreter then aborts mid-run
("Fatal Python error: none_dealloc"); pyproject.toml keeps that release out. This test catches a regression.
"""

import sys

import pytest


@pytest.mark.timeout(30)
def test_void_and_bool_qt_calls_keep_singleton_refcounts(qapp):
    from PySide6.QtCore import QPoint

    point = QPoint()
    before = {name: sys.getrefcount(obj) for name, obj in (("None", None), ("True", True), ("False", False))}
    for _ in range(1000):
        point.setX(1)  # returns void
        point.isNull()  # returns bool
    after = {name: sys.getrefcount(obj) for name, obj in (("None", None), ("True", True), ("False", False))}
    for name in before:
        assert after[name] >= before[name] - 50, f"{name} lost {before[name] - after[name]} references"
