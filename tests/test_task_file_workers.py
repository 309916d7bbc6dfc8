"""A task file's Dataset in DataLoader workers that are started, not forked (spawn and forkserver: macOS's and
Windows' only way, Linux's default from Python 3.14). The file's module is this process's own, not importable by
name, so the worker imports the file before it rebuilds the Dataset (core.tasks.user_tasks)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

import core.tasks as registry

pytestmark = pytest.mark.slow  # each DataLoader starts a worker process

TASK_FILE = Path(__file__).resolve().parent / "fixtures" / "user_tasks" / "dataset_task.py"


@pytest.fixture
def data():
    registry.add_task(f"{TASK_FILE}:RegressionDatasetTask")
    registry.add_task(f"{TASK_FILE}:RegressionStreamTask")
    yield {name: registry.create_task(name).load_data("", 0) for name in ("regression_ds", "regression_stream")}


def test_a_task_files_map_style_dataset_loads_in_a_started_worker(data):
    train = data["regression_ds"].train
    assert type(train).__module__.startswith("amp_console_user_task_")
    with pytest.raises(ModuleNotFoundError):  # what a started worker met before the file was imported there
        _plain_round_trip_elsewhere(train)
    loader = DataLoader(train, batch_size=4, shuffle=False, num_workers=1, multiprocessing_context="spawn")
    batch = next(iter(loader))
    expected = [train[i] for i in range(4)]
    assert torch.equal(batch["x"], torch.stack([row["x"] for row in expected]))
    assert torch.equal(batch["y"], torch.stack([torch.as_tensor(row["y"]) for row in expected]))


def test_a_task_files_stream_loads_in_a_started_worker(data):
    stream = data["regression_stream"].train
    loader = DataLoader(stream, batch_size=8, num_workers=1, multiprocessing_context="forkserver")
    xs = torch.cat([batch["x"] for batch in loader])
    assert torch.equal(xs, torch.stack([row["x"] for row in stream]))  # the whole stream, in order


def _plain_round_trip_elsewhere(obj):
    """What a started process without the file's import would do: look its class up by module name."""
    import sys

    payload = pickle.dumps(obj)
    name = type(obj).__module__
    module = sys.modules.pop(name)
    try:
        return pickle.loads(payload)
    finally:
        sys.modules[name] = module
