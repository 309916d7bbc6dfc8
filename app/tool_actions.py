"""The device tools of the Precision and Tools menus, each a ToolDialog made on first use and kept; one at a time on a
device, never beside a run on it (`tool_blocked`, `busy_tools`).
"""

from __future__ import annotations

from PySide6.QtGui import QAction


class ToolActions:
    """The window's device tools: their menu actions, their dialogs and the rule that keeps them apart."""

    def __init__(self, window):
        self.window = window
        self.compareDialog = None
        self.inspectorDialog = None
        self.lrFinderDialog = None
        self.batchFinderDialog = None
        self.summaryDialog = None
        self.sweepDialog = None

    def add_to_menus(self, precision_menu, tools_menu) -> None:
        window = self.window
        self.compareAction = QAction(
            "&Compare precisions…", window, shortcut="Ctrl+Shift+C", triggered=self.show_compare
        )
        self.inspectAction = QAction("&Inspect dtypes…", window, shortcut="Ctrl+Shift+I", triggered=self.show_inspector)
        precision_menu.addAction(self.compareAction)
        precision_menu.addAction(self.inspectAction)
        self.lrFinderAction = QAction("&LR finder…", window, shortcut="Ctrl+Shift+L", triggered=self.show_lr_finder)
        self.batchFinderAction = QAction(
            "&Batch-size finder…", window, shortcut="Ctrl+Shift+B", triggered=self.show_batch_finder
        )
        self.summaryAction = QAction("Model &summary…", window, shortcut="Ctrl+Shift+M", triggered=self.show_summary)
        self.sweepAction = QAction("S&weep…", window, shortcut="Ctrl+Shift+W", triggered=self.show_sweep)
        for action in (self.lrFinderAction, self.batchFinderAction, self.summaryAction, self.sweepAction):
            tools_menu.addAction(action)

    def update_enabled(self, engine_ready: bool) -> None:
        for action in (
            self.compareAction,
            self.inspectAction,
            self.lrFinderAction,
            self.batchFinderAction,
            self.summaryAction,
            self.sweepAction,
        ):
            action.setEnabled(engine_ready)

    def _inputs(self) -> tuple:
        """What every tool dialog is made with: the form's config, the devices, and the rule above."""
        return self.window.setupPanel.config, self.window.devices_for_run, self.tool_blocked

    def _tool_dialog(self, attribute: str, make):
        """The tool dialog kept in `attribute`, made on first use by `make()`, with its setting refreshed."""
        if not self.window.engine_ready:
            return None
        dialog = getattr(self, attribute)
        if dialog is None:
            dialog = make()
            dialog.job.runningChanged.connect(lambda _running: self.window._update_buttons())
            setattr(self, attribute, dialog)
        dialog.refresh_setting()
        dialog.show()
        dialog.raise_()
        dialog.activateWindow()
        return dialog

    def show_lr_finder(self):
        """The LR finder; its "Use this LR" fills the form's learning rate."""

        def make():
            from app.panels.tuning import LRFinderDialog

            dialog = LRFinderDialog(*self._inputs(), self.window)
            dialog.lrChosen.connect(lambda lr: self._fill_field("lr", lr, "learning rate"))
            return dialog

        return self._tool_dialog("lrFinderDialog", make)

    def show_batch_finder(self):
        """The batch-size finder; its "Use batch N" fills the form's batch size."""

        def make():
            from app.panels.tuning_batch import BatchFinderDialog

            dialog = BatchFinderDialog(*self._inputs(), self.window)
            dialog.batchChosen.connect(lambda batch: self._fill_field("batch_size", batch, "batch size"))
            return dialog

        return self._tool_dialog("batchFinderDialog", make)

    def show_summary(self):
        """The model summary; it measures at once when opened the first time."""
        first = self.summaryDialog is None

        def make():
            from app.panels.tuning import SummaryDialog

            return SummaryDialog(*self._inputs(), self.window)

        dialog = self._tool_dialog("summaryDialog", make)
        if dialog is not None and first:
            dialog.start()
        return dialog

    def show_compare(self):
        """Compare precisions; its "Train with this" starts a run in the recommended mode."""

        def make():
            from app.panels.compare import CompareDialog

            dialog = CompareDialog(*self._inputs(), self.window)
            dialog.trainRequested.connect(self.window.train_with_precision)
            return dialog

        return self._tool_dialog("compareDialog", make)

    def show_inspector(self):
        """The dtype inspector."""

        def make():
            from app.panels.inspector import InspectorDialog

            return InspectorDialog(*self._inputs(), self.window)

        return self._tool_dialog("inspectorDialog", make)

    def show_sweep(self):
        """The sweep dialog: trials are ordinary runs under the runs root."""

        def make():
            from app.panels.tuning_sweep import SweepDialog

            dialog = SweepDialog(*self._inputs(), self.window.runs_root, self.window)
            dialog.openInHistory.connect(self.window.show_run_in_history)
            dialog.trainLongerRequested.connect(self.window.train_trial_longer)
            return dialog

        return self._tool_dialog("sweepDialog", make)

    def dialogs(self) -> list:
        """The tool dialogs made so far."""
        return [
            d
            for d in (
                self.lrFinderDialog,
                self.batchFinderDialog,
                self.summaryDialog,
                self.sweepDialog,
                self.compareDialog,
                self.inspectorDialog,
            )
            if d is not None
        ]

    def busy_tools(self) -> list[str]:
        """The titles of the tools working right now."""
        return [d.windowTitle() for d in self.dialogs() if d.job.running]

    def tool_blocked(self, device: str) -> str:
        """Why a tool may not run on `device` now ('' when it may): another tool is working, or a run uses that device.
        'auto' counts as every device."""
        working = self.busy_tools()  # the asking tool is not running yet: these are others
        if working:
            return (
                f"{', '.join(working)} is measuring on the device; two tools at once would each measure the "
                "other. Let it finish or stop it first."
            )
        if not self.window.controller.running:
            return ""
        run_device = self.window._run_device or "auto"
        if "auto" not in (device, run_device) and device != run_device:
            return ""
        return (
            f"A training run is using {run_device}; a tool on the same device would compete with it for the "
            "device (slowing the run, and measuring the sharing, not the model). Stop the run or wait for "
            "it to end, then run the tool."
        )

    def show_for_field(self, field: str) -> None:
        """A field's Find… button: the LR finder beside the learning rate, the batch finder beside the batch."""
        if field == "lr":
            self.show_lr_finder()
        elif field == "batch_size":
            self.show_batch_finder()

    def _fill_field(self, field: str, value, what: str) -> None:
        if self.window.controller.running:
            self.window.show_message(f"A run is in progress; the {what} stays as it is until it ends.", "status-warn")
            return
        self.window.setupPanel.set_field(field, value)
        self.window.show_message(f"The {what} is now {value}.", "status-ok")
