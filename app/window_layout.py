"""How the main window is laid out: its panels, buttons, splitters and menus, connected to app.main_window's slots."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QSize, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QHBoxLayout, QMessageBox, QPushButton, QScrollArea, QSplitter, QVBoxLayout, QWidget

from app.assets import icon
from app.panels.devices import DevicesPanel
from app.panels.log import LogPanel
from app.panels.nan_doctor import FixesPanel
from app.panels.plots import PlotsPanel
from app.panels.run_setup import RunSetupPanel
from app.panels.samples import SamplesPanel
from app.status import RunStatusBar


class WidthFittingScroll(QScrollArea):
    """A vertical scroll area never narrower than its content's minimum width (else the form's right edge is cut)."""

    def setWidget(self, widget) -> None:
        super().setWidget(widget)
        widget.installEventFilter(self)  # its layout changes (a task's options, the device list): hint again

    def eventFilter(self, watched, event) -> bool:
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()
        return super().eventFilter(watched, event)

    def minimumSizeHint(self):
        hint = super().minimumSizeHint()
        content = self.widget()
        if content is None:
            return hint
        width = content.minimumSizeHint().width() + self.verticalScrollBar().sizeHint().width() + 2 * self.frameWidth()
        return hint.expandedTo(QSize(width, 0))


class MarginSplitter(QSplitter):
    """A splitter whose minimum size counts its contents margins (QSplitter's leaves them out)."""

    def minimumSizeHint(self):
        return super().minimumSizeHint().grownBy(self.contentsMargins())


def build_widgets(window) -> None:
    """The window's panels, buttons, splitters and status bar, wired to the window's slots."""
    window.devicesPanel = DevicesPanel()
    window.setupPanel = RunSetupPanel()
    window.plotsPanel = PlotsPanel()
    window.samplesPanel = SamplesPanel()  # beside the plots, shown once a run sends samples
    window.logPanel = LogPanel()
    window.fixesPanel = FixesPanel()  # a diverged run's re-runs, over the Start button
    window.fixesPanel.fixChosen.connect(window.rerun_with_fix)
    window.statusBarWidget = RunStatusBar()
    window.setStatusBar(window.statusBarWidget)
    window.statusBarWidget.detailsRequested.connect(window.show_error_details)

    buttons = QHBoxLayout()
    for name, text, tip, slot in (  # window.startButton, pauseButton, stopButton
        ("start", "Start", "Start training with these settings (F5)", window.start_run),
        ("pause", "Pause", "Pause after the current step, or resume (F6)", window.toggle_pause),
        ("stop", "Stop", "Stop after the current step and write a checkpoint (Shift+F5)", window.stop_run),
    ):
        button = QPushButton(icon(name), text, objectName=f"{name}Button", toolTip=tip, clicked=slot)
        setattr(window, f"{name}Button", button)
        buttons.addWidget(button)

    form_holder = QWidget()
    form_layout = QVBoxLayout(form_holder)
    form_layout.setContentsMargins(0, 0, 6, 0)
    form_layout.addWidget(window.devicesPanel)
    form_layout.addWidget(window.setupPanel, 1)
    scroll = WidthFittingScroll(objectName="setupScroll", widgetResizable=True, frameShape=QScrollArea.Shape.NoFrame)
    scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    scroll.setWidget(form_holder)
    left = QWidget()
    left_layout = QVBoxLayout(left)
    left_layout.setContentsMargins(8, 8, 4, 8)
    left_layout.addWidget(scroll, 1)
    left_layout.addWidget(window.fixesPanel)
    left_layout.addLayout(buttons)

    window.rightSplitter = MarginSplitter(Qt.Orientation.Vertical, objectName="rightSplitter")
    window.plotsSplitter = QSplitter(Qt.Orientation.Horizontal, objectName="plotsSplitter")
    window.plotsSplitter.addWidget(window.plotsPanel)
    window.plotsSplitter.addWidget(window.samplesPanel)
    window.plotsSplitter.setStretchFactor(0, 3)
    window.plotsSplitter.setStretchFactor(1, 1)
    window.rightSplitter.addWidget(window.plotsSplitter)
    window.rightSplitter.addWidget(window.logPanel)
    window.rightSplitter.setStretchFactor(0, 4)
    window.rightSplitter.setStretchFactor(1, 1)
    window.mainSplitter = QSplitter(Qt.Orientation.Horizontal, objectName="mainSplitter")
    window.mainSplitter.addWidget(left)
    window.mainSplitter.addWidget(window.rightSplitter)
    window.mainSplitter.setStretchFactor(1, 1)
    window.mainSplitter.setSizes([400, 1000])
    window.rightSplitter.setSizes([620, 150])
    window.rightSplitter.setContentsMargins(0, 8, 8, 0)
    window.setCentralWidget(window.mainSplitter)

    window.devicesPanel.deviceSelected.connect(window._on_device_selected)
    window.setupPanel.validityChanged.connect(lambda _valid: window._update_buttons())
    window.setupPanel.toolRequested.connect(lambda field: window.tools.show_for_field(field))


def build_menus(window) -> None:
    """The menu bar: File (with the file, history and remote actions), Run, Precision and Tools, Help."""
    file_menu = window.menuBar().addMenu("&File")
    window.file_actions.add_to_menu(file_menu)
    file_menu.addSeparator()
    window.task_actions.add_to_menu(file_menu)
    file_menu.addSeparator()
    window.historyAction = QAction("Run &history…", window, shortcut="Ctrl+H", triggered=window.show_history)
    file_menu.addAction(window.historyAction)
    window.remote.add_to_menu(file_menu)
    file_menu.addSeparator()
    quit_action = QAction("&Quit", window, shortcut=QKeySequence.StandardKey.Quit)
    quit_action.triggered.connect(window.request_close)
    file_menu.addAction(quit_action)

    run_menu = window.menuBar().addMenu("&Run")
    window.startAction = QAction(icon("start"), "&Start", window, shortcut="F5", triggered=window.start_run)
    window.pauseAction = QAction(icon("pause"), "&Pause / Resume", window, shortcut="F6", triggered=window.toggle_pause)
    window.stopAction = QAction(icon("stop"), "S&top", window, shortcut="Shift+F5", triggered=window.stop_run)
    run_menu.addActions([window.startAction, window.pauseAction, window.stopAction])
    run_menu.addSeparator()
    window.queueAddAction = QAction("&Add to queue", window, shortcut="Ctrl+Shift+U")
    window.queueAddAction.triggered.connect(lambda: window.show_queue(add=[]))
    window.queueAction = QAction("Run &queue…", window, shortcut="Ctrl+U", triggered=lambda: window.show_queue())
    run_menu.addActions([window.queueAddAction, window.queueAction])
    run_menu.addSeparator()
    window.refreshAction = QAction(icon("refresh"), "&Refresh devices", window, triggered=window.devicesPanel.refresh)
    run_menu.addAction(window.refreshAction)
    run_menu.addSeparator()
    run_menu.addActions(window.file_actions.copy_actions)  # the form's run for a terminal: train or remote start

    precision_menu = window.menuBar().addMenu("&Precision")
    tools_menu = window.menuBar().addMenu("&Tools")
    window.tools.add_to_menus(precision_menu, tools_menu)
    tools_menu.addSeparator()
    window.previewAction = QAction(
        "&Try a model…", window, shortcut="Ctrl+Shift+P", triggered=lambda: window.show_preview()
    )
    tools_menu.addAction(window.previewAction)

    help_menu = window.menuBar().addMenu("&Help")
    help_menu.addAction(QAction("&About AMP Console", window, triggered=lambda: show_about(window)))


def show_about(window) -> None:
    QMessageBox.about(
        window,
        "About AMP Console",
        "<b>AMP Console</b><br>Device-agnostic mixed-precision training for PyTorch, with live plots.",
    )
