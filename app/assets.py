"""Stylesheet, icons and presets from the `resources` package (importlib.resources), and the palette."""

from __future__ import annotations

from functools import cache
from importlib import resources

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QIcon, QPalette


def _resource(*parts: str):
    return resources.files("resources").joinpath(*parts)


@cache
def icon(name: str) -> QIcon:
    """An SVG icon from resources/icons (rendered at any size by Qt's svg plugin)."""
    with resources.as_file(_resource("icons", f"{name}.svg")) as path:
        return QIcon(str(path))


def presets() -> dict[str, str]:
    """Preset name -> TOML text, for the File > Presets menu."""
    folder = _resource("presets")
    return {
        entry.name.removesuffix(".toml"): entry.read_text(encoding="utf-8")
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".toml")
    }


def dark_palette() -> QPalette:
    """A Fusion dark palette, for platforms whose theme reports dark but hands Qt a light palette."""
    palette = QPalette()
    colours = {
        QPalette.ColorRole.Window: "#2b2d31",
        QPalette.ColorRole.WindowText: "#e6e6e6",
        QPalette.ColorRole.Base: "#1f2023",
        QPalette.ColorRole.AlternateBase: "#2b2d31",
        QPalette.ColorRole.Text: "#e6e6e6",
        QPalette.ColorRole.Button: "#35373c",
        QPalette.ColorRole.ButtonText: "#e6e6e6",
        QPalette.ColorRole.Highlight: "#3b6fd8",
        QPalette.ColorRole.HighlightedText: "#ffffff",
        QPalette.ColorRole.ToolTipBase: "#35373c",
        QPalette.ColorRole.ToolTipText: "#e6e6e6",
        QPalette.ColorRole.PlaceholderText: "#9a9ca3",
        QPalette.ColorRole.Mid: "#4a4d54",
        QPalette.ColorRole.Link: "#7aa2f7",
    }
    for role, colour in colours.items():
        palette.setColor(role, QColor(colour))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText, QPalette.ColorRole.WindowText):
        palette.setColor(QPalette.ColorGroup.Disabled, role, QColor("#7c7f87"))
    return palette


def apply_theme(app) -> None:
    """Fusion style, our stylesheet, and a dark palette when the system asks for dark."""
    app.setStyle("Fusion")
    if QGuiApplication.styleHints().colorScheme() == Qt.ColorScheme.Dark:
        app.setPalette(dark_palette())
    else:
        app.setPalette(app.style().standardPalette())
    app.setStyleSheet(_resource("style.qss").read_text(encoding="utf-8"))


def restyle(widget, **properties):
    """`widget` with these dynamic properties (role="hint", invalid=True...), re-polished on a change."""
    changed = [name for name, value in properties.items() if widget.property(name) != value]
    for name in changed:
        widget.setProperty(name, properties[name])
    if changed:
        widget.style().unpolish(widget)
        widget.style().polish(widget)
    return widget
