"""How the window fares while a hostile task file is added (File → Add task…, its import in a child process):
for a file whose import loops forever, reads /dev/zero, builds a 100 MB string, forks or exits, the seconds from
the add to the one line the window shows, and the longest gap of a 5 ms QTimer heartbeat on the GUI thread
meanwhile (the window's longest stall), a plain file's first; before them, the same for the preload the window
starts once it opens. The import limit is set to 3 s (AMP_CONSOLE_TASK_IMPORT_SECONDS).

    .venv/bin/python benchmarks/task_import_stall.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
HEADS = {
    "is plain": "",
    "loops forever": "while True:\n    pass",
    "reads /dev/zero": "open('/dev/zero', 'rb').read()",
    "builds a 100 MB string": "_big = 'x' * 100_000_000",
    "forks": "import os as _os\nif _os.fork() == 0:\n    import time as _t\n    _t.sleep(3600)",
    "calls os._exit": "import os as _os\n_os._exit(3)",
}


def _heartbeat(app, going) -> tuple[float, int]:
    """Seconds while `going()` holds, events processed, and the longest gap of a 5 ms QTimer meanwhile (ms)."""
    from PySide6.QtCore import QElapsedTimer, QTimer

    clock, beat, gaps, last = QElapsedTimer(), QTimer(interval=5), [], [0]

    def tick() -> None:
        now = clock.elapsed()
        gaps.append(now - last[0])
        last[0] = now

    beat.timeout.connect(tick)
    clock.start()
    beat.start()
    began = time.perf_counter()
    while going():
        app.processEvents()
        time.sleep(0.001)
    beat.stop()
    return time.perf_counter() - began, max(gaps or [0])


def main() -> None:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    os.environ["AMP_CONSOLE_TASK_IMPORT_SECONDS"] = "3"
    folder = Path(tempfile.mkdtemp(prefix="amp-import-stall-"))
    os.environ["AMP_CONSOLE_RUNS_DIR"] = str(folder / "runs")
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication, QMessageBox

    from app.main_window import MainWindow
    from core.devices import cpu_info

    app = QApplication.instance() or QApplication([])
    QMessageBox.question = staticmethod(lambda *a, **k: QMessageBox.StandardButton.Yes)  # run its code: yes
    window = MainWindow(settings=QSettings(str(folder / "s.ini"), QSettings.Format.IniFormat), devices=[cpu_info()])
    window.load_engine()
    window.show()
    settle = time.perf_counter() + 0.5  # its first paint (the plots' axes, ~0.2 s) is not measured
    while time.perf_counter() < settle:
        app.processEvents()
        time.sleep(0.005)
    print(f"{'':<40}{'to the line':>12}{'longest stall':>15}  line")
    # What the first estimate or run imports, loaded on a worker after start-up (MainWindow._preload)
    seconds, stall = _heartbeat(app, lambda: not window.engine_preloaded)
    print(f"{'start-up preload':<40}{seconds:>10.2f} s{stall:>12} ms  (the window just opened)")
    source = (ROOT / "tests" / "fixtures" / "user_tasks" / "regression_task.py").read_text()
    future, rest = source.split("from __future__ import annotations\n")
    for n, (what, head) in enumerate(HEADS.items()):
        path = folder / f"hostile_{n}.py"
        own = rest.replace('name = "regression"', f'name = "regression_{n}"')  # no clash with the one before
        path.write_text(f"{future}from __future__ import annotations\n{head}\n{own}")
        window.task_actions.add_file(str(path))
        seconds, stall = _heartbeat(app, lambda: window.task_actions.busy)
        line = window.statusBarWidget.message.text()
        print(f"{'a task file that ' + what:<40}{seconds:>10.2f} s{stall:>12} ms  {line.rsplit(': ', 1)[-1][:70]}")
    window.close()


if __name__ == "__main__":
    main()
