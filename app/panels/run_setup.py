"""Run setup panel: task, precision and a hyperparameter form generated from core's FieldSpecs and each task's
TaskOptions (tasks registered later appear on their own); validation messages are core's.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QFileDialog, QFormLayout, QGroupBox, QLabel, QVBoxLayout, QWidget

from app.assets import restyle
from app.panels.editors import LABEL_WIDTH, Editor, FieldRow, NoWheelComboBox, form_label
from app.panels.precision_setup import PrecisionSection
from core.config import TASK_OPTIMIZER_FIELDS, RunConfig, delimiter_value
from core.errors import AmpConsoleError, ConfigError
from core.tasks import class_info, task_source
from core.text import count as count_text
from core.text import first_line

TRAINING_FIELDS = (
    "optimizer",
    "lr",
    "momentum",
    "weight_decay",
    "schedule",
    "warmup_steps",
    "grad_clip",
    "batch_size",
    "grad_accum",
    "epochs",
    "max_steps",
    "min_steps",
    "time_limit_minutes",
)
OUTPUT_FIELDS = ("seed", "log_interval", "eval_interval", "checkpoint_interval", "out_dir")
# in the Task group, under the model's options
DATA_FIELDS = ("data", "val_data", "test_data", "delimiter", "columns", "data_format", "query_file")
SYNTHETIC_NOTE = "Synthetic data (used while no data file is chosen)"
# What a task's configure_optimizers decides: these fields are off while such a task is chosen.
OWN_OPTIMIZER_NOTE = "the task chooses its optimizer (configure_optimizers)"
PATH_FIELDS = ("out_dir", "data", "val_data", "test_data", "query_file")  # with a browse button
PRECISION_FIELDS = (
    "fp8_recipe",
    "fp32_modules",
    "compile",
    "compile_mode",
    "activation_checkpointing",
)  # speed and memory: beside the mode
OWN_WIDGETS = ("task", "task_file", "device", "precision")  # the task picker, the devices panel, precision combo
# Labels that say more than the field's name (the unit, where a number has one); other fields: "Name words".
LABELS = {
    "lr": "Learning rate",
    "fp32_modules": "fp32 modules",
    "grad_clip": "Gradient clip",
    "grad_accum": "Grad accumulation",
    "warmup_steps": "Warm-up steps",
    "log_interval": "Log every (steps)",
    "eval_interval": "Eval every (steps)",
    "checkpoint_interval": "Checkpoint every (steps)",
    "checkpoint_minutes": "Checkpoint every (min)",
    "time_limit_minutes": "Time limit (min)",
    "threads": "CPU threads",
    "out_dir": "Output folder",
    "data": "Data file",
    "tensorboard": "TensorBoard",
    "val_data": "Validation data",
    "compile": "torch.compile",
    "query_file": "Query sizes file",
    "activation_checkpointing": "Activation ckpt",
}
# Tools beside a field (name -> object name, tooltip): each button emits toolRequested(name).
FIELD_TOOLS = {
    "lr": (
        "lrFindButton",
        "LR finder: train a fresh copy of the model while the learning rate grows, and pick "
        "the learning rate from the loss curve (opens a window; nothing is saved)",
    ),
    "batch_size": (
        "batchFindButton",
        "Batch-size finder: the largest batch that fits on this device in each "
        "precision mode, with its speed (opens a window)",
    ),
}


def label_for(name: str) -> str:
    return LABELS.get(name, name.replace("_", " ").capitalize())


def option_label(name: str) -> str:
    return name.replace("_", " ").capitalize()


class RunSetupPanel(PrecisionSection, QWidget):
    """The form. `config()` builds a RunConfig from it; `validityChanged(bool)` drives the Start button."""

    validityChanged = Signal(bool)
    changed = Signal()
    executionChanged = Signal()  # processes or isolation (app settings, not RunConfig fields)
    toolRequested = Signal(str)  # a "Find…" button beside a field (FIELD_TOOLS): the field's name
    unloadedTaskChosen = Signal(str)  # a task listed with list_task (not loaded) was picked: its key

    def __init__(self, parent=None):
        super().__init__(parent)
        self._tasks: dict = {}
        self._shown_task = ""  # the task whose options the form shows (the picker goes back to it, see list_task)
        self._device = None
        self._rows: dict[str, FieldRow] = {}
        self._option_rows: dict[str, FieldRow] = {}
        self._option_values: dict[str, dict] = {}  # task -> last options, so switching back keeps them
        self._loading = False
        self._label_width = LABEL_WIDTH
        self._valid = False
        self._engine_errors: dict[str, str] = {}
        self._validate_timer = QTimer(self, singleShot=True, interval=0)
        self._validate_timer.timeout.connect(self.validate)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        self._task_form = self._group(layout, "Task")
        self._build_task_group()
        self._precision_form = self._group(layout, "Precision")
        self._build_precision_group()
        self._training_form = self._group(layout, "Training")
        self._output_form = self._group(layout, "Run and output")
        # Everything that keeps Start disabled, in one place (each message is also under its own field).
        self.problemsLabel = restyle(QLabel(objectName="formProblems", wordWrap=True), role="error")
        self.problemsLabel.hide()
        layout.addWidget(self.problemsLabel)
        layout.addStretch(1)
        self.setEnabled(False)  # until populate() brings the engine's tasks

    # ------------------------------------------------------------------ building
    def _group(self, layout: QVBoxLayout, title: str) -> QFormLayout:
        box = QGroupBox(title)
        form = QFormLayout(box)
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        form.setHorizontalSpacing(10)
        form.setVerticalSpacing(6)
        layout.addWidget(box)
        return form

    def _build_task_group(self) -> None:
        self.taskCombo = NoWheelComboBox(objectName="taskCombo")
        self.taskCombo.currentIndexChanged.connect(self._on_task_changed)
        self.taskDescription = restyle(QLabel(objectName="taskDescription", wordWrap=True), role="hint")
        self.paramCount = QLabel("–", objectName="paramCount")
        self._task_form.addRow(form_label("Task"), self.taskCombo)
        self._task_form.addRow(form_label(""), self.taskDescription)
        self._task_form.addRow(form_label("Parameters"), self.paramCount)
        self._task_error = restyle(QLabel(objectName="taskError", wordWrap=True), role="error")
        self._task_error.hide()
        self._task_form.addRow("", self._task_error)
        self._fixed_task_rows = self._task_form.rowCount()

    def populate(self, tasks: dict, field_specs: dict) -> None:
        """Build the form from core's registry and field specs (called once the engine is imported)."""
        self._tasks = dict(tasks)
        defaults = RunConfig()
        # Fields core adds later (not named in the two groups) land in the second group, in spec order.
        known = set(TRAINING_FIELDS) | set(OUTPUT_FIELDS) | set(DATA_FIELDS) | set(OWN_WIDGETS) | set(PRECISION_FIELDS)
        extra = tuple(name for name in field_specs if name not in known and hasattr(defaults, name))
        output = tuple(n for n in OUTPUT_FIELDS if n in field_specs)
        output = output[:4] + extra + output[4:]
        training = tuple(n for n in TRAINING_FIELDS if n in field_specs)
        speed = tuple(n for n in PRECISION_FIELDS if n in field_specs)
        data = tuple(n for n in DATA_FIELDS if n in field_specs)
        for form, names in (
            (self._task_form, data),
            (self._training_form, training),
            (self._output_form, output),
            (self._precision_form, speed),
        ):
            for name in names:
                spec = field_specs[name]
                kind = type(getattr(defaults, name))
                editor = Editor(name, kind, spec.help, spec.minimum, spec.maximum, spec.step, spec.choices)
                if name in PATH_FIELDS:
                    editor.add_button("…", f"Choose the {label_for(name).lower()}", lambda _=0, n=name: self._browse(n))
                if name in FIELD_TOOLS:
                    tool, tooltip = FIELD_TOOLS[name]  # a "Find…" tool: toolRequested(name)
                    emit = lambda _=0, n=name: self.toolRequested.emit(n)  # noqa: E731
                    editor.add_button("Find…", tooltip, emit, objectName=tool, focusPolicy=Qt.FocusPolicy.TabFocus)
                row = FieldRow(editor)
                editor.changed.connect(self._on_field_changed)
                self._rows[name] = row
                if name == "fp8_recipe":  # under the mode it belongs to, shown only with fp8
                    form.insertRow(1, form_label("fp8 recipe", spec.help), row)
                else:
                    form.addRow(form_label(label_for(name), spec.help), row)
        self._synthetic_note = restyle(QLabel(SYNTHETIC_NOTE, objectName="syntheticNote", wordWrap=True), role="hint")
        self._task_form.addRow("", self._synthetic_note)
        self._own_optimizer_note = restyle(QLabel(OWN_OPTIMIZER_NOTE, objectName="ownOptimizerNote"), role="hint")
        self._training_form.insertRow(0, "", self._own_optimizer_note)
        if "data" in self._rows:
            self._rows["data"].editor.changed.connect(self._show_synthetic_options)
        self.taskCombo.blockSignals(True)
        for name, cls in self._tasks.items():
            self.taskCombo.addItem(name, name)
            self.taskCombo.setItemData(self.taskCombo.count() - 1, cls.description, Qt.ItemDataRole.ToolTipRole)
        self.taskCombo.blockSignals(False)
        if "compile" in self._rows and "compile_mode" in self._rows:  # a mode only means something when on
            compile_input = self._rows["compile"].editor.input
            compile_input.toggled.connect(self._rows["compile_mode"].editor.input.setEnabled)
            self._rows["compile_mode"].editor.input.setEnabled(compile_input.isChecked())
        self._align_labels(
            [label_for(name) for name in data + training + output + speed]
            + [option_label(option.name) for cls in self._tasks.values() for option in cls.options]
        )
        self._mark_refused_recipes()
        if "fp8_recipe" in self._rows:
            self._rows["fp8_recipe"].editor.changed.connect(self._update_auto_text)
        self.setEnabled(True)
        self.set_config(defaults)
        self._show_own_optimizer()
        self._update_tab_order()

    def set_field(self, name: str, value) -> None:
        """Put `value` into field `name` as if the user had typed it (e.g. the learning rate an LR finder picked)."""
        self._rows[name].editor.set_value(value)

    def _align_labels(self, texts: list[str]) -> None:
        """One label column width across all groups (the widest label any task can show), so editors line up."""
        labels = [label for label in self.findChildren(QLabel) if label.property("formLabel")]
        metrics = self.fontMetrics()
        widest = max([metrics.horizontalAdvance(text) for text in texts + [lb.text() for lb in labels]] + [0])
        self._label_width = max(LABEL_WIDTH, widest + 12)
        for label in labels:
            label.setMinimumWidth(self._label_width)

    def _update_tab_order(self) -> None:
        """Tab walks the form top to bottom, task options included (rebuilt later, Qt would visit them last)."""

        def inputs(row: FieldRow) -> list[QWidget]:
            return [row.editor.input, *row.editor.buttons]

        options = self._task_option_specs()
        chain = [self.taskCombo]
        chain += [self._option_rows[o.name].editor.input for o in options if not o.synthetic]
        chain += [w for name in DATA_FIELDS if name in self._rows for w in inputs(self._rows[name])]
        chain += [self._option_rows[o.name].editor.input for o in options if o.synthetic]
        chain += [self.precisionCombo, self.processesEdit, self.separateProcessCheck]
        chain += [w for name, row in self._rows.items() if name not in DATA_FIELDS for w in inputs(row)]
        for first, second in zip(chain, chain[1:]):
            QWidget.setTabOrder(first, second)

    # ------------------------------------------------------------------ config in/out
    def set_config(self, config) -> None:
        """Show `config` in the form (the task's options included); does not apply task defaults."""
        self._loading = True
        try:
            self._option_values[config.task] = dict(config.task_options)
            index = self.taskCombo.findData(config.task)
            if index >= 0:
                self.taskCombo.setCurrentIndex(index)
            self._rebuild_task_options()
            for name, row in self._rows.items():
                value = getattr(config, name)
                row.editor.set_value("\\t" if name == "delimiter" and value == "\t" else value)  # a tab, visibly
            self.set_precision(config.precision)
            self._show_fp8_recipe()
        finally:
            self._loading = False
        self._engine_errors.clear()
        self.validate()

    def values(self) -> dict:
        values = {name: row.editor.value() for name, row in self._rows.items()}
        if isinstance(values.get("delimiter"), str):
            values["delimiter"] = delimiter_value(values["delimiter"])  # '\t' typed: a tab
        values["task"] = self.taskCombo.currentData() or ""
        values["task_file"] = task_source(values["task"])  # a user task's file: a child process loads it
        values["task_options"] = {name: row.editor.value() for name, row in self._option_rows.items()}
        values["precision"] = self.precisionCombo.currentData()
        values["device"] = self._device.id if self._device is not None else "auto"
        return values

    def config(self):
        """The RunConfig the form shows (it may be invalid: see `errors()`)."""
        return RunConfig.from_dict(self.values(), source="form")

    def errors(self) -> dict[str, str]:
        """Field -> message: core's validation, plus what the selected device cannot run."""
        try:
            config = self.config()
        except ConfigError as exc:
            return {exc.field: str(exc).split(": ", 1)[-1]}
        problems = dict(config.errors())
        device = self._device
        if device is not None and config.precision != "auto" and config.precision not in device.precisions:
            reason = device.unsupported.get(config.precision, "not supported")
            problems["precision"] = f"{config.precision} is not available on {device.id}: {reason}"
        if device is not None and (reason := device.unsupported.get(config.optimizer)) and not self.chooses_optimizer():
            problems["optimizer"] = reason
        recipes = self._rows["fp8_recipe"].editor.input if "fp8_recipe" in self._rows else None
        if (
            config.precision == "fp8"
            and recipes
            and not (item := recipes.model().item(recipes.currentIndex())).isEnabled()
        ):
            problems["fp8_recipe"] = item.toolTip()
        for name, message in self._engine_errors.items():
            problems.setdefault(name, message)
        processes = self.processesEdit.value()
        if not (float(processes).is_integer() and 1 <= processes <= self._process_limit):
            problems["processes"] = (
                f"{self.processesEdit.text()} is out of range: must be a whole number between "
                f"1 and {self._process_limit} (the most this device can run)"
            )
        return problems

    def problem_summary(self) -> str:
        """One line naming every setting that blocks Start and why; empty when the form is valid."""
        problems = self.errors() if self._tasks else {}
        parts = [f"{label_for(key.removeprefix('task_options.'))}: {message}" for key, message in problems.items()]
        if not parts:
            return ""
        return f"Fix {'this setting' if len(parts) == 1 else f'these {len(parts)} settings'} to start: " + "; ".join(
            parts
        )

    def is_valid(self) -> bool:
        return self._valid

    # ------------------------------------------------------------------ task
    def add_task(self, cls, label: str = "", key: str = "") -> None:
        """Offer task class `cls` in the picker (as `label`, else its name), in place of the entry listed as `key`."""
        self._tasks[cls.name] = cls
        if key and (index := self.taskCombo.findData(key)) >= 0:
            self.taskCombo.setItemData(index, cls.name)
        self.list_task(cls.name, label or cls.name, cls.description)
        self._align_labels([option_label(option.name) for option in cls.options])

    def list_task(self, key: str, label: str, tooltip: str, enabled: bool = True) -> None:
        """List a task that is not loaded as `key`: picking it emits unloadedTaskChosen(key) and the picker stays until
        add_task brings the class; a disabled entry says why in its tooltip."""
        index = self.taskCombo.findData(key)
        if index < 0:
            self.taskCombo.addItem(label, key)
            index = self.taskCombo.count() - 1
        self.taskCombo.setItemText(index, label)
        self.taskCombo.setItemData(index, tooltip, Qt.ItemDataRole.ToolTipRole)
        self.taskCombo.model().item(index).setEnabled(enabled)

    def remove_task(self, keys, fallback: str) -> None:
        """Take the entries `keys` out of the picker; when the task shown is one of them, pick task `fallback` first."""
        if self.taskCombo.currentData() in keys:
            self.taskCombo.setCurrentIndex(self.taskCombo.findData(fallback))
        self.taskCombo.blockSignals(True)  # the entries after a removed one move up: the task shown stays
        for key in keys:
            while (index := self.taskCombo.findData(key)) >= 0:
                self.taskCombo.removeItem(index)
            self._tasks.pop(key, None)
            self._option_values.pop(key, None)
        self.taskCombo.blockSignals(False)

    def _on_task_changed(self) -> None:
        chosen = self.taskCombo.currentData()
        if chosen not in self._tasks and self._tasks:  # listed, not loaded: the window loads it off this thread
            self.taskCombo.blockSignals(True)
            self.taskCombo.setCurrentIndex(max(self.taskCombo.findData(self._shown_task), 0))
            self.taskCombo.blockSignals(False)
            if not self._loading and chosen:
                self.unloadedTaskChosen.emit(chosen)
            return
        before = dict(getattr(self._tasks.get(self._shown_task), "defaults", {}))
        self._rebuild_task_options()
        self._show_own_optimizer()
        if not self._loading:
            after, plain = dict(getattr(self._tasks.get(self.taskCombo.currentData()), "defaults", {})), RunConfig()
            # the previous task's defaults that the user left as they were go with it (to RunConfig's), then the new
            unset = {
                n: getattr(plain, n) for n, v in before.items() if n in self._rows and self._rows[n].editor.value() == v
            }
            for name, value in {**unset, **after}.items():
                if name in self._rows:
                    self._rows[name].editor.set_value(value)
        self._on_field_changed()

    def chooses_optimizer(self) -> bool:
        """Whether the chosen task defines configure_optimizers (TaskInfo.own_optimizer)."""
        cls = self._tasks.get(self.taskCombo.currentData())
        return cls is not None and class_info(cls).own_optimizer

    def _show_own_optimizer(self) -> None:
        """The optimizer's fields off, the note shown and their tooltip, while the task chooses its optimizer."""
        own = self.chooses_optimizer()
        self._training_form.setRowVisible(self._own_optimizer_note, own)
        for name in TASK_OPTIMIZER_FIELDS:
            if (row := self._rows.get(name)) is not None:
                row.setEnabled(not own)
                row.setToolTip(OWN_OPTIMIZER_NOTE if own else "")

    def _task_option_specs(self) -> tuple:
        task_cls = self._tasks.get(self.taskCombo.currentData())
        return tuple(o for o in (task_cls.options if task_cls else ()) if o.name in self._option_rows)

    def _rebuild_task_options(self) -> None:
        """The task's options in the Task group: the model's, then the data source, then those that only shape its
        synthetic data (shown while no data file is chosen)."""
        for row in self._option_rows.values():
            self._task_form.removeRow(row)
        self._option_rows.clear()
        task = self.taskCombo.currentData()
        task_cls = self._tasks.get(task)
        if task_cls is None:
            return
        self._shown_task = task
        self.taskDescription.setText(task_cls.description)
        saved = self._option_values.get(task, {})
        model_row = self._fixed_task_rows
        for option in task_cls.options:
            kind = type(option.default)
            editor = Editor(
                f"task_options.{option.name}",
                kind,
                option.help,
                option.minimum,
                option.maximum,
                None,
                option.choices,
                object_name=f"{option.name}OptionEdit",
            )
            editor.set_value(saved.get(option.name, option.default))
            editor.changed.connect(self._on_option_changed)
            row = FieldRow(editor)
            self._option_rows[option.name] = row
            label = form_label(option_label(option.name), option.help, self._label_width)
            if option.synthetic:
                self._task_form.addRow(label, row)
            else:
                self._task_form.insertRow(model_row, label, row)
                model_row += 1
        self._show_synthetic_options()
        self._update_param_count()
        if self._rows:
            self._update_tab_order()

    def _show_synthetic_options(self) -> None:
        """The synthetic-data options, with their note, only while no data file is chosen."""
        data_row = self._rows.get("data")
        synthetic = [o.name for o in self._task_option_specs() if o.synthetic]
        visible = data_row is None or not str(data_row.editor.value() or "").strip()
        for name in synthetic:
            self._task_form.setRowVisible(self._option_rows[name], visible)
        if hasattr(self, "_synthetic_note"):
            self._task_form.setRowVisible(self._synthetic_note, visible and bool(synthetic))

    def _on_option_changed(self) -> None:
        task = self.taskCombo.currentData()
        self._option_values[task] = {n: r.editor.value() for n, r in self._option_rows.items()}
        self._update_param_count()
        self._on_field_changed()

    def _update_param_count(self) -> None:
        task_cls = self._tasks.get(self.taskCombo.currentData())
        if task_cls is None:
            return
        options = {n: r.editor.value() for n, r in self._option_rows.items()}
        try:  # built on the meta device: no memory, no weights initialised
            count = task_cls(options).parameter_count()
        except AmpConsoleError as exc:  # bad options, or a task file's count that only its training knows
            self.paramCount.setText(f"– ({first_line(exc)})")
            return
        self.paramCount.setText(f"{count_text(count)} trainable parameters")

    # ------------------------------------------------------------------ validation
    def mark_engine_error(self, field: str, message: str) -> None:
        """Show an error the engine raised at setup (e.g. grad_accum too large for the data) under its field."""
        if field:
            self._engine_errors[field] = message
            self.validate()

    def _on_field_changed(self) -> None:
        if self._loading:
            return
        self._engine_errors.clear()
        self._schedule_validate()
        self.changed.emit()

    def _schedule_validate(self) -> None:
        self._validate_timer.start()  # coalesce bursts (a spin box held down) into one validation

    def validate(self) -> bool:
        problems = self.errors() if self._tasks else {"task": "loading the engine…"}
        for name, row in self._rows.items():
            row.set_error(problems.get(name))
        for name, row in self._option_rows.items():
            row.set_error(problems.get(f"task_options.{name}"))
        self._processes_row.set_error(problems.get("processes"))
        for label, key in ((self._task_error, "task"), (self._precision_error, "precision")):
            label.setText(problems.get(key, ""))
            label.setVisible(key in problems)
        summary = self.problem_summary() if self._tasks else ""
        self.problemsLabel.setText(summary)
        self.problemsLabel.setVisible(bool(summary))
        valid = not problems
        if valid != self._valid:
            self._valid = valid
            self.validityChanged.emit(valid)
        self._schedule_estimate()
        return valid

    def _browse(self, name: str) -> None:
        row = self._rows[name]
        if name == "out_dir":
            path = QFileDialog.getExistingDirectory(self, "Output folder", row.editor.value())
        elif name == "query_file":
            path, _ = QFileDialog.getOpenFileName(
                self, label_for(name), "", "Query sizes (*.query *.group);;All files (*)"
            )
        else:
            from core.data.importers import READ_SUFFIXES

            kinds = " ".join(f"*{suffix}" for suffix in READ_SUFFIXES)
            path, _ = QFileDialog.getOpenFileName(self, label_for(name), "", f"Data ({kinds});;All files (*)")
        if path:
            row.editor.set_value(path)
