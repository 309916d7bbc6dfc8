"""A recommender run saved before loss=auto (its task options have no `loss`: it trained with the full softmax)
resumes, evaluates and exports with the full softmax; a run started now records the loss auto chose and keeps
it when resumed. The catalogue is small: the sampled-loss threshold is lowered under it instead."""

from __future__ import annotations

import json

import pytest
import tomllib
import torch

from core.config import RunConfig
from core.engine.checkpoints import load_checkpoint, rebuild_model, save_checkpoint
from core.engine.events import RunStarted
from core.engine.run_record import load_record, read_run
from core.engine.trainer import train
from core.tasks import option_values
from core.tasks.recommender import task as recommender

SMALL = {
    "items": 200,
    "track_len": 10,
    "interactions": 6_000,
    "mean_len": 20,
    "max_len": 20,
    "d_model": 16,
    "layers": 1,
    "sampled_negatives": 32,
}
SETTINGS = {"task": "recommender", "device": "cpu", "batch_size": 32, "log_interval": 1, "eval_interval": 0}


@pytest.fixture
def losses(monkeypatch):
    """Auto's threshold under the small catalogue (auto = sampled), and the losses each step computes."""
    monkeypatch.setattr(recommender, "SAMPLED_LOSS_ABOVE", SMALL["items"] - 1)
    calls: list[str] = []
    full, sampled = recommender.chunked_softmax_cross_entropy, recommender.RecommenderTask._sampled_softmax

    def counted_full(*args, **kwargs):
        calls.append("full")
        return full(*args, **kwargs)

    def counted_sampled(self, *args, **kwargs):
        calls.append("sampled")
        return sampled(self, *args, **kwargs)

    monkeypatch.setattr(recommender, "chunked_softmax_cross_entropy", counted_full)
    monkeypatch.setattr(recommender.RecommenderTask, "_sampled_softmax", counted_sampled)
    return calls


def _run(folder, options: dict, steps: int, resume=None, events=None) -> None:
    config = RunConfig.from_dict({**SETTINGS, "task_options": options, "max_steps": steps, "out_dir": str(folder)})
    ended = train(config, sink=(events.append if events is not None else None), resume_from=resume)
    assert ended.status == "completed", ended.message


def _saved_options(folder) -> dict:
    """The task options the run folder's three records hold: checkpoint, run.json, config.toml (as written)."""
    state = torch.load(folder / "checkpoint.pt", map_location="cpu", weights_only=True)
    record = json.loads((folder / "run.json").read_text())
    toml = tomllib.loads((folder / "config.toml").read_text())
    return {
        "checkpoint": state["config"]["task_options"],
        "run.json": record["config"]["task_options"],
        "config.toml": toml.get("task_options", {}),
    }


def _make_old(folder) -> None:
    """The run folder as a run saved before loss=auto wrote it: no `loss` in any saved config."""
    state = torch.load(folder / "checkpoint.pt", map_location="cpu", weights_only=True)
    state["config"]["task_options"].pop("loss", None)
    save_checkpoint(folder / "checkpoint.pt", state)
    record = json.loads((folder / "run.json").read_text())
    record["config"]["task_options"].pop("loss", None)
    (folder / "run.json").write_text(json.dumps(record))
    toml = (folder / "config.toml").read_text()
    (folder / "config.toml").write_text(
        "\n".join(line for line in toml.splitlines() if not line.strip().startswith("loss")) + "\n"
    )
    assert all("loss" not in options for options in _saved_options(folder).values())


@pytest.fixture
def old_run(tmp_path, losses):
    """A 3-step run of the small catalogue made into one saved before loss=auto."""
    folder = tmp_path / "run"
    _run(folder, SMALL, 3)
    _make_old(folder)
    losses.clear()
    return folder


def test_a_new_run_records_the_loss_auto_chose(tmp_path, losses):
    events: list = []
    _run(tmp_path / "run", SMALL, 2, events=events)
    assert set(losses) == {"sampled"}
    saved = _saved_options(tmp_path / "run")
    assert {where: options.get("loss") for where, options in saved.items()} == dict.fromkeys(saved, "sampled")
    started = next(e for e in events if isinstance(e, RunStarted))
    assert started.config["task_options"]["loss"] == "sampled"
    assert any("loss=auto trains with the sampled softmax" in note for note in started.notes)


