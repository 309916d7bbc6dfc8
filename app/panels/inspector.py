"""Dtype inspector (a ToolDialog): core.lab.dtype_inspector.inspect_dtypes shown as a tree of modules, with rows
autocast kept in float32 highlighted and the selected module's ops and reasons in full below.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QTextBrowser,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
)

from app.panels.tool_dialog import ToolDialog, split
from core.errors import DeviceError
from core.precision_modes import MIXED_MODES, PRECISION_MODES, best_mixed_mode

COLUMNS = ("Module", "Type", "Input", "Output", "Parameters", "Gradients", "Why float32", "Ops (dtype they ran in)")
WHY_COLUMN, OPS_COLUMN = 6, 7
KEPT_FP32_BRUSH = QBrush(QColor(201, 138, 18, 60))


def _join(dtypes: list[str]) -> str:
    unique = list(dict.fromkeys(dtypes))
    return ", ".join(unique) if unique else "–"


class InspectorDialog(ToolDialog):
    """Non-modal. `config_provider()` gives the form's RunConfig; the precision picker here overrides it."""

    TITLE = "Dtype inspector"
    NAME = "inspector"
    RUN_TEXT = "Inspect"
    IDLE_TEXT = "Choose a precision and press Inspect."
    STOPPABLE = False  # one forward and backward pass

    def __init__(self, *args, **kwargs):
        self._reasons: dict[str, str] = {}
        self._rows: dict = {}
        self._items: dict[str, QTreeWidgetItem] = {}
        super().__init__(*args, **kwargs)
        self.resize(1100, 620)
        self.runButton.setToolTip("Run one forward and backward pass with hooks recording every module's dtypes")

    def _build_controls(self, controls: QHBoxLayout) -> None:
        self.precisionCombo = self._labelled(controls, "Precision:", QComboBox(objectName="inspectPrecisionCombo"))
        for mode in PRECISION_MODES:
            self.precisionCombo.addItem(mode, mode)
        legend = QLabel(
            "■ highlighted: autocast kept this module in float32 (why: per PyTorch's autocast op reference)",
            objectName="inspectorLegend",
        )
        legend.setStyleSheet("color: #c98a12;")
        controls.addWidget(legend)

    def _build(self, layout: QVBoxLayout) -> None:
        self.progressBar.setRange(0, 0)  # no steps to count: a busy bar while the pass runs
        self.tree = QTreeWidget(objectName="dtypeTree")
        self.tree.setHeaderLabels(COLUMNS)
        self.tree.setAlternatingRowColors(True)
        self.tree.setUniformRowHeights(True)
        self.tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.tree.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        header = self.tree.header()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        header.setStretchLastSection(False)  # the Ops column keeps its full width; the tree scrolls sideways
        self.tree.currentItemChanged.connect(self._show_details)
        self.details = QTextBrowser(objectName="inspectorDetails")  # scrolls when a module ran many ops
        self.details.setPlaceholderText("Select a module to see its ops and why each ran in its dtype.")
        layout.addWidget(split(Qt.Orientation.Vertical, [420, 160], self.tree, self.details), 1)

    def setting_text(self, config) -> str:
        return (
            f"Task <b>{config.task}</b> on <b>{config.device}</b>: one training step (forward, loss, backward) "
            f"with hooks on every module"
        )

    def showEvent(self, event) -> None:
        """Until the first inspection the picker follows the form's precision (or the device's mixed mode)."""
        super().showEvent(event)
        try:
            config = self._config_provider()
        except Exception:
            return
        if not self.job.running and self.result is None:
            mode = config.precision if config.precision in MIXED_MODES else self._best_mixed_mode(config.device)
            self.precisionCombo.setCurrentIndex(self.precisionCombo.findData(mode))

    def _best_mixed_mode(self, device: str) -> str:
        from core.devices import device_info, list_devices

        try:
            return best_mixed_mode(device_info(device, self._devices_provider() or list_devices()).precisions)
        except DeviceError:  # not here (any more): the inspection says so
            return "fp32"

    def _config(self):
        return self._config_provider().replace(precision=self.precisionCombo.currentData()).validate()

    def _job(self, config):
        devices = self._devices_provider()

        def run(_progress, _control):  # one forward + backward: short, not worth interrupting
            from core.lab.tool_child import run_tool

            return run_tool("inspector", config, devices=devices)

        return run

    def _inputs(self):
        return [self.precisionCombo]

    def _on_result(self, result) -> None:
        self._reasons = result.reasons()
        self._rows = {row.name: row for row in result.rows}
        self.tree.clear()
        self._items = items = {}
        bold = QFont()
        bold.setBold(True)
        for row in result.rows:
            parent_name = row.name.rsplit(".", 1)[0] if "." in row.name and row.name != "task.loss" else "(model)"
            parent = items.get(parent_name) if row.name not in ("(model)", "task.loss") else None
            ops = ", ".join(f"{op} {dtype}" for op, dtype in row.ops.items())
            reasons = dict.fromkeys(row.why.values())
            why = ", ".join(reasons)
            cells = (
                row.name.rsplit(".", 1)[-1] if parent is not None else row.name,
                row.type,
                _join(row.input_dtypes),
                _join(row.output_dtypes),
                _join(row.param_dtypes),
                _join(row.grad_dtypes),
                why,
                ops or "–",
            )
            item = QTreeWidgetItem(parent if parent is not None else self.tree, list(cells))
            item.setData(0, 256, row.name)  # Qt.UserRole: the full module name
            item.setToolTip(0, row.name)
            item.setToolTip(OPS_COLUMN, self._ops_text(row, "\n"))
            if why:
                item.setToolTip(WHY_COLUMN, "\n".join(f"{r}: {self._reasons.get(r, '')}" for r in reasons))
            if row.kept_fp32:
                for column in range(len(COLUMNS)):
                    item.setBackground(column, KEPT_FP32_BRUSH)
                item.setFont(3, bold)
                kept = ", ".join(row.fp32_ops) or "its outputs"
                item.setToolTip(3, f"autocast kept {kept} in float32 while computing in {result.autocast_dtype}")
            items[row.name] = item
        self.tree.expandAll()
        for column in range(len(COLUMNS)):  # contents plus breathing room between the dtype columns
            self.tree.resizeColumnToContents(column)
            self.tree.setColumnWidth(column, self.tree.columnWidth(column) + 18)
        self.tree.setColumnWidth(WHY_COLUMN, min(self.tree.columnWidth(WHY_COLUMN), 260))  # full text in the tooltip
        kept = result.kept_fp32()
        compute = result.autocast_dtype or "float32 (autocast off)"
        self.statusLabel.setText(
            f"{result.task} in {result.precision} on {result.device}: autocast computes in "
            f"{compute}; loss dtype {result.loss_dtype}; {len(kept)} module(s) kept in float32"
            + (f": {', '.join(kept)}" if kept else "")
            + "."
        )

    @staticmethod
    def _ops_text(row, separator: str) -> str:
        lines = [
            f"{op} {dtype}" + (f" ({row.why[op]})" if op in row.why and dtype == "float32" else "")
            for op, dtype in row.ops.items()
        ]
        if row.casts:
            lines.append(f"+{row.casts} casts inserted by autocast")
        return separator.join(lines) or "no ops of its own (its children ran them)"

    def _show_details(self, item, _previous=None) -> None:
        row = self._rows.get(item.data(0, 256)) if item is not None and self.result is not None else None
        if row is None:
            return
        text = f"<b>{row.name}</b> ({row.type}): {self._ops_text(row, ', ')}"
        for reason in dict.fromkeys(row.why.values()):
            ops = ", ".join(op for op, why in row.why.items() if why == reason)
            text += f"<br><b>{reason}</b> ({ops}): {self._reasons.get(reason, '')}"
        self.details.setHtml(text)

    def find_item(self, name: str) -> QTreeWidgetItem | None:
        return self._items.get(name)
