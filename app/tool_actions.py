"""The device tools of the Precision and Tools menus, each a ToolDialog made on first use and kept; one at a time on a
device, never beside a run on it (`tool_blocked`, `busy_tools`).
"""

from __future__ import annotations

from PySide6.QtGui import QAction


class ToolActions:
    """The window's device tools: their menu actions, their dialogs and the rule that keeps them apart."""

    # the dialog's attribute and show method; its menu, its action's attribute, text and shortcut
    TOOLS = (
        ("lrFinderDialog", "show_lr_finder", "tools", "lrFinderAction", "&LR finder…", "Ctrl+Shift+L"),
        ("batchFinderDialog", "show_batch_finder", "tools", "batchFinderAction", "&Batch-size finder…", "Ctrl+Shift+B"),
        ("summaryDialog", "show_summary", "tools", "summaryAction", "Model &summary…", "Ctrl+Shift+M"),
        ("sweepDialog", "show_sweep", "tools", "sweepAction", "S&weep…", "Ctrl+Shift+W"),
        ("compareDialog", "show_compare", "precision", "compareAction", "&Compare precisions…", "Ctrl+Shift+C"),
        ("inspectorDialog", "show_inspector", "precision", "inspectAction", "&Inspect dtypes…", "Ctrl+Shift+I"),
    )

    def __init__(self, window):
        self.window = window
        for dialog, *_menu_entry in self.TOOLS:
            setattr(self, dialog, None)
        self.actions: list[QAction] = []

    def add_to_menus(self, precision_menu, tools_menu) -> None:
        menus = {"precision": precision_menu, "tools": tools_menu}
        for _dialog, show, menu, name, text, shortcut in self.TOOLS:
            action = QAction(text, self.window, shortcut=shortcut, triggered=getattr(self, show))
            setattr(self, name, action)
            menus[menu].addAction(action)
            self.actions.append(action)

    def update_enabled(self, engine_ready: bool) -> None:
        for action in self.actions:
            action.setEnabled(engine_ready)

    def _tool_dialog(self, attribute: str, cls, *extra, wire=None):
        """The tool dialog kept in `attribute`, made on first use as cls(the form's config, the devices, the rule
        above, *extra, window) and passed to `wire`, with its setting refreshed."""
        if not self.window.engine_ready:
            return None
        dialog = getattr(self, attribute)
        if dialog is None:
            window = self.window
            dialog = cls(window.setupPanel.config, window.devices_for_run, self.tool_blocked, *extra, window)
            dialog.job.runningChanged.connect(lambda _running: self.window._update_buttons())
            setattr(self, attribute, dialog)
            if wire is not None:
                wire(dialog)
        dialog.refresh_setting()
        dialog.show()
        dialog.raise_()
        dialog.activateWindow()
        return dialog

    def show_lr_finder(self):
        """The LR finder; its "Use this LR" fills the form's learning rate."""
        from app.panels.tuning import LRFinderDialog

        def wire(dialog):
            dialog.lrChosen.connect(lambda lr: self._fill_field("lr", lr, "learning rate"))

        return self._tool_dialog("lrFinderDialog", LRFinderDialog, wire=wire)

    def show_batch_finder(self):
        """The batch-size finder; its "Use batch N" fills the form's batch size."""
        from app.panels.tuning_batch import BatchFinderDialog

        def wire(dialog):
            dialog.batchChosen.connect(lambda batch: self._fill_field("batch_size", batch, "batch size"))

        return self._tool_dialog("batchFinderDialog", BatchFinderDialog, wire=wire)

    def show_summary(self):
        """The model summary; it measures at once when opened the first time."""
        from app.panels.tuning import SummaryDialog

        return self._tool_dialog("summaryDialog", SummaryDialog, wire=lambda dialog: dialog.start())

    def show_compare(self):
        """Compare precisions; its "Train with this" starts a run in the recommended mode and optimizer."""
        from app.panels.compare import CompareDialog

        def train(mode: str) -> None:
            if not self.window.controller.running:  # else train_with_precision says why it does not start
                self.window.setupPanel.set_field("optimizer", self.compareDialog.recommended_optimizer())
            self.window.train_with_precision(mode)

        def wire(dialog):
            dialog.trainRequested.connect(train)

        return self._tool_dialog("compareDialog", CompareDialog, wire=wire)

    def show_inspector(self):
        """The dtype inspector."""
        from app.panels.inspector import InspectorDialog

        return self._tool_dialog("inspectorDialog", InspectorDialog)

    def show_sweep(self):
        """The sweep dialog: trials are ordinary runs under the runs root."""
        from app.panels.tuning_sweep import SweepDialog

        def wire(dialog):
            dialog.openInHistory.connect(self.window.show_run_in_history)
            dialog.trainLongerRequested.connect(self.window.train_trial_longer)
            dialog.queueRequested.connect(lambda entries: self.window.show_queue(add=entries))

        return self._tool_dialog("sweepDialog", SweepDialog, self.window.runs_root, wire=wire)

    def dialogs(self) -> list:
        """The tool dialogs made so far."""
        return [d for d in (getattr(self, tool[0]) for tool in self.TOOLS) if d is not None]

    def busy_tools(self) -> list[str]:
        """The titles of the tools working right now."""
        return [d.windowTitle() for d in self.dialogs() if d.job.running]

    def tool_blocked(self, device: str) -> str:
        """Why a tool may not run on `device` now ('' if it may): another tool works, or a run uses it ('auto': any)."""
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
