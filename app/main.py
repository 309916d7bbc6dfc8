"""`run_app(argv)`: show the window fast, then load torch and pyqtgraph after the first paint
(`--measure-startup` prints the times and quits)."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time

_T0 = time.perf_counter()


def _process_age_seconds() -> float | None:
    """Seconds since this process started (includes interpreter start-up), where the OS tells us."""
    try:
        import psutil

        return time.time() - psutil.Process(os.getpid()).create_time()
    except Exception:
        return None


def run_app(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="amp-console", description="AMP Console desktop app")
    parser.add_argument("config", nargs="?", help="a run settings TOML file to open")
    parser.add_argument("--measure-startup", action="store_true", help="print time-to-window and quit")
    args = parser.parse_args(argv)  # None: sys.argv[1:]
    from PySide6.QtCore import QCoreApplication, QEvent, QObject, QTimer
    from PySide6.QtWidgets import QApplication

    from app.assets import apply_theme

    QCoreApplication.setOrganizationName("AMP Console")
    QCoreApplication.setApplicationName("amp-console")
    app = QApplication.instance() or QApplication([sys.argv[0]])
    app.setApplicationDisplayName("AMP Console")
    apply_theme(app)

    from app.main_window import MainWindow

    # Import torch on a plain thread after the first paint, while the window stays responsive; the GUI thread
    # only finishes the setup. No Qt object lives on this thread.
    importer = threading.Thread(target=_import_engine, name="engine-import", daemon=True)
    window = MainWindow()
    window.closed.connect(app.quit)  # also when the window was hidden while a run kept training
    window.show_message("Loading the engine (PyTorch)…")
    timings: dict[str, float] = {}

    class FirstPaint(QObject):
        def eventFilter(self, obj, event):
            if event.type() == QEvent.Type.Paint and "window" not in timings:
                timings["window"] = time.perf_counter() - _T0
                timings["window_process"] = _process_age_seconds() or float("nan")
                importer.start()
                QTimer.singleShot(0, load)
            return False

    def load() -> None:
        if importer.is_alive():  # keep painting and handling input until torch is in
            QTimer.singleShot(20, load)
            return
        window.load_engine()
        timings["ready"] = time.perf_counter() - _T0
        if args.config:
            window.file_actions.load_toml(args.config)
        if args.measure_startup:
            age = _process_age_seconds() or float("nan")
            print(
                f"time-to-window {timings['window_process']:.2f} s after process start "
                f"({timings['window']:.2f} s after importing app.main); "
                f"engine ready {age:.2f} s after process start ({timings['ready']:.2f} s)"
            )
            window.close()

    painter_watch = FirstPaint(window)
    window.installEventFilter(painter_watch)
    window.show()
    status = app.exec()
    window.deleteLater()  # delete widgets (pyqtgraph's included) before the interpreter tears down
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    return status


def _import_engine() -> None:
    import core.devices
    import core.engine.trainer
    import core.tasks  # noqa: F401
