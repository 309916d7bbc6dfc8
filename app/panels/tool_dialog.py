"""ToolDialog: a non-modal dialog running a core function on a BackgroundJob with the form's settings; it
never starts while a run or another tool uses its device (`busy_provider(device)` says why).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.panels.editors import box_layout, format_number
from app.run.jobs import BackgroundJob
from core.precision_modes import PRECISION_MODES

ERROR_COLOUR = "#d0453c"


def titled(title: str, widget: QWidget) -> QWidget:
    """`widget` under a bold `title`, margins off: one side of a splitter."""
    holder = QWidget()
    box_layout(holder, QLabel(f"<b>{title}</b>"), widget)
    return holder


def split(orientation: Qt.Orientation, sizes: list[int], *widgets: QWidget, stretch=(), name: str = "") -> QSplitter:
    """`widgets` in a QSplitter, first `sizes` pixels each, then grown by their `stretch` factors (when given)."""
    splitter = QSplitter(orientation, objectName=name)
    for index, widget in enumerate(widgets):
        splitter.addWidget(widget)
        if stretch:
            splitter.setStretchFactor(index, stretch[index])
    splitter.setSizes(sizes)
    return splitter


class ToolDialog(QDialog):
    """The setting line, Run/Stop, a status line, a progress bar and the job; subclasses give `_build(layout)`,
    `_job(config)` (None refuses), `_on_progress` and `_on_result`."""

    TITLE = ""
    NAME = ""
    RUN_TEXT = "Run"
    IDLE_TEXT = ""
    STOPPING_TEXT = "Stopping…"
    STOPPABLE = True
    SHOWN = ("optimizer", "batch", "lr", "device", "precision", "seed")  # the settings setting_text names

    def __init__(
        self,
        config_provider: Callable,
        devices_provider: Callable,
        busy_provider: Callable[[str], str] | None = None,
        parent=None,
    ):
        super().__init__(parent)
        self.setObjectName(f"{self.NAME}Dialog")
        self.setWindowTitle(self.TITLE)
        self._config_provider = config_provider
        self._devices_provider = devices_provider
        self._busy_provider = busy_provider or (lambda _device: "")
        self.result = None
        self.modeChecks: dict[str, QCheckBox] = {}
        self._fp32_fixed = False
        self.job = BackgroundJob(f"{self.NAME}Thread", self)
        self.job.progress.connect(self._on_progress)
        self.job.succeeded.connect(self._succeeded)
        self.job.failed.connect(self._on_failed)
        self.job.runningChanged.connect(self._update_buttons)

        self.setting = QLabel(objectName=f"{self.NAME}Setting", wordWrap=True)
        self.runButton = QPushButton(
            self.RUN_TEXT, objectName=f"{self.NAME}RunButton", default=True, clicked=self.start
        )
        self.stopButton = QPushButton("Stop", objectName=f"{self.NAME}StopButton", clicked=self.stop)
        self.stopButton.setVisible(self.STOPPABLE)
        self.statusLabel = QLabel(self.IDLE_TEXT, objectName=f"{self.NAME}Status", wordWrap=True)
        self.progressBar = QProgressBar(objectName=f"{self.NAME}Progress", visible=False)
        self.controls = QHBoxLayout()
        layout = QVBoxLayout(self)
        layout.addWidget(self.setting)
        layout.addLayout(self.controls)
        self._build_controls(self.controls)
        self.controls.addStretch(1)
        self.controls.addWidget(self.runButton)
        self.controls.addWidget(self.stopButton)
        layout.addWidget(self.statusLabel)
        layout.addWidget(self.progressBar)
        self._build(layout)
        self._update_buttons()

    def _build_controls(self, controls: QHBoxLayout) -> None:
        pass

    def _build(self, layout: QVBoxLayout) -> None:
        pass

    def _job(self, config):
        raise NotImplementedError

    def _on_progress(self, progress) -> None:
        pass

    def _on_result(self, result) -> None:
        pass

    def _add_mode_checks(self, controls: QHBoxLayout, prefix: str, tf32: bool, fp32_fixed: bool) -> None:
        """The "Modes:" checkboxes (objectName f"{mode}Check", or prefix + "Fp16Check"...), tf32 checked or not, fp16
        not on the CPU (slow there, when it runs at all); fp32_fixed: fp32 stays checked, the baseline of the ratios."""
        controls.addWidget(QLabel("Modes:"))
        self._fp32_fixed = fp32_fixed
        unticked = {"tf32"} if not tf32 else set()
        unticked |= {"fp16"} if self._on_cpu() else set()
        for mode in PRECISION_MODES:
            name = f"{prefix}{mode.title()}Check" if prefix else f"{mode}Check"
            self.modeChecks[mode] = QCheckBox(mode, objectName=name, checked=mode not in unticked)
            controls.addWidget(self.modeChecks[mode])

    @staticmethod
    def _labelled(controls: QHBoxLayout, label: str, widget, tip: str = ""):
        """`widget` after a QLabel(`label`) on the setting line, `tip` its tooltip (when given)."""
        controls.addWidget(QLabel(label))
        if tip:
            widget.setToolTip(tip)
        controls.addWidget(widget)
        return widget

    def _spin(self, controls: QHBoxLayout, label: str, name: str, low: int, high: int, value: int, tip: str):
        """A QSpinBox (objectName `name`, `low` to `high`, at `value`) after a QLabel(`label`) on the setting line."""
        return self._labelled(controls, label, QSpinBox(objectName=name, minimum=low, maximum=high, value=value), tip)

    def _tool(self, name: str, config, **kwargs) -> Callable:
        """The job: core tool `name` (core.lab.tool_child.run_tool) on `config` and the detected devices."""
        devices = self._devices_provider()

        def run(progress, control):
            from core.lab.tool_child import run_tool

            return run_tool(name, config, progress=progress, control=control, devices=devices, **kwargs)

        return run

    def _detected_devices(self) -> list:
        """The devices the window detected (its devices panel), else the injected ones, else the CPU alone."""
        panel = getattr(self.parent(), "devicesPanel", None)
        devices = list(getattr(panel, "devices", None) or []) or list(self._devices_provider() or [])
        return devices or [SimpleNamespace(id="cpu", type="cpu")]

    def _form_setting(self, name: str, default=None):
        """The form's setting `name`, `default` while the form cannot give its settings."""
        try:
            return getattr(self._config_provider(), name)
        except Exception:
            return default

    def _on_cpu(self) -> bool:
        """Whether the form's device is the CPU ('auto' without an accelerator detected)."""
        device = self._form_setting("device")
        return device == "cpu" or device == "auto" and all(d.type == "cpu" for d in self._detected_devices())

    def selected_modes(self) -> list[str]:
        return [mode for mode, check in self.modeChecks.items() if check.isChecked()]

    def _reset_progress(self, maximum: int, text: str) -> None:
        self.progressBar.setRange(0, maximum)
        self.progressBar.setValue(0)
        self.progressBar.setFormat(text)

    def _inputs(self) -> list[QWidget]:
        """Editors that are disabled while the tool runs."""
        return []

    def _config(self):
        """The validated settings the tool runs with: the form's (a tool with its own pickers overrides them)."""
        return self._config_provider().validate()

    def refresh_setting(self) -> None:
        try:
            config = self._config_provider()
        except Exception as exc:
            self.setting.setText(f"The run setup is not valid yet: {exc}")
            return
        self.setting.setText(self.setting_text(config))

    def setting_text(self, config) -> str:
        """The line above the tool naming what it will run: the settings that matter to it."""
        options = ", ".join(f"{k}={v}" for k, v in config.task_options.items()) or "default options"
        parts = {
            "optimizer": config.optimizer,
            "batch": f"batch {config.batch_size}",
            "lr": f"lr {format_number(config.lr)}",
            "device": f"device <b>{config.device}</b>",
            "precision": f"precision <b>{config.precision}</b>",
            "seed": f"seed {config.seed}",
        }
        return f"Task <b>{config.task}</b> ({options}), " + ", ".join(parts[name] for name in self.SHOWN)

    def start(self) -> bool:
        """Run the tool with the form's settings; False (and the reason in the status line) if it can't."""
        if self.job.running:
            return False
        self.refresh_setting()
        try:
            config = self._config()
        except Exception as exc:
            self._on_failed(f"Fix the run setup first: {exc}", "", "")
            return False
        busy = self._busy_provider(config.device)
        if busy:
            self._on_failed(busy, "", "")
            return False
        fn = self._job(config)
        if fn is None:
            return False
        self.result = None
        self.statusLabel.setToolTip("")
        self.statusLabel.setText("Starting…")
        self.progressBar.setVisible(True)
        self.job.start(fn)
        return True

    def stop(self) -> None:
        if self.job.running:
            self.job.stop()
            self.statusLabel.setText(self.STOPPING_TEXT)
            self._update_buttons()

    def shutdown(self) -> None:
        """Stop the work and join its thread (the window calls this when it closes)."""
        self.job.shutdown()

    def _succeeded(self, result) -> None:
        self.result = result
        self.progressBar.setVisible(False)
        self._on_result(result)
        self._update_buttons()

    def _on_failed(self, message: str, _field: str, details: str) -> None:
        self.progressBar.setVisible(False)
        self.statusLabel.setText(f"<span style='color:{ERROR_COLOUR}'>{message}</span>")
        self.statusLabel.setToolTip(details)

    def _update_buttons(self, *_args) -> None:
        running = self.job.running
        self.runButton.setEnabled(not running)
        self.stopButton.setEnabled(running and not self.job.stopping)
        for widget in self._inputs():
            widget.setEnabled(not running)
        for mode, check in self.modeChecks.items():
            check.setEnabled(not running and not (self._fp32_fixed and mode == "fp32"))
        self._update_use()

    def _update_use(self) -> None:
        pass

    def closeEvent(self, event) -> None:
        self.job.shutdown()  # closing the view ends its work: no thread outlives it
        super().closeEvent(event)
