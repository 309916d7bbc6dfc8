"""The task registry is one per process: tests that load user tasks restore it to what it held before."""

from __future__ import annotations

import sys
from contextlib import contextmanager

import core.tasks as registry


def _stores():
    return (registry._references, registry._loaded)


def snapshot() -> tuple[dict, ...]:
    return tuple(dict(store) for store in _stores())


def restore(saved: tuple) -> None:
    """The registry as `saved` had it: tasks loaded since are unregistered and their modules forgotten."""
    for name in set(registry._loaded) - set(saved[1]):
        registry.TASKS.pop(name, None)  # the one dict (registry.__getattr__ would build a new one)
    for store, old in zip(_stores(), saved):
        store.clear()
        store.update(old)
    for name in [m for m in sys.modules if m.startswith("amp_console_user_task_")]:
        del sys.modules[name]


@contextmanager
def restored_task_registry():
    """Within: load user tasks freely; after: the registry holds what it held before."""
    saved = snapshot()
    try:
        yield
    finally:
        restore(saved)


@contextmanager
def task_files_run_here():
    """Within: this process loads task files though a window is open (the test acting as the CLI would)."""
    from core.tasks import user_tasks

    windows = set(user_tasks._WINDOWS)
    user_tasks._WINDOWS.clear()
    try:
        yield
    finally:
        user_tasks._WINDOWS.update(windows)
