"""Shared fixtures for engine tests (no Qt here: GUI fixtures live in tests/gui/conftest.py)."""

from __future__ import annotations

import pytest
import torch

from core.config import RunConfig
from core.engine.events import Event


class Recorder:
    """A sink that keeps every event, with helpers to pick them by type."""

    def __init__(self):
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    def of(self, kind: type) -> list:
        """The events of class `kind` (`recorder.of(StepMetrics)`), in order."""
        return [e for e in self.events if isinstance(e, kind)]


@pytest.fixture(autouse=True)
def runs_root_in_tmp(tmp_path_factory, monkeypatch):
    """A run with no output folder goes under the runs root: in tests, a temporary folder, never the user's
    data folder (subprocesses inherit it through the environment)."""
    from core.engine.run_record import RUNS_DIR_ENV

    root = tmp_path_factory.mktemp("runs-root")
    monkeypatch.setenv(RUNS_DIR_ENV, str(root))
    return root


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def tiny_config(tmp_path):
    """A fast tiny-task config writing into a temporary folder."""

    def make(**overrides) -> RunConfig:
        values = {"device": "cpu", "precision": "fp32", "out_dir": str(tmp_path / "run"), "log_interval": 5}
        values.update(overrides)
        return RunConfig.for_task("tiny", **values)

    return make


@pytest.fixture
def one_intra_op_thread():
    """Train on one thread: on a 2-core machine shared with other jobs, two OpenMP threads that wait for
    each other at every op were measured 5-10x slower; the results do not depend on the thread count."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