def test_a_resumed_new_run_keeps_its_loss_when_auto_would_now_choose_another(tmp_path, losses, monkeypatch):
    folder = tmp_path / "run"
    _run(folder, SMALL, 2)
    monkeypatch.setattr(recommender, "SAMPLED_LOSS_ABOVE", 10_000)  # today's auto: the full softmax
    losses.clear()
    _run(folder, {**SMALL, "loss": "auto"}, 4, resume=folder / "checkpoint.pt")
    assert losses and set(losses) == {"sampled"}
    assert {o.get("loss") for o in _saved_options(folder).values()} == {"sampled"}


def test_an_old_run_resumed_from_the_cli_trains_with_the_full_softmax(old_run, losses, capsys):
    from core.cli.main import main

    assert main(["train", "--resume", str(old_run / "checkpoint.pt"), "--max-steps", "5", "--threads", "1"]) == 0
    assert losses and set(losses) == {"full"}, losses
    saved = _saved_options(old_run)
    assert {where: options.get("loss") for where, options in saved.items()} == dict.fromkeys(saved, "full")
    assert "loss=auto" not in capsys.readouterr().err
    assert not any("loss=auto" in note for note in read_run(old_run)["notes"])


def test_an_old_run_resumed_with_an_auto_config_keeps_the_full_softmax(old_run, losses):
    """A caller whose config leaves loss at its default (auto), as the window's form would: the checkpoint's
    loss wins, and the run's notes say so."""
    events: list = []
    _run(old_run, {**SMALL, "loss": "auto"}, 5, resume=old_run / "checkpoint.pt", events=events)
    assert losses and set(losses) == {"full"}, losses
    notes = next(e for e in events if isinstance(e, RunStarted)).notes
    assert any("task option loss=full as its run trained" in note for note in notes), notes
    assert not any("loss=auto trains" in note for note in notes), notes
    assert {o.get("loss") for o in _saved_options(old_run).values()} == {"full"}


def test_every_reader_of_an_old_run_sees_the_full_softmax(old_run, losses, tmp_path):
    """What the window's resume puts in its form (the checkpoint's config), the history, a sweep's 'train
    longer' (run.json), and evaluate / predict / export's rebuilt task."""
    from core.lab.sweep.table import continue_config

    state = load_checkpoint(old_run / "checkpoint.pt")
    assert state["config"]["task_options"]["loss"] == "full"
    assert RunConfig.from_dict(state["config"]).task_options["loss"] == "full"
    assert read_run(old_run)["config"]["task_options"]["loss"] == "full"
    assert load_record(old_run)["config"]["task_options"]["loss"] == "full"
    config, _checkpoint = continue_config(
        {"folder": str(old_run), "checkpoint": str(old_run / "checkpoint.pt"), "max_steps": 3}
    )
    assert config.task_options["loss"] == "full"
    task, model = rebuild_model(state, old_run / "checkpoint.pt")
    assert task.opts["loss"] == "full"
    data = task.load_data("", 0)
    task.loss(model, {k: v[:8] for k, v in data.train.items()})
    assert losses == ["full"]


def test_the_old_default_is_only_for_saved_configs():
    """A new config without `loss` is auto; only a saved one reads as the full softmax it trained with."""
    from core.tasks import saved_config

    assert option_values("recommender", {})["loss"] == "auto"
    assert RunConfig.for_task("recommender").task_options.get("loss", "auto") == "auto"
    old = {"task": "recommender", "task_options": {"d_model": 16}}
    assert saved_config(old)["task_options"] == {"d_model": 16, "loss": "full"}
    assert saved_config({"task": "recommender", "task_options": {"loss": "sampled"}})["task_options"] == {
        "loss": "sampled"
    }
    assert saved_config({"task": "tiny", "task_options": {}})["task_options"] == {}
