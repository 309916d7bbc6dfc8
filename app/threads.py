"""One way to run a QObject on its own QThread, shared by training runs, sweeps and short jobs.

The object must have a `run` slot and a `done` signal emitted last, from its own thread. Known traps this
handles once: `done` quits the thread with a direct connection (so a GUI thread blocked in `wait()` cannot
deadlock), the object is deleted in its thread as it exits, and the caller joins the QThread (`wait()`)
before deleting it, because `finished` fires before the OS thread has exited.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, QThread


def start_on_thread(owner: QObject, obj: QObject, name: str) -> QThread:
    """Move `obj` to a new QThread owned by `owner` and wire its lifecycle; the caller starts it."""
    thread = QThread(owner)
    thread.setObjectName(name)
    obj.moveToThread(thread)
    thread.started.connect(obj.run)
    obj.done.connect(thread.quit, Qt.ConnectionType.DirectConnection)
    thread.finished.connect(obj.deleteLater)
    return thread
