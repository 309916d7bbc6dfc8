"""`amp-console predict`: registered by main.py (see register)."""

from __future__ import annotations


def register(sub) -> None:
    """Adds the `predict` command's parser to `sub` (filled in with the command itself)."""
