"""The precision and tuning dialogs fit a 1366-pixel screen: none asks for more width than that, and a bar
chart's long title is cut to its width, whole in its tooltip."""

from __future__ import annotations

import pytest


@pytest.mark.timeout(120)
@pytest.mark.parametrize("show", ["show_compare", "show_batch_finder", "show_lr_finder", "show_sweep"])
def test_a_tool_dialog_fits_a_1366_pixel_screen(qtbot, window, show):
    dialog = getattr(window.tools, show)()
    qtbot.waitExposed(dialog, timeout=60_000)
    assert dialog.minimumSizeHint().width() <= 1366, dialog.minimumSizeHint()
    dialog.hide()


@pytest.mark.timeout(120)
def test_a_long_chart_title_is_elided_whole_in_its_tooltip(qtbot, window):
    dialog = window.tools.show_compare()
    qtbot.waitExposed(dialog, timeout=60_000)
    chart = dialog.memoryChart
    whole = "Peak memory (peak RSS (VmHWM, reset) since each mode's setup; a fresh process per mode)" * 2
    chart.set_title(whole)
    label = chart.plot.getPlotItem().titleLabel
    qtbot.waitUntil(lambda: label.text.endswith("…"), timeout=60_000)
    assert label.item.boundingRect().width() <= chart.plot.width() and chart.plot.toolTip() == whole
