"""Data: synthetic generators, file importers and on-device batching.

Below core.tasks, above the shared leaves (docs/ARCHITECTURE.md).
"""
