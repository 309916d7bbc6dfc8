"""Other runs overlaid on the plots: they stay when a new run starts (its axes hold both), Clear removes them
and their legend entries, their colours stay apart; and File → Export asks last or best when a run has both."""

from __future__ import annotations

import json
import math
import os
import re

import numpy as np
import pytest
from gui_helpers import finish_run, quick_run, set_field
from PySide6.QtCore import Signal

import app.file_actions
from app.file_actions import checkpoint_choices
from app.panels.plot_overlays import OVERLAY_COLOURS
from app.panels.plots import LOSS_COLOUR, METRIC_COLOURS, PlotsPanel
from app.plot_points import OverlayPoints, history_points, overlay_points
from core.engine.events import EvalMetrics, RunStarted, StepMetrics


@pytest.fixture
def panel(qtbot):
    panel = PlotsPanel()
    qtbot.addWidget(panel)
    panel.resize(1040, 610)
    panel.show()
    qtbot.waitExposed(panel)
    panel.build()
    return panel


def records(steps: int, loss0: float, acc0: float, every: int = 5, precision: str = "fp32") -> list[dict]:
    """A finished run's metrics.jsonl as read_jsonl returns it."""
    out = [
        {
            "event": "RunStarted",
            "task": "tiny",
            "device": "cpu",
            "device_name": "CPU",
            "precision": precision,
            "autocast_dtype": "float32",
            "param_dtype": "float32",
            "scaler": False,
            "param_count": 1,
            "total_steps": steps,
            "steps_per_epoch": 10,
            "start_step": 0,
            "config": {},
        }
    ]
    for step in range(1, steps + 1):
        out.append(
            {
                "event": "StepMetrics",
                "step": step,
                "epoch": 0,
                "loss": loss0 / step**0.5,
                "lr": 1e-3,
                "samples_per_second": 100.0,
                "grad_scale": None,
                "grad_norm": 1.0,
                "skipped_steps": 0,
                "memory_bytes": None,
                "elapsed_seconds": step * 0.1,
            }
        )
        if step % every == 0:
            out.append(
                {
                    "event": "EvalMetrics",
                    "step": step,
                    "epoch": 0,
                    "split": "val",
                    "metrics": {"accuracy": acc0 + step / steps / 10},
                }
            )
    return out


def start(panel, total_steps: int) -> None:
    panel.handle_event(
        RunStarted(
            task="tiny",
            device="cpu",
            device_name="CPU",
            precision="bf16",
            autocast_dtype="bfloat16",
            param_dtype="float32",
            scaler=False,
            param_count=1,
            total_steps=total_steps,
            steps_per_epoch=10,
            start_step=0,
            config={},
        )
    )


def step(panel, n: int, loss: float) -> None:
    panel.handle_event(
        StepMetrics(
            step=n,
            epoch=0,
            loss=loss,
            lr=1e-3,
            samples_per_second=100.0,
            grad_scale=None,
            grad_norm=1.0,
            skipped_steps=0,
            memory_bytes=None,
            elapsed_seconds=n * 0.1,
        )
    )


def view(panel, plot: str):
    return panel.plots[plot].getPlotItem().getViewBox().viewRange()


def legend_texts(panel, plot: str) -> list[str]:
    return [label.text for _sample, label in panel._legends[plot].items]


