"""Recommender: planted-ceiling maths, sequence windows, metrics, and training that beats popularity."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from core.config import RunConfig
from core.data.sequences import history_windows, sequence_splits, training_windows
from core.data.synthetic import generate_interactions, make_track_chain
from core.engine.trainer import train
from core.tasks import create_task
from core.tasks.recommender.task import count_at_least, rank_curves

SMALL = {"items": 200, "track_len": 10, "interactions": 30_000, "mean_len": 30, "max_len": 30, "d_model": 32}


def test_windows_cover_every_transition_once_with_latest_window_full():
    items = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9])  # one user, 9 items -> 8 transitions
    out = training_windows(items, np.array([0]), np.array([9]), max_len=3)
    assert out["seq"].tolist() == [[6, 7, 8], [3, 4, 5], [0, 1, 2]]
    assert out["target"].tolist() == [[7, 8, 9], [4, 5, 6], [0, 2, 3]]
    history = history_windows(items, np.array([0, 7]), np.array([2, 9]), max_len=3)
    assert history.tolist() == [[0, 1, 2], [0, 8, 9]]


def test_leave_last_out_splits_hold_out_the_last_two_items():
    user = np.array([0, 0, 0, 0, 1, 1, 2, 2, 2])
    items = np.array([1, 2, 3, 4, 5, 6, 7, 8, 9])
    train, val, test = sequence_splits(user, items, 9, max_len=4, negatives=5, seed=0)
    assert val["target"].tolist() == [3, 8] and test["target"].tolist() == [4, 9]
    assert val["seq"].tolist() == [[0, 0, 1, 2], [0, 0, 0, 7]]
    assert test["seq"].tolist() == [[0, 1, 2, 3], [0, 0, 7, 8]]
    assert 3 not in train["target"] and 4 not in train["target"]  # held-out items never trained on
    assert (val["negatives"] != val["target"][:, None]).all() and val["negatives"].shape == (2, 5)
    assert not np.isin(val["negatives"][0].numpy(), [1, 2, 3, 4]).any()  # never an item of the user's
    assert val["history_start"].tolist() == [0, 6] and val["history_end"].tolist() == [2, 7]


def test_expected_ceiling_matches_monte_carlo_of_the_bayes_ranking():
    chain = make_track_chain(300, 10, 0.6, 1.0, seed=3)
    data = generate_interactions(chain, 60_000, 30, seed=3)
    same = data["user"][1:] == data["user"][:-1]
    current, following = data["item"][:-1][same][:20_000], data["item"][1:][same][:20_000]
    probs = 0.4 * np.tile(chain.jump_probs, (len(current), 1))
    probs[np.arange(len(current)), chain.successor(current)] += 0.6
    rank = (probs > probs[np.arange(len(current)), following][:, None]).sum(1)
    expected = chain.expected_metrics(current)
    assert expected["hr@10_full"] == pytest.approx((rank < 10).mean(), abs=0.01)
    assert expected["ndcg@10_full"] == pytest.approx(np.where(rank < 10, 1 / np.log2(rank + 2), 0).mean(), abs=0.01)
    assert expected["hr@10_sampled100"] > expected["hr@10_full"]


def test_generator_is_seeded_exact_and_follows_tracks():
    chain = make_track_chain(100, 10, 0.7, 1.0, seed=1)
    a = generate_interactions(chain, 12_345, 20, seed=1)
    b = generate_interactions(chain, 12_345, 20, seed=1)
    assert len(a["item"]) == 12_345 and all(np.array_equal(a[k], b[k]) for k in a)
    same = a["user"][1:] == a["user"][:-1]
    assert (np.diff(a["timestamp"])[same] > 0).all()
    follow_rate = (a["item"][1:][same] == chain.successor(a["item"][:-1][same])).mean()
    assert follow_rate == pytest.approx(0.7 + 0.3 / 100, abs=0.03)


def test_ranks_count_ties_against_the_target():
    scores = torch.tensor([[1.0, 1.0, 1.0], [3.0, 2.0, 1.0]])
    ranks = count_at_least(scores, torch.tensor([1.0, 3.0])) - 1
    assert ranks.tolist() == [2, 0]
    hit, ndcg = rank_curves(ranks, 2)
    assert hit == [0.5, 0.5] and ndcg[1] == pytest.approx(0.5)


def test_sampled_softmax_loss_is_finite_and_trains():
    task = create_task("recommender", {**SMALL, "loss": "sampled", "sampled_negatives": 64})
    data = task.load_data("", 0)
    model = task.build_model(data.info)
    batch = {k: v[:16] for k, v in data.train.items()}
    loss = task.loss(model, batch)
    loss.backward()
    assert torch.isfinite(loss) and model.items.weight.grad is not None


def test_loss_auto_is_the_full_softmax_up_to_the_threshold_and_the_sampled_one_above():
    from core.tasks.options import TaskOption
    from core.tasks.recommender.task import SAMPLED_LOSS_ABOVE, RecommenderTask, chosen_loss

    assert chosen_loss("auto", SAMPLED_LOSS_ABOVE) == "full"
    assert chosen_loss("auto", SAMPLED_LOSS_ABOVE + 1) == "sampled"
    assert chosen_loss("full", 10 * SAMPLED_LOSS_ABOVE) == "full" and chosen_loss("sampled", 10) == "sampled"
    option: TaskOption = next(o for o in RecommenderTask.options if o.name == "loss")
    assert option.default == "auto" and f"{SAMPLED_LOSS_ABOVE:,} lessons" in option.help


@pytest.mark.parametrize("above", [False, True])
def test_loss_auto_trains_with_the_loss_its_note_names(monkeypatch, above):
    """The same model and batch: auto's loss is the named loss's value, and the note says which it is."""
    from core.tasks.recommender import task as recommender

    if above:  # the threshold just under this catalogue, rather than a catalogue above the real one
        monkeypatch.setattr(recommender, "SAMPLED_LOSS_ABOVE", SMALL["items"] - 1)
    chosen = "sampled" if above else "full"
    values = {}
    for loss in ("auto", chosen, {"full": "sampled", "sampled": "full"}[chosen]):
        task = create_task("recommender", {**SMALL, "loss": loss, "sampled_negatives": 64, "dropout": 0.0})
        data = task.load_data("", 0)
        torch.manual_seed(0)
        model = task.build_model(data.info)
        torch.manual_seed(1)  # the same negatives for both sampled values
        values[loss] = float(task.loss(model, {k: v[:16] for k, v in data.train.items()}).detach())
        notes = [n for n in data.notes if "loss=auto" in n]
        assert len(notes) == (loss == "auto")
        if loss == "auto":
            assert f"trains with the {chosen} softmax" in notes[0] and f"{SMALL['items']:,} lessons" in notes[0]
    other = next(k for k in values if k not in ("auto", chosen))
    assert values["auto"] == pytest.approx(values[chosen]) and values["auto"] != pytest.approx(values[other])


@pytest.mark.parametrize("loss", ["auto", "full"])
def test_the_run_says_what_loss_auto_chose_and_a_config_naming_full_trains_as_before(tmp_path, loss):
    """loss=auto's choice is a note of the run (RunStarted, run.json: `runs show` prints it); a config that
    names full, as one written before auto existed does, trains without it."""
    from core.engine.events import RunStarted
    from core.engine.run_record import read_run
    from core.tasks.recommender.task import SAMPLED_LOSS_ABOVE

    events = []
    config = RunConfig.from_dict(
        {
            "task": "recommender",
            "task_options": {**SMALL, "loss": loss},
            "device": "cpu",
            "max_steps": 3,
            "batch_size": 16,
            "out_dir": str(tmp_path),
        }
    )
    ended = train(config, sink=events.append)
    assert ended.status == "completed", ended.message
    said = [n for n in next(e for e in events if isinstance(e, RunStarted)).notes if "loss=auto" in n]
    assert said == (
        [
            f"recommender: loss=auto trains with the full softmax: {SMALL['items']:,} lessons is at most "
            f"{SAMPLED_LOSS_ABOVE:,}; loss=sampled for the sampled softmax"
        ]
        if loss == "auto"
        else []
    )
    assert [n for n in read_run(tmp_path)["notes"] if "loss=auto" in n] == said


def test_a_small_sampled_run_trains_and_its_loss_falls(tmp_path):
    from core.engine.events import StepMetrics

    events = []
    config = RunConfig.for_task(
        "recommender",
        task_options={**SMALL, "loss": "sampled", "sampled_negatives": 64},
        device="cpu",
        max_steps=40,
        log_interval=5,
        out_dir=str(tmp_path),
    )
    ended = train(config, sink=events.append)
    assert ended.status == "completed", ended.message
    losses = [e.loss for e in events if isinstance(e, StepMetrics)]
    assert len(losses) >= 4 and losses[-1] < 0.8 * losses[0], losses


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_default_hyperparameters_beat_popularity(tmp_path, precision):
    task = create_task("recommender", SMALL)
    data = task.load_data("", 0)
    assert data.ceiling["hr@10_full_unfiltered"] > data.baseline["hr@10_full_unfiltered"] + 0.3
    events = []
    config = RunConfig.for_task(
        "recommender", task_options=SMALL, precision=precision, device="cpu", max_steps=60, out_dir=str(tmp_path)
    )
    ended = train(config, sink=events.append)
    assert ended.status == "completed", ended.message
    assert events[0].autocast_dtype == ("bfloat16" if precision == "bf16" else "float32")
    for metric in ("hr@10_full_unfiltered", "ndcg@10_full_unfiltered"):
        assert ended.metrics[metric] > data.baseline[metric] + 0.2, (metric, ended.metrics, data.baseline)
        assert ended.metrics[metric] <= data.ceiling[metric] + 0.05
    for metric in ("hr@10_full_filtered", "ndcg@10_full_filtered"):  # the primary protocol beats popularity too
        assert ended.metrics[metric] > data.baseline[metric] + 0.1, (metric, ended.metrics, data.baseline)
    assert ended.metrics["hr@10_sampled100_unseen"] >= ended.metrics["hr@10_full_filtered"]


def test_trains_from_a_csv_file_with_raw_string_ids(tmp_path):
    path = tmp_path / "clicks.csv"
    users = np.repeat(np.arange(60), 12)
    items = np.arange(len(users)) % 7
    lines = ["user_id,item_id,timestamp,event"] + [
        f"u{u},lesson-{i},{1000 + t},{'click' if t % 2 else 'complete'}" for t, (u, i) in enumerate(zip(users, items))
    ]
    path.write_text("\n".join(lines) + "\n")
    task = create_task("recommender", {"d_model": 16, "max_len": 8})
    data = task.load_data(str(path), 0)
    assert data.info["n_items"] == 7 and data.val["target"].shape[0] == 60 and data.ceiling == {}
    ended = train(
        RunConfig.for_task(
            "recommender",
            task_options={"d_model": 16, "max_len": 8},
            data=str(path),
            device="cpu",
            max_steps=3,
            batch_size=16,
            out_dir=str(tmp_path / "run"),
        )
    )
    assert ended.status == "completed", ended.message


def test_checkpoint_and_export_keep_the_files_own_item_ids_and_resume_checks_them(tmp_path):
    """Predictions must map back to the users' lesson ids: the vocabulary travels with the model."""
    from core.engine.checkpoints import export_checkpoint, load_checkpoint
    from core.engine.trainer import Trainer
    from core.errors import CheckpointError

    def write(path, names):
        users = np.repeat(np.arange(40), 10)
        lines = ["user_id,item_id,timestamp"] + [
            f"u{u},{names[t % len(names)]},{1000 + t}" for t, u in enumerate(users)
        ]
        path.write_text("\n".join(lines) + "\n")

    data = tmp_path / "clicks.csv"
    write(data, ["intro-python", "loops", "functions", "classes", "testing"])
    options = {"d_model": 16, "max_len": 8}
    config = RunConfig.for_task(
        "recommender",
        task_options=options,
        data=str(data),
        device="cpu",
        max_steps=2,
        batch_size=16,
        out_dir=str(tmp_path / "run"),
    )
    ended = train(config)
    assert ended.status == "completed", ended.message
    state = load_checkpoint(ended.checkpoint)  # weights_only: the id list loads without unpickling code
    assert state["vocabulary"] == {"item_id": ["intro-python", "loops", "functions", "classes", "testing"]}

    _, _, manifest = export_checkpoint(ended.checkpoint, tmp_path / "export" / "model")
    assert json.loads(manifest.read_text())["vocabulary"]["item_id"][0] == "intro-python"

    reordered = tmp_path / "other.csv"
    write(reordered, ["loops", "intro-python", "functions", "classes", "testing"])
    resumed = RunConfig.for_task(
        "recommender",
        task_options=options,
        data=str(reordered),
        device="cpu",
        max_steps=4,
        batch_size=16,
        out_dir=str(tmp_path / "run2"),
    )
    with pytest.raises(CheckpointError, match="not the ones the checkpoint was trained on"):
        Trainer(resumed, resume_from=ended.checkpoint).run()
    synthetic = Trainer(
        RunConfig.for_task(
            "recommender",
            task_options={**options, "items": 100},
            device="cpu",
            max_steps=2,
            batch_size=16,
            out_dir=str(tmp_path / "synthetic"),
        )
    ).run()
    with pytest.raises(CheckpointError, match="not trained on this data's item_ids"):
        Trainer(config.replace(out_dir=str(tmp_path / "run4"), max_steps=4), resume_from=synthetic.checkpoint).run()
    same = RunConfig.for_task(
        "recommender",
        task_options=options,
        data=str(data),
        device="cpu",
        max_steps=4,
        batch_size=16,
        out_dir=str(tmp_path / "run3"),
    )
    assert Trainer(same, resume_from=ended.checkpoint).run().status == "completed"


def test_parquet_integer_ids_are_a_tensor_and_csv_ids_keep_their_text(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    users = np.repeat(np.arange(30), 8)
    items = [9000 + (t * 7) % 11 for t in range(len(users))]
    pq.write_table(
        pa.table({"user_id": users, "item_id": items, "timestamp": np.arange(len(users))}), tmp_path / "clicks.parquet"
    )
    task = create_task("recommender", {"d_model": 16, "max_len": 8})
    ids = task.load_data(str(tmp_path / "clicks.parquet"), 0).vocabulary["item_id"]
    assert isinstance(ids, torch.Tensor) and ids.dtype == torch.int64 and len(ids) == 11
    assert ids[0].item() == 9000 and sorted(ids.tolist()) == list(range(9000, 9011))

    path = tmp_path / "clicks.csv"  # "007" and "7" are two lessons in a CSV, and map back as written
    lines = ["user_id,item_id,timestamp"] + [f"{u},{['007', '7', '0x1f'][t % 3]},{t}" for t, u in enumerate(users)]
    path.write_text("\n".join(lines) + "\n")
    data = task.load_data(str(path), 0)
    assert data.vocabulary["item_id"] == ["007", "7", "0x1f"] and data.info["n_items"] == 3
