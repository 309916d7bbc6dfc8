"""The run form's Precision group (a part of app.panels.run_setup.RunSetupPanel): the mode and what the device
runs of it, the fp8 recipe, processes and isolation, and the memory estimate before Start."""

from __future__ import annotations

import os
import signal

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QCheckBox, QLabel

from app.assets import restyle
from app.panels.editors import Editor, FieldRow, NoWheelComboBox, form_label, mark_choices
from app.run.jobs import JobRunner
from core.errors import AmpConsoleError
from core.precision_modes import FP8_RECIPES, PRECISION_CHOICES
from core.process import signal_group
from core.text import first_line

# What the memory estimate depends on (core.lab.memory_estimate); it runs once these settle for ESTIMATE_DELAY_MS.
ESTIMATE_INPUTS = ("task", "task_file", "task_options", "data", "data_format", "columns", "delimiter", "batch_size")
ESTIMATE_INPUTS += ("precision", "fp8_recipe", "fp32_modules", "optimizer", "momentum", "grad_clip", "device")
ESTIMATE_INPUTS += ("activation_checkpointing",)
ESTIMATE_DELAY_MS = 600


class PrecisionSection:
    """RunSetupPanel's precision, execution and memory-estimate methods (a mixin: they share the form's rows)."""

    def _build_precision_group(self) -> None:
        form = self._precision_form
        self.precisionCombo = NoWheelComboBox(objectName="precisionCombo")
        for mode in PRECISION_CHOICES:
            self.precisionCombo.addItem(mode, mode)
        self.precisionCombo.currentIndexChanged.connect(self._on_precision_changed)
        self.precisionNote = restyle(QLabel(objectName="precisionNote", wordWrap=True), role="hint")
        self._precision_error = restyle(QLabel(objectName="precisionError", wordWrap=True), role="error")
        self._precision_error.hide()
        form.addRow(form_label("Mode"), self.precisionCombo)
        form.addRow("", self.precisionNote)
        self.memoryEstimate = restyle(QLabel("–", objectName="memoryEstimate", wordWrap=True), role="hint")
        form.addRow(form_label("Memory", "Estimated peak training memory on the device"), self.memoryEstimate)
        self._estimates = JobRunner(self)
        self._estimate_children: list[int] = []  # the running estimate's child process (a task file's), if any
        self._estimate_timer = QTimer(self, singleShot=True, interval=ESTIMATE_DELAY_MS)
        self._estimate_timer.timeout.connect(self._start_estimate)
        self._estimated: tuple | None = None  # the inputs the label shows (or is computing)
        form.addRow("", self._precision_error)
        self._process_limit = max(1, os.cpu_count() or 1)
        processes_help = (
            "1 trains in one process. More launches torchrun with that many DDP processes (one GPU "
            "each on CUDA) and shows rank 0's progress here; such runs can be stopped but not "
            "paused."
        )
        self._processes_row = FieldRow(Editor("processes", int, processes_help, 1, self._process_limit, 1))
        self.processesEdit = self._processes_row.editor.input
        self.processesEdit.setValue(1)
        form.addRow(form_label("Processes", processes_help), self._processes_row)
        self.separateProcessCheck = QCheckBox("Train in a separate process", objectName="separateProcessCheck")
        self.separateProcessCheck.setChecked(True)
        self.separateProcessCheck.setToolTip(
            "On: the run gets its own Python process. The window's drawing never slows the training loop, a "
            "crash or an out-of-memory kill ends the run and not the window, and device memory is released "
            "when the run ends. Off: train on a thread of this process, with the devices this window lists. "
            "Runs on several processes are always separate."
        )
        form.addRow(form_label("Isolation", self.separateProcessCheck.toolTip()), self.separateProcessCheck)
        self.processesEdit.valueChanged.connect(lambda value: self.separateProcessCheck.setEnabled(value == 1))
        self.processesEdit.valueChanged.connect(lambda _value: self.executionChanged.emit())
        self.processesEdit.valueChanged.connect(lambda _value: self._schedule_validate())
        self.separateProcessCheck.toggled.connect(lambda _on: self.executionChanged.emit())

    def separate_process(self) -> bool:
        """Whether a run trains in a child process (always, for several processes)."""
        return self.processes() > 1 or self.separateProcessCheck.isChecked()

    def set_execution(self, processes: int, separate_process: bool) -> None:
        self.processesEdit.setValue(max(1, min(int(processes), self._process_limit)))
        self.separateProcessCheck.setChecked(bool(separate_process))

    def set_process_limit(self, limit: int) -> None:
        """Most processes a run may use: the CUDA GPU count on a CUDA device, else the CPU core count."""
        self._process_limit = max(1, limit)
        self.processesEdit.spec_maximum = float(self._process_limit)
        self._schedule_validate()

    def processes(self) -> int:
        value = self.processesEdit.value()
        return int(value) if float(value).is_integer() and value >= 1 else 1

    # ------------------------------------------------------------------ device & precision
    def set_device(self, info) -> None:
        """Enable the precision modes `info` supports; the others are disabled with the reason as tooltip."""
        self._device = info
        reason = info.unsupported.get
        mark_choices(
            self.precisionCombo,
            lambda m: (
                m != "auto"
                and m not in info.precisions
                and f"{m} is not available on {info.name}: {reason(m, 'not supported')}"
            ),
        )
        current = self.precisionCombo.currentData()
        if current not in ("auto", None) and current not in info.precisions:
            self.set_precision("auto")
            self.precisionNote.setText(f"{current} is not available on {info.id}; switched to auto")
        self._update_auto_text()
        self._update_library_choices()
        self._schedule_validate()

    def _update_library_choices(self) -> None:
        """Optimizers the device's `unsupported` names (adamw8bit without bitsandbytes) disabled, why as tooltip."""
        if (row := self._rows.get("optimizer")) is None or self._device is None:
            return
        mark_choices(row.editor.input, lambda name: self._device.unsupported.get(name, ""))

    def _mark_refused_recipes(self) -> None:
        """fp8 recipes the engine refuses (core.engine.precision) are listed disabled, with the reason."""
        if (row := self._rows.get("fp8_recipe")) is None:
            return
        refused = "fails inside the bf16 autocast fp8 runs the other ops in (pytorch/ao#4616)"
        mark_choices(row.editor.input, lambda recipe: recipe in FP8_RECIPES[2:] and f"{recipe} {refused}")

    def _show_fp8_recipe(self) -> None:
        if (row := self._rows.get("fp8_recipe")) is not None:
            self._precision_form.setRowVisible(row, self.precisionCombo.currentData() == "fp8")

    def _update_auto_text(self) -> None:
        from core.engine.precision import auto_mode, resolve_precision

        if self._device is None:
            return
        resolved = auto_mode(self._device)
        self.precisionCombo.setItemText(0, f"auto → {resolved}")
        mode = self.precisionCombo.currentData()
        if mode == "auto" or mode in self._device.precisions:
            recipe = self._rows["fp8_recipe"].editor.value() if "fp8_recipe" in self._rows else "tensorwise"
            try:
                self.precisionNote.setText(resolve_precision(mode, self._device, recipe).describe())
            except AmpConsoleError as exc:  # a refused recipe: its field says why
                self.precisionNote.setText(first_line(exc))

    def device(self):
        """The selected device's DeviceInfo (None before the devices are known)."""
        return self._device

    def set_precision(self, mode: str) -> None:
        """Select `mode` in the precision picker (e.g. the mode a precision sweep recommended)."""
        index = self.precisionCombo.findData(mode)
        self.precisionCombo.setCurrentIndex(max(index, 0))

    def _on_precision_changed(self) -> None:
        self._show_fp8_recipe()
        self._update_auto_text()
        self._on_field_changed()

    # ------------------------------------------------------------------ memory estimate
    def _estimate_inputs(self) -> tuple:
        values = self.values()
        return tuple(repr(values.get(name)) for name in ESTIMATE_INPUTS)

    def _schedule_estimate(self) -> None:
        """Estimate again once the settings it depends on settle (a valid form, shown, inputs changed)."""
        if self._valid and self.isVisible() and self._estimate_inputs() != self._estimated:
            self._estimate_timer.start()

    def _start_estimate(self) -> None:
        """core.lab.memory_estimate on a worker thread (one at a time: the next starts when it is done)."""
        if self._estimates.busy or not self.validate():  # a change may not be validated yet
            return
        from core.lab.memory_estimate import estimate, in_child
        from core.tasks.describe import import_limit
        from core.tasks.user_tasks import installed_tasks

        config, self._estimated = self.config(), self._estimate_inputs()
        user_code = config.task_file and config.task_file not in installed_tasks().values()  # an added file's

        def work():
            if not user_code:
                return estimate(config)
            try:  # only in a child: import + a probe step; killed if the window closes first
                return in_child(config, import_limit() * 2, started=self._estimate_children.append)
            finally:
                self._estimate_children.clear()  # one estimate at a time

        shown = self.memoryEstimate.text()
        self.memoryEstimate.setText(f"estimating… (was {shown})" if shown.startswith("≈") else "estimating…")
        self._estimates.submit(work, self._show_estimate, self._estimate_failed)

    def _show_estimate(self, result) -> None:
        over = result.free_bytes_of_device is not None and result.total_bytes > result.free_bytes_of_device
        self.memoryEstimate.setText(f"{result.describe()} on {result.device}" + (": will not fit" if over else ""))
        self.memoryEstimate.setToolTip(f"{result.breakdown()}\n({result.note})")
        restyle(self.memoryEstimate, role="error" if over else "hint")
        self._schedule_estimate()  # the settings changed meanwhile

    def _estimate_failed(self, message: str, _details: str) -> None:
        line = message.splitlines()[0] if message else "failed"  # cut with "…" to two lines or so, whole in the tooltip
        self.memoryEstimate.setText(f"– (no estimate: {line if len(line) <= 100 else line[:99].rstrip() + '…'})")
        self.memoryEstimate.setToolTip(message)
        restyle(self.memoryEstimate, role="hint")
        self._schedule_estimate()

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self._schedule_estimate()

    def hideEvent(self, event) -> None:
        """Hidden: no estimate starts; the window closing kills a child's probe step and waits for one of its
        own (never a tab switch)."""
        self._estimate_timer.stop()
        if not self.window().isVisible():
            for pid in list(self._estimate_children):  # a task file's probe step may never end
                signal_group(pid, getattr(signal, "SIGKILL", signal.SIGTERM))
            self._estimates.shutdown()
        self._estimated = None
        super().hideEvent(event)