def test_overlays_stay_for_a_new_run_and_the_axes_hold_both(qtbot, panel):
    labels = panel.overlay_runs(
        [("fp32-run · fp32", records(400, 3.0, 0.5)), ("old-run · fp16", records(200, 1.5, 0.6, precision="fp16"))]
    )
    assert labels == ["fp32-run · fp32", "old-run · fp16"]
    assert legend_texts(panel, "loss") == ["raw", "smoothed", "fp32-run · fp32", "old-run · fp16"]
    assert "fp32-run · fp32 · accuracy" in legend_texts(panel, "eval")

    start(panel, total_steps=100)  # a new, shorter run with a higher loss than the overlays ever had
    for n in range(1, 51):
        step(panel, n, 8.0 - n * 0.01)
    panel.handle_event(EvalMetrics(step=50, epoch=0, split="val", metrics={"accuracy": 0.2}))
    panel.redraw()

    assert panel.overlay_labels("loss") == ["fp32-run · fp32", "old-run · fp16"]
    assert len(panel.overlay_labels("eval")) == 2
    assert all(curve.isVisible() and curve.scene() is not None for _p, curve, _l in panel._overlays)
    (x_lo, x_hi), (y_lo, y_hi) = view(panel, "loss")
    assert x_lo <= 1 and x_hi >= 400  # the overlays' 400 steps, not only the run's 100
    assert not panel._log_mode("loss")
    assert y_lo <= 3.0 / 20 and y_hi >= 8.0 - 0.01  # the overlays' lowest loss and the new run's highest
    (ex_lo, ex_hi), (ey_lo, ey_hi) = view(panel, "eval")
    assert ex_hi >= 400 and ey_lo <= 0.2 and ey_hi >= 0.6
    (lr_lo, lr_hi), _ = view(panel, "lr")
    assert lr_hi < 400  # a plot without overlays keeps the run's own span

    panel.clear_overlays()
    assert panel.overlay_labels("loss") == [] and panel.overlay_labels("eval") == []
    assert legend_texts(panel, "loss") == ["raw", "smoothed"]
    assert not any("fp32-run" in t or "old-run" in t for t in legend_texts(panel, "eval"))
    items = panel.plots["loss"].getPlotItem().listDataItems()
    assert len(items) == 2  # the run's raw and smoothed curves only
    (x_lo, x_hi), (y_lo, y_hi) = view(panel, "loss")
    assert x_hi < 150 and y_lo > 3.0 / 20  # fitted to the run on show again
    assert y_lo <= 7.5 and y_hi >= 8.0 - 0.01


def test_clearing_overlays_with_no_run_gives_back_the_empty_plots(qtbot, panel):
    panel.overlay_runs([("a · fp32", records(50, 2.0, 0.5))])
    assert panel.note("loss") == ""
    panel.clear_overlays()
    assert panel.note("loss") == "No run yet"
    assert view(panel, "loss")[1] == pytest.approx([0.0, 1.0])
    assert view(panel, "loss")[0][1] < 50


