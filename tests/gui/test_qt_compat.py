"""PySide6 6.12 on Python 3.11 drops a None reference per void call; the window must survive long runs."""

import sys

import pytest


@pytest.mark.timeout(30)
def test_many_void_qt_calls_do_not_exhaust_none(qapp):
    import app.main_window  # noqa: F401  (applies the guard on import)
    from PySide6.QtCore import QPoint

    point = QPoint()
    for _ in range(200_000):  # far beyond None's natural reference count on 3.11
        point.setX(1)
    assert sys.getrefcount(None) > 0
