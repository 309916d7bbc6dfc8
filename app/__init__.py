"""AMP Console desktop shell (PySide6): widgets over the `core` engine.

Layers, data flow and where to add a panel: docs/ARCHITECTURE.md.
"""