def lab(colour: str) -> np.ndarray:
    rgb = np.array([int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    rgb = np.where(rgb > 0.04045, ((rgb + 0.055) / 1.055) ** 2.4, rgb / 12.92)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ rgb
    xyz /= np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def test_ten_overlays_have_distinct_colours_apart_from_the_live_ones(qtbot, panel):
    runs = [(f"run-{i} · bf16", records(30, 1.0 + i, 0.5)) for i in range(10)]
    panel.overlay_runs(runs)
    colours = [curve.opts["pen"].color().name() for p, curve, _l in panel._overlays if p == "loss"]
    assert len(set(colours)) == 10
    live = [LOSS_COLOUR, *METRIC_COLOURS]
    for colour in colours:
        others = [c for c in colours if c != colour] + live
        assert min(np.linalg.norm(lab(colour) - lab(o)) for o in others) >= 25, colour
        assert 35 <= lab(colour)[0] <= 80, colour  # seen on the light and the dark background
    assert set(colours) == set(OVERLAY_COLOURS)
    assert legend_texts(panel, "loss")[2:] == [label for label, _r in runs]


def resumed_file() -> list[dict]:
    """Three segments: 1..30, resumed from 20 to 40, and a torn segment (no RunStarted) restarting at 35."""
    first = records(30, 3.0, 0.5)
    second = records(40, 2.0, 0.6)
    second[0] = {**second[0], "start_step": 20}
    second = [second[0]] + [r for r in second[1:] if r["step"] > 20]
    torn = [r for r in records(45, 1.0, 0.7)[1:] if r["step"] >= 35]
    return first + second + torn


@pytest.mark.parametrize("make", [lambda: records(60, 2.0, 0.5), resumed_file])
def test_overlay_points_read_the_segments_as_history_points(make):
    recs = make()
    steps, evals, _first = history_points(recs)
    points = overlay_points(recs)
    assert isinstance(points, OverlayPoints) and points.metric == "accuracy"
    assert points.x.tolist() == [s["step"] for s in steps]
    assert points.y.tolist() == [s["loss"] for s in steps]
    val = [e for e in evals if e.split == "val"]
    assert points.ex.tolist() == [e.step for e in val]
    assert points.ey.tolist() == [e.metrics["accuracy"] for e in val]


def test_overlay_points_skip_malformed_records_and_gaps():
    recs = records(20, 2.0, 0.5)
    recs[3] = {"event": "StepMetrics", "epoch": 0}  # no step: skipped
    recs[5] = {**recs[5], "loss": None}  # a gap
    recs.append({"event": "EvalMetrics", "step": 21, "epoch": 0, "split": "val", "metrics": {"f1": 0.3}})
    recs.append({"event": "EvalMetrics", "step": 22, "epoch": 0, "split": "test", "metrics": {"accuracy": 0.1}})
    points = overlay_points(recs)
    steps, _evals, _ = history_points(recs)
    assert points.x.tolist() == [s["step"] for s in steps]
    assert math.isnan(points.y[list(points.x).index(recs[5]["step"])])
    assert 21 not in points.ex and 22 not in points.ex  # no accuracy there / not the validation split
    assert overlay_points(recs, "f1").ex.tolist() == [21]


def test_overlay_runs_takes_points_read_elsewhere(qtbot, panel):
    read = overlay_points(records(40, 2.0, 0.5))
    assert panel.overlay_runs([("a · fp32", read)]) == ["a · fp32"]
    assert panel.overlay_labels("eval") == ["a · fp32 · accuracy"]


def test_long_overlays_are_decimated_and_clipped(qtbot, panel):
    panel.overlay_runs([("long · fp32", records(20_000, 2.0, 0.5, every=1))])
    for _plot, curve, _label in panel._overlays:
        assert len(curve.xData) <= 1024
        assert curve.opts["clipToView"]
        assert curve.opts["symbol"] is None  # 20,000 validation points: a line, no dot on each


# ---------------------------------------------------------------------------------------------- export


def run_folder(tmp_path, best_files=("best.pt",), run_json=True, name="run-a"):
    folder = tmp_path / name
    folder.mkdir(parents=True)
    (folder / "checkpoint.pt").write_bytes(b"last")
    for name in best_files:
        (folder / name).write_bytes(b"best")
    if run_json:
        (folder / "run.json").write_text(
            json.dumps(
                {
                    "checkpoints": {
                        "last": {"path": str(folder / "checkpoint.pt"), "step": 300},
                        "best": {"path": str(folder / best_files[0]), "step": 200},
                    },
                    "best": {"name": "val_acc", "value": 0.91, "step": 200},
                }
            ),
            encoding="utf-8",
        )
    return folder


def test_checkpoint_choices_name_the_steps_and_the_best_metric(tmp_path):
    folder = run_folder(tmp_path)
    assert checkpoint_choices(str(folder / "checkpoint.pt")) == [
        ("Last (step 300)", str(folder / "checkpoint.pt")),
        ("Best (step 200, val_acc 0.91)", str(folder / "best.pt")),
    ]
    assert [label for label, _p in checkpoint_choices(str(folder))] == [
        "Last (step 300)",
        "Best (step 200, val_acc 0.91)",
    ]


def test_checkpoint_choices_of_kept_bests_and_without_run_json(tmp_path):
    folder = run_folder(tmp_path, best_files=("best-step200.pt", "best-step150.pt"), run_json=False)
    labels = [label for label, _p in checkpoint_choices(str(folder / "checkpoint.pt"))]
    assert labels == ["Last (checkpoint.pt)", "Best (step 200)", "Best (step 150)"]
    (folder / "best-step200.pt").unlink()
    (folder / "best-step150.pt").unlink()
    assert checkpoint_choices(str(folder / "checkpoint.pt")) == [
        ("Last (checkpoint.pt)", str(folder / "checkpoint.pt"))
    ]


class FakeDialogs:
    """QFileDialog and QInputDialog: record what is asked, answer without a modal loop."""

    def __init__(self, pick: int | None = 1):
        self.pick = pick  # which item getItem answers (None: cancel)
        self.items: list[list[str]] = []
        self.current: list[int] = []  # the item each question had selected at first
        self.saved: list[str] = []
        self.opened: list[str] = []  # answers for getOpenFileName, taken in turn (none left: no file asked)
        self.captions: list[str] = []

    def getItem(self, parent, title, label, items, current=0, editable=True):
        self.items.append(list(items))
        self.current.append(current)
        pick = self.pick.pop(0) if isinstance(self.pick, list) else self.pick  # a list: one answer per question
        pick = current if pick == "current" else pick
        return (items[pick], True) if pick is not None else ("", False)

    def getSaveFileName(self, parent, caption, directory, filter_=""):
        self.saved.append(directory)
        self.captions.append(caption)
        return directory, filter_

    def getOpenFileName(self, *args, **kwargs):
        assert self.opened, "no checkpoint should be asked for"
        return self.opened.pop(0), ""


@pytest.fixture
def dialogs(monkeypatch):
    fake = FakeDialogs()
    monkeypatch.setattr(app.file_actions, "QFileDialog", fake)
    monkeypatch.setattr(app.file_actions, "QInputDialog", fake)
    return fake


@pytest.fixture
def exports(window, monkeypatch):
    done: list[tuple[str, str]] = []
    monkeypatch.setattr(
        window.file_actions, "export", lambda source, destination, fmt=None: done.append((source, destination))
    )
    return done


def test_export_asks_last_or_best_then_exports_the_choice(qtbot, window, tmp_path, dialogs, exports):
    folder = run_folder(tmp_path)
    window.last_checkpoint = str(folder / "checkpoint.pt")
    window.file_actions.export_action.trigger()
    assert dialogs.items == [["Last (step 300)", "Best (step 200, val_acc 0.91)", "Another checkpoint…"]]
    assert exports == [(str(folder / "best.pt"), str(folder / "export" / "model"))]

    dialogs.pick = 0
    window.file_actions.ask_export()
    assert exports[-1][0] == str(folder / "checkpoint.pt")

    dialogs.pick = None  # cancelled: nothing exported, no export folder left behind
    window.file_actions.ask_export()
    assert len(exports) == 2


def test_a_fresh_window_offers_the_latest_run_and_its_best_checkpoint_first(
    qtbot, window, tmp_path, dialogs, exports, monkeypatch
):
    root = tmp_path / "runs"
    older = run_folder(root, name="20261101-100000-tiny-fp32")
    latest = run_folder(root, name="20261201-093000-tiny-bf16")
    (root / "20261202-080000-sweep-tiny").mkdir()  # a sweep folder: no checkpoint of its own
    monkeypatch.setattr(window, "runs_root", lambda: root)
    assert window.last_checkpoint is None
    dialogs.pick = "current"
    window.file_actions.export_action.trigger()  # no file chooser first: the latest run is offered
    assert dialogs.items == [["Last (step 300)", "Best (step 200, val_acc 0.91)", "Another checkpoint…"]]
    assert dialogs.current == [1]  # its best checkpoint selected, as the history's Export… does
    assert exports == [(str(latest / "best.pt"), str(latest / "export" / "model"))]
    assert dialogs.captions[-1] == f"Export best.pt of {latest.name}" and len(dialogs.captions[-1]) < 60

    dialogs.pick = [2, 0]  # Another checkpoint…: a file chooser, then that run's own choices (its last)
    dialogs.opened = [str(older / "checkpoint.pt")]
    window.file_actions.export_action.trigger()
    assert exports[-1][0] == str(older / "checkpoint.pt")
    assert dialogs.items[-1] == ["Last (step 300)", "Best (step 200, val_acc 0.91)"]


def test_export_without_a_best_checkpoint_asks_nothing(qtbot, window, tmp_path, dialogs, exports):
    folder = run_folder(tmp_path, best_files=(), run_json=False)
    window.file_actions.ask_export(str(folder / "checkpoint.pt"))
    assert dialogs.items == []
    assert exports == [(str(folder / "checkpoint.pt"), str(folder / "export" / "model"))]


def test_a_run_history_export_request_reaches_ask_export(qtbot, window, tmp_path, dialogs, exports, monkeypatch):
    import app.panels.history as history

    class WithExport(history.HistoryPanel):
        exportRequested = Signal(str)

    monkeypatch.setattr(history, "HistoryPanel", WithExport)
    dialog = window.show_history()
    folder = run_folder(tmp_path)
    dialogs.pick = 1
    dialog.panel.exportRequested.emit(str(folder))
    assert exports == [(str(folder / "best.pt"), str(folder / "export" / "model"))]
    dialog.close()


def test_screenshot_of_two_overlays_and_a_live_run(qtbot, panel, tmp_path):
    panel.overlay_runs(
        [
            ("fp32-run · fp32", records(300, 3.0, 0.5, every=20)),
            ("fp16-run · fp16", records(300, 2.6, 0.55, every=20, precision="fp16")),
        ]
    )
    start(panel, total_steps=300)
    rng = np.random.default_rng(0)
    for n in range(1, 151):
        step(panel, n, 2.8 / n**0.8 + 0.05 * rng.random())
        if n % 20 == 0:
            panel.handle_event(EvalMetrics(step=n, epoch=0, split="val", metrics={"accuracy": 0.5 + n / 1000}))
    panel.redraw()
    qtbot.wait(20)
    path = os.environ.get("AMP_OVERLAY_SCREENSHOT") or str(tmp_path / "overlay.png")
    assert panel.grab().save(path)
    assert panel.note("loss") == "" and panel.note("eval") == ""


def test_legends_stay_whole_with_many_long_overlays(qtbot, panel, tmp_path):
    """Every legend entry is inside its plot (long labels wrap to the width, no row runs off the bottom) and
    the plot keeps its view: the overlaid runs that don't fit are one '… and N more' entry."""
    names = [f"baseline-with-a-rather-long-name-{i} · fp16" for i in range(8)]
    panel.overlay_runs([(name, records(100, 3.0 - i * 0.1, 0.5, every=20)) for i, name in enumerate(names)])
    start(panel, total_steps=100)
    for n in range(1, 41):
        step(panel, n, 2.0 / n**0.5)
    panel.handle_event(EvalMetrics(step=20, epoch=0, split="val", metrics={"accuracy": 0.6}))
    panel.redraw()
    qtbot.wait(20)

    def bare(text: str) -> str:
        return re.sub(r"<br>|\s", "", text)

    for plot in ("loss", "eval"):
        widget = panel.plots[plot]
        legend = panel._legends[plot]
        for _sample, label in legend.items:
            rect = label.mapRectToScene(label.item.boundingRect())  # the text as drawn
            assert rect.left() >= 0 and rect.right() <= widget.width(), (plot, label.text, rect, widget.width())
            assert rect.bottom() <= widget.height(), (plot, label.text, rect, widget.height())
        assert widget.getPlotItem().getViewBox().height() >= 60, plot  # the legend never squeezes the curves away
        overlays = panel.overlay_labels(plot)
        shown = [
            bare(label.text)
            for sample, label in legend.items
            if any(sample.item is curve for p, curve, _l in panel._overlays if p == plot)
        ]
        assert shown == [bare(text) for text in overlays[: len(shown)]]  # whole labels, in order
        more = [bare(label.text) for _s, label in legend.items if label.text.startswith("…")]
        hidden = len(overlays) - len(shown)
        assert more == ([bare(f"… and {hidden} more overlaid runs (Run history)")] if hidden else [])
    assert panel._fitted["eval"].hidden > 0  # the narrow plot could not list all eight
    path = os.environ.get("AMP_OVERLAY_SCREENSHOT_MANY") or str(tmp_path / "overlays-many.png")
    assert panel.grab().save(path)


@pytest.mark.timeout(60)
def test_a_new_run_under_overlays_says_they_are_kept_and_how_to_clear_them(qtbot, window, tmp_path):
    window.plotsPanel.overlay_runs(
        [("fp32-run · fp32", records(40, 3.0, 0.5)), ("old-run · fp16", records(20, 1.5, 0.6, precision="fp16"))]
    )
    quick_run(window, tmp_path / "run", max_steps=5)
    finish_run(qtbot, window)
    log = window.logPanel.toPlainText()
    assert "2 runs overlaid on the plots, kept under this run (Run history → Clear overlays removes them)" in log
    window.plotsPanel.clear_overlays()
    assert window.plotsPanel.overlay_note() == ""


@pytest.mark.timeout(60)
def test_overlaying_runs_of_another_task_warns_in_one_line(qtbot, window):
    set_field(window, "taskCombo", "tiny")
    same, other = records(40, 3.0, 0.5), records(20, 1.5, 0.6)
    other[0] = {**other[0], "task": "ranking"}
    assert overlay_points(other).task == "ranking"
    window.overlay_runs([("a · fp32", overlay_points(same))])
    assert "another task" not in window.statusBarWidget.message.text()
    window.overlay_runs([("a · fp32", overlay_points(same)), ("b · fp32", overlay_points(other))])
    note = window.statusBarWidget.message.text()
    assert "another task (ranking) under tiny" in note and "\n" not in note
    assert window.statusBarWidget.message.property("role") == "status-warn"
    assert note in window.logPanel.toPlainText()
    window.plotsPanel.clear_overlays()
    assert window.plotsPanel.other_task_note("tiny") == ""
