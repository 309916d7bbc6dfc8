"""The precision and tuning dialogs fit a 1366-pixel screen: none asks for more width than that."""

from __future__ import annotations

import pytest


@pytest.mark.timeout(120)
@pytest.mark.parametrize("show", ["show_compare", "show_batch_finder", "show_lr_finder", "show_sweep"])
def test_a_tool_dialog_fits_a_1366_pixel_screen(qtbot, window, show):
    dialog = getattr(window.tools, show)()
    qtbot.waitExposed(dialog, timeout=60_000)
    assert dialog.minimumSizeHint().width() <= 1366, dialog.minimumSizeHint()
    dialog.hide()
