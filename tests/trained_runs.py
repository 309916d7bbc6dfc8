"""One small trained run of each task (and the recommender once more on its synthetic data), trained once per
test session and shared, read-only, by the tests that use a trained model (predict, the Predictor, export, the
evaluation report and view, the preview panel, evaluate). Under pytest-xdist each worker is a session of its
own and trains its own set. `digits_run` is the worked example of a user task (docs/examples/digits_task.py)
trained as its docstring says, for the tests that read a trained digits model.

A test that writes into a run folder (an evaluation.json, a deleted best.pt) works on `run.copy_to(tmp_path)`;
the session checks at its end that nothing in the shared folders changed, so test order never matters."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import numpy as np
import pytest
import torch

from core.config import RunConfig
from core.engine.events import RunEnded

# The recommender's file: its own lesson ids (numbers, not 0..n-1), every user walking the cycle
# LESSONS[0] -> LESSONS[1] -> ... -> LESSONS[9] -> LESSONS[0] from a random start, so the next lesson is always
# the one after the last. Users have 4 to 9 lessons: histories of several lengths, and lessons each has not seen.
LESSONS = [5000 + 3 * k for k in range(10)]
USERS = 120

TASK_OPTIONS = {
    "tiny": {},
    # tfidf: the sublinear tf weighting is part of what an export must carry
    "sentiment": {"reviews": 4000, "buckets": 1 << 14, "max_tokens": 64, "weighting": "tfidf"},
    "recommender": {"d_model": 16, "layers": 1, "heads": 2, "max_len": 8, "dropout": 0.0},
    "ranking": {"queries": 200, "docs": 10, "features": 8, "hidden": 16},
}
# The recommender once more, on its synthetic data ("recommender-synthetic"): ids 0..n-1 (no vocabulary: the ids
# are numbers), a catalogue of 200 lessons (more than the 100 negatives of the sampled protocol) and histories
# of many lengths (several history buckets in a report).
SYNTHETIC_RECOMMENDER = {
    "items": 200,
    "track_len": 10,
    "interactions": 6_000,
    "mean_len": 12,
    "max_len": 40,
    "d_model": 16,
    "layers": 1,
    "heads": 2,
}
# tiny: evaluated at step 20 and 40, so its best.pt is a real choice; the others: enough steps for the
# sentiment words' signs and the recommender's cycle to be learnt.
SETTINGS = {
    "tiny": {"max_steps": 40, "eval_interval": 20},
    "sentiment": {"max_steps": 150},
    "recommender": {"max_steps": 60, "batch_size": 16},
    "ranking": {"max_steps": 20},
    "recommender-synthetic": {"max_steps": 40},
}


@dataclass(frozen=True)
class TrainedRun:
    task: str
    folder: Path  # the run's output folder: checkpoint.pt, best.pt, run.json, ...
    ended: RunEnded

    @property
    def checkpoint(self) -> Path:
        """The last checkpoint (RunEnded.checkpoint)."""
        return Path(self.ended.checkpoint)

    def copy_to(self, tmp_path: Path) -> Path:
        """A copy of the run folder under `tmp_path`, for a test that writes into it."""
        return Path(shutil.copytree(self.folder, Path(tmp_path) / f"{self.folder.name}-copy"))


@dataclass(frozen=True)
class TrainedRuns:
    root: Path  # a runs root holding exactly the run folders, named as the runs are
    data: MappingProxyType  # data files the runs were trained on: "recommender" -> the interactions CSV
    runs: MappingProxyType  # "tiny", "sentiment", "recommender", "ranking", "recommender-synthetic" -> TrainedRun

    def __getitem__(self, name: str) -> TrainedRun:
        return self.runs[name]


def write_interactions(path: Path) -> Path:
    rng = np.random.default_rng(0)
    lines = ["user_id,item_id,timestamp"]
    for user in range(USERS):
        start = int(rng.integers(0, len(LESSONS)))
        lines += [f"u{user},{LESSONS[(start + t) % len(LESSONS)]},{1000 + t}" for t in range(4 + user % 6)]
    path.write_text("\n".join(lines) + "\n")
    return path


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file's size and time, every folder's name, but the runs root's index (.history.sqlite: a cache
    that listing the runs may write, core.engine.run_index; .history.outside: the runs a run elsewhere adds to it;
    so the folder's own time may change too)."""
    return {
        str(p.relative_to(root)): (0, 0) if p.is_dir() else (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if not p.name.startswith((".history.sqlite", ".history.outside"))
    }


@pytest.fixture(scope="session")
def trained_runs(tmp_path_factory) -> TrainedRuns:
    """The runs, trained on one thread on the CPU (a few seconds in all)."""
    from core.engine.run_record import RUNS_DIR_ENV
    from core.engine.trainer import train

    base = tmp_path_factory.mktemp("trained-runs")
    root, data = base / "runs", base / "data"
    data.mkdir()
    interactions = write_interactions(data / "interactions.csv")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    runs = {}
    with pytest.MonkeyPatch.context() as patch:  # session fixtures run before the per-test runs root
        patch.setenv(RUNS_DIR_ENV, str(base / "runs-root"))
        try:
            planned = {task: (task, options) for task, options in TASK_OPTIONS.items()}
            planned["recommender-synthetic"] = ("recommender", SYNTHETIC_RECOMMENDER)
            for name, (task, options) in planned.items():
                extra = {"data": str(interactions)} if name == "recommender" else {}
                ended = train(
                    RunConfig.for_task(
                        task,
                        device="cpu",
                        threads=1,
                        task_options=dict(options),
                        out_dir=str(root / name),
                        **SETTINGS[name],
                        **extra,
                    )
                )
                assert ended.status == "completed", ended.message
                runs[name] = TrainedRun(task, root / name, ended)
        finally:
            torch.set_num_threads(threads)
    before = snapshot(base)
    yield TrainedRuns(root, MappingProxyType({"recommender": interactions}), MappingProxyType(runs))
    assert snapshot(base) == before, "a test wrote into the shared trained runs: copy the run first (copy_to)"


@dataclass(frozen=True)
class TrainedExport:
    folder: Path  # what `export_model(run.checkpoint, folder, fmt)` wrote: the only entry of its parent folder
    result: object  # its core.runs.export.ExportResult


@pytest.fixture(scope="session")
def trained_exports(trained_runs, tmp_path_factory):
    """`trained_exports(task, fmt)`: the `fmt` export (fp32) of the shared run's last checkpoint, made on first
    use and shared, read-only (a Python that imports its serve.py must not write bytecode beside it: -B). The
    session checks at its end that nothing in the export folders changed."""
    from core.runs.export import export_model

    base = tmp_path_factory.mktemp("trained-exports")
    made: dict[tuple[str, str], TrainedExport] = {}
    written: dict[tuple[str, str], dict] = {}

    def exported(task: str, fmt: str) -> TrainedExport:
        if (task, fmt) not in made:
            folder = base / f"{task}-{fmt}" / "export"
            result = export_model(trained_runs[task].checkpoint, folder, fmt)
            made[task, fmt] = TrainedExport(folder, result)
            written[task, fmt] = snapshot(folder.parent)
        return made[task, fmt]

    yield exported
    changed = [f"{task}-{fmt}" for (task, fmt), before in written.items() if snapshot(base / f"{task}-{fmt}") != before]
    assert not changed, f"a test wrote into the shared exports {changed}: export a copy of its own"


DIGITS_EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "digits_task.py"


@dataclass(frozen=True)
class DigitsRun:
    root: Path  # a runs root holding the one run folder
    folder: Path
    summary: dict  # what `train --json` said last


@pytest.fixture(scope="session")
def digits_run(tmp_path_factory) -> DigitsRun:
    """docs/examples/digits_task.py trained through the CLI as its docstring says (bf16, --seed 0, its defaults:
    about 10 s on one CPU thread). The task is registered only while it trains: a test that loads the run adds
    the task file itself (within tests/task_registry.py's restored_task_registry)."""
    import contextlib
    import io
    import json

    from task_registry import restored_task_registry

    from core.cli.main import main
    from core.engine.run_record import RUNS_DIR_ENV

    base = tmp_path_factory.mktemp("digits-run")
    folder = base / "runs" / "digits"
    said = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, restored_task_registry(), contextlib.redirect_stdout(said):
        patch.setenv(RUNS_DIR_ENV, str(tmp_path_factory.mktemp("digits-runs-root")))
        code = main(
            [
                "train",
                "--task",
                str(DIGITS_EXAMPLE),
                "--precision",
                "bf16",
                "--seed",
                "0",
                "--out",
                str(folder),
                "--json",
            ]
        )
    assert code == 0, said.getvalue()
    summary = json.loads(said.getvalue().strip().splitlines()[-1])
    before = snapshot(base)
    yield DigitsRun(base / "runs", folder, summary)
    assert snapshot(base) == before, "a test wrote into the shared digits run: copy the run folder first"


@pytest.fixture
def tiny_run(trained_runs):
    """The shared tiny run's RunEnded (read-only: copy the folder before writing into it)."""
    return trained_runs["tiny"].ended


@pytest.fixture
def sentiment_run(trained_runs):
    """The shared sentiment run's RunEnded (read-only: copy the folder before writing into it)."""
    return trained_runs["sentiment"].ended


@pytest.fixture
def recommender_run(trained_runs):
    """The shared recommender run's RunEnded (read-only: copy the folder before writing into it)."""
    return trained_runs["recommender"].ended


@pytest.fixture
def ranking_run(trained_runs):
    """The shared ranking run's RunEnded (read-only: copy the folder before writing into it)."""
    return trained_runs["ranking"].ended
