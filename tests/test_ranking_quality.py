"""Ranking quality: feature normalisation (fit on train, carried by checkpoints and exports), the NDCG-aware
losses (padding-aware, float32 under autocast, pushing relevant candidates up), the LETOR-shaped generator."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.config import RunConfig
from core.data.synthetic import GRADE_SHARES, generate_ranking
from core.engine.trainer import train
from core.errors import ConfigError, DataError
from core.tasks import create_task
from core.tasks.ranking.losses import LOSSES, approx_ndcg_loss, lambda_loss
from core.tasks.ranking.task import QUANTILES, FeatureNormalizer, fit_normalizer, quantile_gauss, ranking_metrics

SMALL = {"queries": 300, "docs": 12, "features": 40, "hidden": 16}


def _normalise(stats: dict, x: np.ndarray) -> torch.Tensor:
    norm = FeatureNormalizer(x.shape[1], QUANTILES if "knots" in stats else 0)
    for name, values in stats.items():
        getattr(norm, name).copy_(torch.tensor(values))
    return norm(torch.from_numpy(x))


def test_generator_is_letor_shaped():
    data = generate_ranking(400, 25, 136, noise=0.5, seed=3)
    sizes = np.bincount(data.query)
    assert len(data.query) == 400 * 25 and sizes.min() >= 2 and sizes.max() > 2 * sizes.min()
    assert np.allclose(np.bincount(data.label, minlength=5) / len(data.label), GRADE_SHARES, atol=0.01)
    x = data.features
    spread = np.abs(x).max(0)
    assert spread.max() / max(spread[spread > 0].min(), 1e-9) > 1e4  # mixed scales
    assert (x.std(0) == 0).sum() >= 3  # constant columns, as in LETOR data
    assert ((x >= 0).all(0) & (np.abs(x - np.round(x)) == 0).all(0) & (x.max(0) > 50)).any()  # heavy counts
    means = [data.relevance[data.label == g].mean() for g in range(5)]
    assert means == sorted(means)
    again = generate_ranking(400, 25, 136, noise=0.5, seed=3)
    assert np.array_equal(again.features, x)  # seeded
    few = generate_ranking(50, 2, 2, noise=0.0, seed=0)  # the smallest options still work
    assert few.features.shape == (100, 2) and (np.bincount(few.query) == 2).all()


@pytest.mark.parametrize("method", ["quantile", "asinh", "standard"])
def test_normalizer_standardises_and_maps_constant_columns_to_zero(method):
    rng = np.random.default_rng(0)
    x = np.stack(
        [
            rng.lognormal(3, 2, 5000),
            np.full(5000, 7.5),
            rng.poisson(0.02, 5000),
            rng.normal(1e3, 1e-2, 5000),
            (rng.random(5000) < 0.1) * 1.0,
        ],
        axis=1,
    ).astype(np.float32)
    stats = fit_normalizer(x, method)
    y = _normalise(stats, x).numpy()
    assert np.isfinite(y).all()
    assert np.abs(y[:, 1]).max() == 0.0  # the constant column carries nothing, without dividing by 0
    for j in (0, 2, 3, 4):
        assert abs(y[:, j].mean()) < 1e-3 and y[:, j].std() == pytest.approx(1.0, abs=1e-3)
    if method in ("asinh", "quantile"):  # the heavy tail is tamed: no log-normal value ends far out
        assert np.abs(y[:, 0]).max() < 6


def test_quantile_normalizer_straightens_each_columns_own_curve():
    """A monotone transform of a Gaussian comes back Gaussian and in the same order; tied values (a binary or
    sparse column) share the middle of their run; values beyond the training range stay at its ends."""
    rng = np.random.default_rng(1)
    z = rng.standard_normal(20000)
    x = np.stack([np.exp(3 * z), np.logaddexp(0, 1.5 * z) * 100, 1 / (1 + np.exp(-z)), (z > 1.0) * 1.0], axis=1).astype(
        np.float32
    )
    stats = fit_normalizer(x, "quantile")
    y = _normalise(stats, x).numpy()
    for j in range(3):  # each curve undone: the values are z again, whatever the column's scale and shape
        assert np.corrcoef(y[:, j], z)[0, 1] > 0.999
        assert (np.diff(y[np.argsort(x[:, j], kind="stable"), j]) >= -1e-6).all()  # order kept
    assert len(np.unique(y[:, 3])) == 2 and y[x[:, 3] == 1.0, 3].min() > y[x[:, 3] == 0.0, 3].max()
    knots = torch.tensor(stats["knots"])
    beyond = quantile_gauss(torch.tensor([[1e12, 1e12, 5.0, 7.0], [-1.0, -1.0, -5.0, -7.0]]), knots)
    ends = quantile_gauss(knots[:, [-1, 0]].t().contiguous(), knots)
    assert torch.isfinite(beyond).all() and torch.allclose(beyond[:, :3], ends[:, :3])
    assert fit_normalizer(x[:0], "quantile")["knots"] == [[0.0] * QUANTILES] * 4  # no rows: still the shape


def test_non_finite_features_are_refused_naming_the_column():
    x = np.ones((10, 3), dtype=np.float32)
    x[4, 2] = np.nan
    with pytest.raises(DataError, match="feature column f3 .*NaN"):
        fit_normalizer(x, "asinh")
    assert fit_normalizer(x, "none")["std"] == [1.0, 1.0, 1.0]


def test_normalizer_is_fit_on_the_training_split_only():
    task = create_task("ranking", SMALL)
    data = task.load_data("", 0)
    train_rows = data.train["features"][data.train["label"] >= 0].numpy()
    assert task.opts["normalize"] == "quantile"  # the default
    assert data.info["normalizer"] == fit_normalizer(train_rows, "quantile", 0)
    every = torch.cat([s["features"][s["label"] >= 0] for s in (data.train, data.val, data.test)]).numpy()
    assert data.info["normalizer"] != fit_normalizer(every, "quantile", 0)
    model = task.build_model(data.info)
    assert torch.equal(model.norm.knots, torch.tensor(data.info["normalizer"]["knots"]))
    asinh = create_task("ranking", {**SMALL, "normalize": "asinh"})
    assert asinh.load_data("", 0).info["normalizer"] == fit_normalizer(train_rows, "asinh", 0)


@pytest.mark.parametrize("normalize", ["quantile", "asinh"])
def test_checkpoint_resume_and_export_carry_the_normalizer(tmp_path, normalize):
    from safetensors.torch import load_file

    from core.engine.checkpoints import export_checkpoint, load_checkpoint, load_model_state

    options = {**SMALL, "normalize": normalize}
    config = RunConfig.for_task(
        "ranking", task_options=options, device="cpu", precision="fp32", max_steps=4, out_dir=str(tmp_path / "run")
    )
    ended = train(config)
    assert ended.status == "completed", ended.message
    state = load_checkpoint(ended.checkpoint)
    identity = {"norm.knots": 0.0, "norm.scale": 1.0}  # what an unfitted normaliser holds
    fitted = "norm.knots" if normalize == "quantile" else "norm.scale"
    assert torch.count_nonzero(state["model"][fitted] != identity[fitted]) > 0  # fitted statistics
    assert ("norm.knots" in state["model"]) == (normalize == "quantile")
    task = create_task("ranking", options)
    data = task.load_data("", 0)
    saved = task.build_model(state["data_info"]).eval()
    load_model_state(saved, state["model"], "checkpoint")
    bare = task.build_model({"features": SMALL["features"]}).eval()  # identity normaliser until the state loads
    load_model_state(bare, state["model"], "checkpoint")
    with torch.no_grad():
        assert torch.equal(saved(data.test["features"]), bare(data.test["features"]))
        assert task.evaluate(saved, data.test, 64) == ended.test_metrics
    resumed = train(config.replace(max_steps=6), resume_from=ended.checkpoint)
    assert resumed.status == "completed" and resumed.step == 6
    assert torch.equal(load_checkpoint(resumed.checkpoint)["model"]["norm.center"], state["model"]["norm.center"])
    _, weights, _ = export_checkpoint(ended.checkpoint, tmp_path / "export" / "model")
    exported = load_file(str(weights))
    for name in ("center", "scale", "curve", "mean", "std", *(["knots"] if normalize == "quantile" else [])):
        assert torch.equal(exported[f"norm.{name}"], state["model"][f"norm.{name}"])


def test_input_dropout_drops_features_only_while_training():
    task = create_task("ranking", {**SMALL, "input_dropout": 0.5, "dropout": 0.0})
    model = task.build_model({"features": SMALL["features"]})
    assert set(model.state_dict()) == set(
        create_task("ranking", SMALL).build_model({"features": SMALL["features"]}).state_dict()
    )  # no weights: checkpoints keep their keys
    x = torch.randn(2, 6, SMALL["features"])
    model.eval()
    assert torch.equal(model(x), model(x))
    model.train()
    torch.manual_seed(0)
    assert not torch.equal(model(x), model(x))
    model.input_drop.p = 0.0
    assert torch.equal(model(x), model.eval()(x))


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_losses_ignore_padding(name):
    loss = LOSSES[name]
    torch.manual_seed(0)
    scores = torch.randn(3, 5)
    label = torch.tensor([[0, 2, 1, 0, 4], [1, 0, 0, 3, 0], [0, 0, 0, 0, 0]])
    padded_scores = torch.cat([scores, torch.tensor([[50.0, -50.0], [0.0, 3.0], [9.0, 9.0]])], dim=1)
    padded_label = torch.cat([label, torch.full((3, 2), -1)], dim=1)
    assert float(loss(padded_scores, padded_label)) == pytest.approx(float(loss(scores, label)), rel=1e-6)
    half = torch.tensor([[0.5, 0.0, 0.2, -1.0, 0.1], [0.0, 1.0, -1.0, 0.5, 2.0], [0.0] * 5])
    padded_label[0, 3:] = -1  # a shorter query in the same batch: its padding is masked too
    assert torch.isfinite(loss(half, padded_label[:, :5]))


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_losses_are_float32_under_bf16_autocast(name):
    scores = torch.randn(4, 6).bfloat16()
    label = torch.randint(0, 5, (4, 6))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        value = LOSSES[name](scores, label)
    assert value.dtype == torch.float32
    assert float(value) == pytest.approx(float(LOSSES[name](scores.float(), label)), rel=1e-6)


@pytest.mark.parametrize("loss", [lambda_loss, approx_ndcg_loss])
def test_ndcg_losses_push_the_relevant_candidate_up(loss):
    label = torch.tensor([[0, 0, 0, 3, 1, -1]])
    scores = torch.tensor([[2.0, 1.5, 1.0, 0.5, 0.0, 9.0]], requires_grad=True)
    loss(scores, label).backward()
    grad = scores.grad[0]
    assert grad[3] < 0 and grad[3] < grad[4]  # descent raises the best candidate most
    assert (grad[:3] > 0).all() and grad[5] == 0  # lowers the irrelevant ones above it; padding gets nothing
    with torch.no_grad():
        before = float(ranking_metrics(scores, label)[0])
        after = float(ranking_metrics(scores - 2.0 * grad / grad.abs().max(), label)[0])
    assert after > before


def test_lambda_loss_weights_the_top_of_the_ranking():
    """A swap at the top costs more NDCG than one at the bottom: LambdaLoss weighs those pairs more."""
    label = torch.tensor([[1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]])
    top = torch.tensor([[1.0, 1.1, *range(-1, -11, -1)]], requires_grad=True)  # relevant doc at rank 2
    low = torch.tensor([[-10.0, *range(10, 0, -1), -9.9]], requires_grad=True)  # relevant doc at rank 12
    lambda_loss(top, label).backward()
    lambda_loss(low, label).backward()
    assert -top.grad[0, 0] > 0 and -low.grad[0, 0] > 0
    assert top.grad[0, 1] > low.grad[0, 11]  # the doc just above the relevant one at the top is pushed hardest


@pytest.mark.parametrize(
    "options,field",
    [
        ({"loss": "lambdarank"}, "task_options.loss"),
        ({"normalize": "zscore"}, "task_options.normalize"),
        ({"normalise": "asinh"}, "task_options.normalise"),
    ],
)
def test_options_are_validated_with_one_line_errors(options, field):
    with pytest.raises(ConfigError) as info:
        create_task("ranking", options)
    assert info.value.field == field and "\n" not in str(info.value)


@pytest.mark.parametrize("normalize,loss", [("none", "listwise"), ("standard", "approxndcg"), ("asinh", "ranknet")])
def test_every_normalisation_and_loss_trains(tmp_path, normalize, loss):
    options = {**SMALL, "normalize": normalize, "loss": loss}
    ended = train(
        RunConfig.for_task(
            "ranking", task_options=options, device="cpu", precision="bf16", max_steps=3, out_dir=str(tmp_path)
        )
    )
    assert ended.status == "completed", ended.message
    assert 0.0 < ended.metrics["ndcg@10"] <= 1.0
