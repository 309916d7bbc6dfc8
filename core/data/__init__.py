"""Data: synthetic generators, file importers and on-device batching."""
