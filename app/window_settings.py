"""What the window remembers between launches (QSettings): the run form, how runs execute, and its layout.

The run form is stored as core's RunConfig dict (JSON), so a saved form is validated by the engine like any
other config; one that no longer validates is reported in the log and ignored, never applied half-way.
"""

from __future__ import annotations

import json

from PySide6.QtCore import QSettings

CONFIG_KEY = "run/config"
PROCESSES_KEY = "run/processes"
SEPARATE_PROCESS_KEY = "run/separateProcess"
SPLITTER_KEYS = ("window/mainSplitter", "window/rightSplitter")


class WindowSettings:
    """Saves and restores a MainWindow's form, execution choice, geometry and splitters in `store`."""

    def __init__(self, store: QSettings):
        self.store = store

    def restore_run_setup(self, window) -> None:
        """The last form (if it still validates) and the processes / isolation choice."""
        from core.config import RunConfig
        from core.errors import ConfigError

        saved = self.store.value(CONFIG_KEY, "")
        if saved:
            try:
                config = RunConfig.from_dict(json.loads(saved), source="saved settings")
            except (ConfigError, ValueError, TypeError) as exc:
                window.logPanel.log(f"Ignored the saved settings: {exc}", "warning")
            else:
                window.apply_config(config)
        window.setupPanel.set_execution(  # type=: QSettings converts the INI format's strings (bad ints read 0)
            self.store.value(PROCESSES_KEY, 1, type=int),
            self.store.value(SEPARATE_PROCESS_KEY, True, type=bool))

    def save(self, window) -> None:
        if window.engine_ready:
            try:
                self.store.setValue(CONFIG_KEY, json.dumps(window.setupPanel.config().to_dict()))
            except Exception:  # a half-typed form can't be saved; the last good one stays  # noqa: BLE001
                pass
            self.store.setValue(PROCESSES_KEY, window.setupPanel.processes())
            self.store.setValue(SEPARATE_PROCESS_KEY, window.setupPanel.separateProcessCheck.isChecked())
        self.store.setValue("window/geometry", window.saveGeometry())
        for key, splitter in zip(SPLITTER_KEYS, (window.mainSplitter, window.rightSplitter)):
            self.store.setValue(key, splitter.saveState())
        self.store.sync()

    def restore_geometry(self, window) -> None:
        geometry = self.store.value("window/geometry")
        if geometry is not None:
            window.restoreGeometry(geometry)
        else:
            window.resize(1400, 860)
        for key, splitter in zip(SPLITTER_KEYS, (window.mainSplitter, window.rightSplitter)):
            state = self.store.value(key)
            if state is not None:
                splitter.restoreState(state)
