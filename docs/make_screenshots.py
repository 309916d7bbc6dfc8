"""Save screenshots of the real window (idle, training, after a run, tools, history, a diverged run, the queue):
`python docs/make_screenshots.py DIR`.

Uses throwaway QSettings, so the user's saved settings are neither read nor changed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def _wait(app, condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        app.processEvents()
        if condition():
            return True
        time.sleep(0.01)
    return False


def _precision_lab(app, window, out: Path, suffix: str, folder: Path) -> None:
    """Compare precisions, the dtype inspector, and an fp16 run with forced overflows (health markers)."""
    import dataclasses

    import torch

    from core.config import RunConfig
    from core.devices import cpu_info

    config = RunConfig.for_task(
        "tiny",
        task_options={"hidden": 64, "samples": 20_000},
        batch_size=64,
        epochs=2,
        lr=3e-3,
        log_interval=10,
        out_dir=str(folder / "lab"),
    )
    window.apply_config(config)
    dialog = window.tools.show_compare()
    dialog.resize(1150, 700)
    dialog.stepsEdit.setValue(20)
    dialog.start()
    _wait(app, lambda: not dialog.job.running, 300)
    _wait(app, lambda: False, 0.5)
    dialog.grab().save(str(out / f"compare{suffix}.png"))
    dialog.hide()
    inspector = window.tools.show_inspector()
    inspector.resize(1150, 380)
    inspector.precisionCombo.setCurrentIndex(inspector.precisionCombo.findData("bf16"))
    inspector.start()
    _wait(app, lambda: not inspector.job.running, 120)
    _wait(app, lambda: False, 0.5)
    inspector.grab().save(str(out / f"inspector{suffix}.png"))
    inspector.hide()

    # fp16 on the CPU (the real device list withholds it only because it is slow there), with fc1 made to
    # overflow now and then, so the scale plot shows the scaler backing off and the skipped-step markers.
    window._injected_devices = [dataclasses.replace(cpu_info(), precisions=("fp32", "fp16", "bf16"), unsupported={})]
    window.devicesPanel.set_provider(lambda: list(window._injected_devices))
    window.devicesPanel.refresh()
    original = torch.nn.Linear.forward
    calls = {"n": 0}

    def overflowing(self, x):
        result = original(self, x)
        if self.training and self.out_features == 64:
            calls["n"] += 1
            if calls["n"] in (40, 41, 300, 620, 621, 622):
                result = result * float("inf")
        return result

    torch.nn.Linear.forward = overflowing
    # The patched layer and the fp16-capable CPU exist only in this process: train on its thread.
    window.setupPanel.separateProcessCheck.setChecked(False)
    try:
        window.apply_config(config.replace(precision="fp16", grad_clip=1.0, device="cpu", out_dir=str(folder / "fp16")))
        if not window.start_run():
            raise SystemExit(f"the fp16 demo run did not start: {window.statusBarWidget.message.text()}")
        _wait(app, lambda: not window.controller.running, 300)
    finally:
        torch.nn.Linear.forward = original
    _wait(app, lambda: False, 0.5)
    window.grab().save(str(out / f"fp16-health{suffix}.png"))


def _tuning(app, window, out: Path, suffix: str, folder: Path) -> None:
    """Tune before you train: the LR finder (with a pick of its own), the batch-size finder, the model summary
    and a 3x2 sweep, each on the tiny task, with runs going under a throwaway runs root."""
    from core.config import RunConfig

    window.set_runs_root(str(folder / "runs"))
    config = RunConfig.for_task(
        "tiny",
        task_options={"hidden": 64, "samples": 20_000},
        batch_size=64,
        lr=3e-3,
        log_interval=10,
        out_dir=str(folder / "tune"),
    )
    window.apply_config(config)
    finder = window.tools.show_lr_finder()
    finder.resize(900, 640)
    finder.startLrEdit.setValue(1e-5)
    finder.start()
    _wait(app, lambda: not finder.job.running, 300)
    finder.pick_lr(finder.result.lrs[len(finder.result.lrs) // 3])
    _wait(app, lambda: False, 0.5)
    finder.grab().save(str(out / f"tuning-lr-finder{suffix}.png"))
    finder.hide()
    batch = window.tools.show_batch_finder()
    batch.resize(1100, 680)
    batch.modeChecks["fp16"].setChecked(False)
    batch.stepsEdit.setValue(2)
    batch.start()
    _wait(app, lambda: not batch.job.running, 300)
    _wait(app, lambda: False, 0.5)
    batch.grab().save(str(out / f"tuning-batch-finder{suffix}.png"))
    batch.hide()
    summary = window.tools.show_summary()  # measures at once
    summary.resize(1200, 620)
    _wait(app, lambda: summary.result is not None and not summary.job.running, 120)
    _wait(app, lambda: False, 0.5)
    summary.grab().save(str(out / f"tuning-summary{suffix}.png"))
    summary.hide()
    window.apply_config(config.replace(task_options={"hidden": 64, "samples": 4_000}, max_steps=60, out_dir=""))
    sweep = window.tools.show_sweep()
    sweep.resize(1100, 640)
    sweep.set_axes("lr = 1e-3, 3e-3, 1e-2", "batch_size = 32, 64")
    sweep.start()
    _wait(app, lambda: not sweep.job.running, 600)
    _wait(app, lambda: False, 0.5)
    sweep.grab().save(str(out / f"tuning-sweep{suffix}.png"))
    sweep.hide()
    window.apply_config(config)


def _history(app, window, out: Path, suffix: str, folder: Path) -> None:
    """The run history with an fp32 and a bf16 run compared, and their curves overlaid on the plots."""
    from core.config import RunConfig
    from core.engine.trainer import train  # a developer tool: the two runs are trained here, as a CLI user would

    window.set_runs_root(str(folder / "runs"))
    for precision in ("fp32", "bf16"):
        train(
            RunConfig.for_task(
                "tiny",
                task_options={"hidden": 64, "samples": 20_000},
                precision=precision,
                device="cpu",
                batch_size=64,
                epochs=3,
                lr=3e-3,
                log_interval=10,
                eval_interval=100,
                threads=1,
                out_dir=str(folder / "runs" / f"tiny-{precision}"),
            )
        )
    dialog = window.show_history()
    panel = dialog.panel
    panel.refresh()
    _wait(app, lambda: not panel.busy and {"tiny-fp32", "tiny-bf16"} <= set(panel.visible_names()), 60)
    panel.select_names("tiny-fp32", "tiny-bf16")
    panel.overlay()
    _wait(app, lambda: not panel.jobs.busy, 60)
    panel.compareButton.click()
    _wait(app, lambda: False, 0.5)
    dialog.grab().save(str(out / f"history{suffix}.png"))
    window.grab().save(str(out / f"overlay{suffix}.png"))
    panel.clearButton.click()
    dialog.hide()


def _diverged_and_queue(app, window, out: Path, suffix: str, folder: Path) -> None:
    """A run that diverges (SGD at lr 10) with its NaN box, then a queue with an entry done, one failed with its
    reason, one stopped and one pending."""
    from core.config import RunConfig

    window.set_runs_root(str(folder / "queue-runs"))
    ok = RunConfig.for_task(
        "tiny", task_options={"hidden": 64, "samples": 20_000}, lr=3e-3, max_steps=60, threads=1, device="cpu"
    )
    bad = ok.replace(optimizer="sgd", lr=10.0, momentum=0.99, task_options={"hidden": 256, "samples": 20_000})
    window.apply_config(bad.replace(max_steps=300, checkpoint_interval=20, out_dir=str(folder / "diverged")))
    window.start_run()
    _wait(app, lambda: not window.controller.running, 300)
    _wait(app, lambda: False, 0.5)
    window.grab().save(str(out / f"nan-box{suffix}.png"))
    entries = [
        ("short", ok),
        ("diverges", bad.replace(max_steps=300)),
        ("long", ok.replace(max_steps=10**6)),
        ("later", ok),
    ]
    panel = window.show_queue(add=entries).panel
    panel.buttons["start"].click()
    _wait(app, lambda: [e["state"] for e in panel.entries][:3] == ["done", "failed", "running"], 600)
    panel.stop()
    _wait(app, lambda: not panel.job.running, 300)
    panel.refresh()
    _wait(app, lambda: False, 0.5)
    window.queueDialog.grab().save(str(out / f"queue{suffix}.png"))
    window.queueDialog.hide()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", nargs="?", default="docs/screenshots")
    parser.add_argument("--suffix", default="", help="added to file names (e.g. --suffix=-xvfb)")
    parser.add_argument("--size", default="1440x900")
    args = parser.parse_args(argv)
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from app.assets import apply_theme
    from app.main_window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    apply_theme(app)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        settings = QSettings(str(Path(folder) / "settings.ini"), QSettings.Format.IniFormat)
        window = MainWindow(settings=settings)
        width, height = (int(v) for v in args.size.split("x"))
        window.resize(width, height)
        window.show()
        window.load_engine()
        from core.config import RunConfig

        window.apply_config(
            RunConfig.for_task(
                "tiny",
                task_options={"hidden": 64, "samples": 40_000},
                batch_size=64,
                epochs=6,
                lr=3e-3,
                schedule="cosine",
                warmup_steps=100,
                log_interval=10,
                out_dir=str(Path(folder) / "run"),
            )
        )
        _wait(app, lambda: False, 0.5)
        window.grab().save(str(out / f"idle{args.suffix}.png"))
        window.start_run()
        _wait(app, lambda: len(window.plotsPanel.series("loss_raw")) >= 150, 120)
        _wait(app, lambda: False, 0.3)
        window.grab().save(str(out / f"training{args.suffix}.png"))
        _wait(app, lambda: not window.controller.running, 300)
        _wait(app, lambda: False, 0.5)
        window.grab().save(str(out / f"after-run{args.suffix}.png"))
        _tuning(app, window, out, args.suffix, Path(folder))
        _history(app, window, out, args.suffix, Path(folder))
        _precision_lab(app, window, out, args.suffix, Path(folder))
        _diverged_and_queue(app, window, out, args.suffix, Path(folder))
        window.close()
        window.deleteLater()
        from PySide6.QtCore import QCoreApplication, QEvent

        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    print(f"screenshots written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
