"""The ranking task: its training (task.py) and serving parts together."""
