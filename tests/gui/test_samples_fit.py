"""The samples panel, once shown beside the plots, takes its room from the plots' column: the window stays as wide
as it was (a 1366-pixel screen still holds it) and every plot keeps its minimum width."""

from __future__ import annotations

import pytest


@pytest.mark.timeout(120)
def test_samples_beside_the_plots_do_not_widen_the_window(qtbot, window):
    window.resize(1366, 768)
    qtbot.waitUntil(lambda: window.width() == 1366, timeout=60_000)
    window.samplesPanel.show()
    qtbot.waitUntil(lambda: window.samplesPanel.width() > 0, timeout=60_000)
    assert window.minimumSizeHint().width() <= 1366 and window.width() == 1366
    panel = window.plotsPanel
    assert panel.width() >= panel.minimumSizeHint().width()
    assert window.samplesPanel.width() >= 150, window.plotsSplitter.sizes()  # its three columns stay readable
