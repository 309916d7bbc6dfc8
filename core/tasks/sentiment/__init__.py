"""The sentiment task: its training (task.py) and serving parts together."""
