"""What predict, export and the remote agent take from a run by default is the checkpoint its summary advised
(run.json's best.use, core.engine.run_record.run_checkpoint "advised"): the last weights, with a note saying why,
when its validation split was too small to choose the best by; best.pt otherwise. An explicit best/last wins."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from core.config import RunConfig

ADVISED_LAST = "its summary advised the last weights (checkpoint.pt)"


def train_ranking(folder: Path, queries: int) -> Path:
    """A quick ranking run (80/10/10 by query) evaluating every 10 of 60 steps: 200 queries leave 20 for
    validation, too few to choose by (the summary advises the last weights); 600 leave 60 (it advises best.pt)."""
    from core.engine.trainer import train

    ended = train(
        RunConfig.for_task(
            "ranking",
            task_options={"queries": queries, "docs": 10, "features": 8},
            device="cpu",
            precision="fp32",
            threads=1,
            out_dir=str(folder),
            max_steps=60,
            eval_interval=10,
            log_interval=10,
        )
    )
    assert ended.status == "completed", ended.message
    return folder


@pytest.fixture(scope="module")
def small(tmp_path_factory) -> Path:
    """A run whose summary advised its last weights."""
    folder = train_ranking(tmp_path_factory.mktemp("advised") / "small", queries=200)
    assert json.loads((folder / "run.json").read_text())["best"]["use"] == "checkpoint.pt"
    return folder


@pytest.fixture(scope="module")
def normal(tmp_path_factory) -> Path:
    """A run whose summary advised its best checkpoint."""
    folder = train_ranking(tmp_path_factory.mktemp("advised") / "normal", queries=600)
    assert json.loads((folder / "run.json").read_text())["best"]["use"] == "best.pt"
    return folder


def test_predict_loads_the_advised_checkpoint_by_default_and_says_why(small, normal):
    from core.runs.predict import load_predictor

    advised = load_predictor(small)
    assert advised.checkpoint == small / "checkpoint.pt"
    assert len(advised.notes) == 1 and ADVISED_LAST in advised.notes[0] and "too small" in advised.notes[0]
    best = load_predictor(small, "best")  # asked for: the best, without a note
    assert best.checkpoint == small / "best.pt" and best.notes == []
    assert load_predictor(small, "last").checkpoint == small / "checkpoint.pt"
    plain = load_predictor(normal)
    assert plain.checkpoint == normal / "best.pt" and plain.notes == []


def test_export_of_a_run_folder_takes_the_advised_checkpoint_and_says_why(small, normal, tmp_path):
    from core.runs.export import export_model

    said: list[str] = []
    export_model(small, tmp_path / "small", "safetensors", progress=said.append)
    manifest = json.loads((tmp_path / "small" / "manifest.json").read_text())
    assert Path(manifest["source_checkpoint"]).name == "checkpoint.pt"
    assert any(line.startswith("note: ") and ADVISED_LAST in line for line in said), said

    said.clear()
    export_model(small, tmp_path / "best", "safetensors", progress=said.append, which="best")
    assert Path(json.loads((tmp_path / "best" / "manifest.json").read_text())["source_checkpoint"]).name == "best.pt"
    assert not [line for line in said if line.startswith("note: ")]

    export_model(normal, tmp_path / "normal", "safetensors", progress=said.append)
    assert Path(json.loads((tmp_path / "normal" / "manifest.json").read_text())["source_checkpoint"]).name == "best.pt"


def fetched_manifest(folder: Path, **kwargs) -> dict:
    from core.remote import agent

    out = io.BytesIO()
    agent.fetch(folder, True, io.BytesIO(b'{"send": []}\n'), out, str(folder.parent), **kwargs)
    return json.loads(out.getvalue().splitlines()[0])


def test_the_agent_fetches_the_advised_checkpoint_and_its_note(small, normal):
    manifest = fetched_manifest(small)
    assert [e["name"] for e in manifest["files"] if e["name"].endswith(".pt")] == ["checkpoint.pt"]
    assert len(manifest["notes"]) == 1 and ADVISED_LAST in manifest["notes"][0]
    asked = fetched_manifest(small, which="best")
    assert [e["name"] for e in asked["files"] if e["name"].endswith(".pt")] == ["best.pt"] and "notes" not in asked
    plain = fetched_manifest(normal)
    assert [e["name"] for e in plain["files"] if e["name"].endswith(".pt")] == ["best.pt"] and "notes" not in plain
