"""Save idle, mid-training and after-run screenshots of the real window: `python -m app.screenshots DIR`.

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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", nargs="?", default="docs/screenshots")
    parser.add_argument("--suffix", default="", help="added to file names (e.g. -xvfb)")
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

        window.apply_config(RunConfig.for_task(
            "tiny", task_options={"hidden": 64, "samples": 40_000}, batch_size=64, epochs=6, lr=3e-3,
            schedule="cosine", warmup_steps=100, log_interval=10, out_dir=str(Path(folder) / "run")))
        _wait(app, lambda: False, 0.5)
        window.grab().save(str(out / f"idle{args.suffix}.png"))
        window.start_run()
        _wait(app, lambda: len(window.plotsPanel.series("loss_raw")) >= 150, 120)
        _wait(app, lambda: False, 0.3)
        window.grab().save(str(out / f"training{args.suffix}.png"))
        _wait(app, lambda: not window.controller.running, 300)
        _wait(app, lambda: False, 0.5)
        window.grab().save(str(out / f"after-run{args.suffix}.png"))
        window.close()
        window.deleteLater()
        from PySide6.QtCore import QCoreApplication, QEvent

        QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    print(f"screenshots written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
