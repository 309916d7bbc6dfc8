"""File -> Resume (the history's Resume too) of a recommender run saved before loss=auto: its saved options have
no `loss`, it trained with the full softmax, and the window resumes it with the full softmax, its form and the
resumed run's records saying so, even where auto would now choose the sampled one."""

from __future__ import annotations

import pytest
import torch
from gui_helpers import find

from core.config import RunConfig
from core.engine.checkpoints import save_checkpoint
from core.engine.trainer import train
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


@pytest.mark.timeout(120)
def test_the_window_resumes_an_old_run_with_the_full_softmax(qtbot, window, tmp_path, monkeypatch):
    monkeypatch.setattr(recommender, "SAMPLED_LOSS_ABOVE", SMALL["items"] - 1)  # auto: the sampled softmax
    folder = tmp_path / "run"
    config = RunConfig.from_dict(
        {
            "task": "recommender",
            "task_options": {**SMALL, "loss": "full"},
            "device": "cpu",
            "batch_size": 32,
            "max_steps": 3,
            "out_dir": str(folder),
        }
    )
    assert train(config).status == "completed"
    checkpoint = folder / "checkpoint.pt"
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)
    del state["config"]["task_options"]["loss"]  # as a run saved before loss=auto wrote it
    state["config"]["max_steps"] = 6  # room to train on
    save_checkpoint(checkpoint, state)

    sampled = []
    original = recommender.RecommenderTask._sampled_softmax
    monkeypatch.setattr(
        recommender.RecommenderTask,
        "_sampled_softmax",
        lambda self, *a, **k: sampled.append(1) or original(self, *a, **k),
    )
    find(window, "separateProcessCheck").setChecked(False)  # on this thread: the patches above apply
    window.file_actions.resume(str(checkpoint))
    qtbot.waitUntil(lambda: "resumed at step 3" in window.logPanel.toPlainText(), timeout=60_000)
    qtbot.waitUntil(lambda: not window.controller.running, timeout=60_000)
    assert window.setupPanel.config().task_options["loss"] == "full"
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    assert saved["step"] == 6 and saved["config"]["task_options"]["loss"] == "full"
    assert not sampled
