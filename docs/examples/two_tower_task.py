"""A two-tower recommender: a user tower and an item tower (methods `user_vec`, `item_vec` of the model), trained
with in-batch negatives on generated interactions (users pick items near their hidden tastes), dict batches
{"user", "item"}, its own optimizer (Adagrad) and torchmetrics retrieval metrics (MRR, NDCG@10) over every item.
Under --nproc 2 the loss still calls the model's own methods. Served from its two declared inputs: model(user,
item) is the pair's score.

    amp-console train --task docs/examples/two_tower_task.py --nproc 2 --out runs/two_tower
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from core.tasks.base import EvalParts, Task, TaskData, TaskOption, iter_slices
from core.tasks.serving import Input


class TwoTower(nn.Module):
    def __init__(self, users: int, items: int, dim: int):
        super().__init__()
        self.users, self.items = nn.Embedding(users, dim), nn.Embedding(items, dim)
        self.user_mlp, self.item_mlp = nn.Linear(dim, dim), nn.Linear(dim, dim)

    def user_vec(self, user: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.user_mlp(self.users(user)).float(), dim=-1)

    def item_vec(self, item: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.item_mlp(self.items(item)).float(), dim=-1)

    def forward(self, user: torch.Tensor, item: torch.Tensor) -> torch.Tensor:
        return (self.user_vec(user) * self.item_vec(item)).sum(-1)


class TwoTowerTask(Task):
    name = "two_tower"
    description = "a two-tower recommender with in-batch negatives on generated interactions"
    options = (
        TaskOption("dim", 32, "embedding width of each tower", 2, 1024),
        TaskOption("users", 400, "generated users", 10, 1_000_000, synthetic=True),
        TaskOption("items", 200, "generated items", 10, 1_000_000, synthetic=True),
    )
    defaults = {"batch_size": 128, "epochs": 10}
    primary_metric = "ndcg"
    inputs = (Input("user", "int64"), Input("item", "int64"))
    temperature = 0.1

    def load_data(self, data_path: str, seed: int) -> TaskData:
        gen = torch.Generator().manual_seed(seed)
        users, items = self.opts["users"], self.opts["items"]
        taste, kind = torch.randn(users, 4, generator=gen), torch.randn(items, 4, generator=gen)
        user = torch.randint(0, users, (users * 20,), generator=gen)
        item = torch.multinomial((3 * taste[user] @ kind.T).softmax(-1), 1, generator=gen).squeeze(1)
        a, b = int(0.8 * len(user)), int(0.9 * len(user))
        return TaskData(
            train={"user": user[:a], "item": item[:a]},
            val={"user": user[a:b], "item": item[a:b], "row": torch.arange(a, b)},  # row: a query's id
            test={"user": user[b:], "item": item[b:], "row": torch.arange(b, len(user))},
            info={"users": users, "items": items},
        )

    def build_model(self, info: dict) -> nn.Module:
        return TwoTower(info.get("users", self.opts["users"]), info.get("items", self.opts["items"]), self.opts["dim"])

    def configure_optimizers(self, model: nn.Module, cfg):
        return torch.optim.Adagrad(model.parameters(), lr=0.1)

    def metric_objects(self):
        from torchmetrics.retrieval import RetrievalMRR, RetrievalNormalizedDCG

        return {"mrr": RetrievalMRR(), "ndcg": RetrievalNormalizedDCG(top_k=10)}

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        scores = model.user_vec(batch["user"]) @ model.item_vec(batch["item"]).T / self.temperature
        return F.cross_entropy(scores, torch.arange(len(scores), device=scores.device))  # the others: negatives

    def evaluate_parts(self, model: nn.Module, split: dict[str, torch.Tensor], batch_size: int) -> EvalParts:
        total = torch.zeros((), dtype=torch.float64, device=split["user"].device)
        every = model.item_vec(torch.arange(model.items.num_embeddings, device=total.device))
        for batch in iter_slices(split, batch_size):
            scores = model.user_vec(batch["user"]) @ every.T  # each row against every item
            hit = F.one_hot(batch["item"], len(every)).bool()
            total += self.loss(model, batch).double() * len(scores)
            self.update_metrics(scores, hit, indexes=batch["row"][:, None].expand_as(scores))
        return EvalParts(sums={"loss": total, "rows": torch.tensor(float(len(split["user"])), device=total.device)})

    def metrics(self, parts: EvalParts) -> dict[str, float]:
        return {"loss": float(parts.sums["loss"]) / max(float(parts.sums["rows"]), 1.0)}
