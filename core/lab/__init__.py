"""The precision lab and tuning, shared by the CLI and the window (no Qt): precision sweep, dtype inspector, LR finder,
batch-size finder, model summary and hyperparameter sweep. Above core.engine, below core.runs.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class ToolResult:
    """What a lab tool's result starts with: the task it measured and the device it ran on."""

    task: str
    task_options: dict
    device: str
    device_name: str

    @staticmethod
    def setting(config, info) -> dict:
        """These fields for `config`'s task on the device `info` (a DeviceInfo)."""
        return dict(task=config.task, task_options=dict(config.task_options), device=info.id, device_name=info.name)

    def to_dict(self) -> dict:
        """Plain JSON-ready dict (the tool's `--json` schema)."""
        return dataclasses.asdict(self)
