import sys; sys.path.insert(0, "/work/main/tests/gui")
from test_plot_axes import started, step, label_rects
def test_dbg(window, qtbot):
    p = window.plotsPanel
    p.handle_event(started(200_000))
    for n in range(50, 60001, 50): p.handle_event(step(n))
    window.resize(window.minimumSizeHint()); qtbot.wait(50); p.redraw()
    for k in ("lr", "memory"):
        w = p.plots[k]; ax = w.getPlotItem().getAxis("left")
        print(k, type(ax).__name__, ax.width(), ax.textWidth, ax.boundingRect(), ax.style['tickTextOffset'], ax.style['tickLength'], [(r, t) for r, t in label_rects(w, "left")][:2])
