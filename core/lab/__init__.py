"""Tools over the engine that teach what mixed precision does: the precision sweep and the dtype inspector.

Sits above core.engine and below core.cli. See docs/ARCHITECTURE.md.
"""
