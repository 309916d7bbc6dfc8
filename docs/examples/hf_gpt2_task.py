"""A Hugging Face GPT-2 character model built from a small GPT2Config (nothing is downloaded; `pip install
transformers`), trained on generated text with its own AdamW and warm-up schedule (transformers') and a torchmetrics
Perplexity. Served from its declared input: token ids of any length, padded with 0; the answer is the next-token
logits at every position.

    amp-console train --task docs/examples/hf_gpt2_task.py --precision bf16 --out runs/hf_gpt2
    amp-console export runs/hf_gpt2 --task docs/examples/hf_gpt2_task.py --out runs/hf_gpt2/export
"""

from __future__ import annotations

import random

import torch
from torch import nn
from torch.nn import functional as F

from core.tasks.base import EvalParts, Task, TaskData, TaskOption, iter_slices
from core.tasks.serving import Input

WORDS = "the a cat dog bird sees chases likes small big red quick lazy and".split()
VOCAB = sorted(set(" .".join(WORDS)))  # token id = index + 1; 0 is padding


class CharGPT2(nn.Module):
    """GPT2LMHeadModel reading token ids, giving logits (a LightningModule's forward)."""

    def __init__(self, layers: int, width: int, context: int):
        super().__init__()
        from transformers import GPT2Config, GPT2LMHeadModel

        self.gpt2 = GPT2LMHeadModel(
            GPT2Config(vocab_size=len(VOCAB) + 1, n_positions=context, n_layer=layers, n_head=2, n_embd=width,
                       bos_token_id=None, eos_token_id=None)
        )  # fmt: skip

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.gpt2(input_ids=ids).logits


class HfGpt2Task(Task):
    name = "hf_gpt2"
    description = "a Hugging Face GPT-2 (from a small GPT2Config) on generated text, character by character"
    options = (
        TaskOption("layers", 2, "transformer blocks", 1, 48),
        TaskOption("width", 64, "embedding width (n_embd)", 8, 4096),
        TaskOption("seq", 32, "characters per training sequence", 4, 1024),
        TaskOption("samples", 1024, "training sequences", 32, 1_000_000, synthetic=True),
    )
    defaults = {"batch_size": 32, "epochs": 3}
    primary_metric = "perplexity"
    tokens_key = "ids"  # throughput counts its non-zero ids as tokens
    inputs = (Input("ids", "int64", ("seq",), pad=0, meaning="character ids, 0 pads"),)

    def load_data(self, data_path: str, seed: int) -> TaskData:
        rng = random.Random(seed)
        text = ". ".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 7))) for _ in range(2000))
        ids, seq = torch.tensor([VOCAB.index(c) + 1 for c in text]), self.opts["seq"]
        starts = torch.randint(
            0, len(ids) - seq, (self.opts["samples"],), generator=torch.Generator().manual_seed(seed)
        )
        rows = torch.stack([ids[s : s + seq] for s in starts.tolist()])
        cut = int(0.9 * len(rows))
        return TaskData(train={"ids": rows[:cut]}, val={"ids": rows[cut:]})

    def build_model(self, info: dict) -> nn.Module:
        return CharGPT2(self.opts["layers"], self.opts["width"], max(64, self.opts["seq"]))

    def configure_optimizers(self, model: nn.Module, cfg):
        from transformers import get_constant_schedule_with_warmup

        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, betas=(0.9, 0.95))
        return optimizer, get_constant_schedule_with_warmup(optimizer, num_warmup_steps=20)

    def metric_objects(self):
        from torchmetrics.text import Perplexity

        return {"perplexity": Perplexity(ignore_index=0)}

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        logits = model(batch["ids"][:, :-1]).float()
        return F.cross_entropy(logits.flatten(0, 1), batch["ids"][:, 1:].flatten(), ignore_index=0)

    def evaluate_parts(self, model: nn.Module, split: dict[str, torch.Tensor], batch_size: int) -> EvalParts:
        total = torch.zeros((), dtype=torch.float64, device=split["ids"].device)
        for batch in iter_slices(split, batch_size):
            logits = model(batch["ids"][:, :-1]).float()
            total += F.cross_entropy(logits.flatten(0, 1), batch["ids"][:, 1:].flatten(), reduction="sum").double()
            self.update_metrics(logits, batch["ids"][:, 1:])
        tokens = torch.tensor(float(split["ids"][:, 1:].numel()), dtype=torch.float64, device=total.device)
        return EvalParts(sums={"loss": total, "tokens": tokens})

    def metrics(self, parts: EvalParts) -> dict[str, float]:
        return {"loss": float(parts.sums["loss"]) / max(float(parts.sums["tokens"]), 1.0)}
