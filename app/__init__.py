"""AMP Console desktop shell (PySide6): widgets over the `core` engine."""
