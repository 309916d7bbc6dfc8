"""Stylesheet, SVG icons and preset run configs of the desktop app (read with importlib.resources)."""
