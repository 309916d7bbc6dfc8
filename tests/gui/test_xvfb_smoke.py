"""Opens the real window in a real X server. CI: `QT_QPA_PLATFORM=xcb xvfb-run pytest -m xvfb tests/gui`."""

from __future__ import annotations

import os

import pytest

pytestmark = [
    pytest.mark.xvfb,
    pytest.mark.skipif(
        os.environ.get("QT_QPA_PLATFORM") != "xcb" or not os.environ.get("DISPLAY"),
        reason="needs QT_QPA_PLATFORM=xcb and a DISPLAY (run under xvfb-run)",
    ),
]


@pytest.mark.timeout(60)
def test_window_opens_and_trains_in_a_real_x_window(qtbot, window, tmp_path):
    from gui_helpers import finish_run, quick_run

    assert window.isVisible() and window.windowHandle() is not None
    quick_run(window, tmp_path / "run", epochs=1, samples=1024)
    finish_run(qtbot, window)
    assert "completed" in window.statusBarWidget.message.text().lower()
    assert not window.grab().isNull()
