"""Issue 44 item 4: a run whose loss goes non-finite names the module and offers re-runs that may cure it."""

from __future__ import annotations

import torch

from core.engine.events import RunEnded
from core.engine.trainer import train

# lr tops out at 10, where the tiny task's loss grows without reaching inf soon: fc1 overflows from step 12 on.
DIVERGE = {
    "precision": "bf16",
    "lr": 10,
    "optimizer": "sgd",
    "max_steps": 40,
    "log_interval": 5,
    "checkpoint_interval": 5,
}


def overflow_fc1(monkeypatch) -> None:
    original, calls = torch.nn.Linear.forward, {"n": 0}

    def forward(self, x):
        out = original(self, x)
        if self.out_features == 16 and self.training:
            calls["n"] += 1
            out = out * float("inf") if calls["n"] > 12 else out
        return out

    monkeypatch.setattr(torch.nn.Linear, "forward", forward)


def diverged(tiny_config, recorder, monkeypatch, **overrides) -> RunEnded:
    overflow_fc1(monkeypatch)
    ended = train(tiny_config(**{**DIVERGE, **overrides}, eval_interval=10**6), sink=recorder)
    assert ended.status == "failed", ended.message
    return ended


def test_bf16_divergence_names_the_module_and_offers_fixes(tiny_config, recorder, monkeypatch):
    ended = diverged(tiny_config, recorder, monkeypatch)
    assert "first produced by module fc1" in ended.message and ended.checkpoint
    labels = [fix["label"] for fix in ended.fixes]
    assert len(labels) >= 2 and labels[0].startswith("lower LR") and labels[1].startswith("fp32")
    folder = tiny_config().out_dir
    lower = ended.fixes[0]
    assert lower["changes"] == {"lr": 1.0, "out_dir": f"{folder}-lr-div10"}
    assert lower["resume"] == ended.checkpoint and lower["note"] == f"rerun_of: {folder}, fix: {labels[0]}"
