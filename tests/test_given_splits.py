"""Given train / validation / test splits: files used as given (no re-split), the folder convention, a `split`
column, the recommender's later-interaction files; the settings through TOML, the CLI, a resume and
`evaluate`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from core.cli.main import main
from core.config import RunConfig, parse_columns
from core.engine.trainer import train
from core.errors import ConfigError, DataError
from core.runs.evaluate import evaluate_checkpoint
from core.tasks import create_task

SMALL_SENTIMENT = {"buckets": 4096, "dim": 8, "hidden": 0}


def reviews(
    path: Path,
    n: int,
    flip: bool = False,
    split: list[str] | None = None,
    sep: str = ",",
    header: tuple[str, str] = ("text", "label"),
) -> str:
    """n reviews whose words give the label away ('great' 1, 'awful' 0), or the opposite with `flip`."""
    rows = [sep.join([*header, *(["split"] if split else [])])]
    for i in range(n):
        label = i % 2
        text = f"{'great fine' if label else 'awful poor'} film number {i}"
        rows.append(sep.join([text, str(label ^ flip), *([split[i % len(split)]] if split else [])]))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return str(path)


def queries(path: Path, n: int, features: int = 3, seed: int = 0) -> str:
    """n queries of 4 candidates, query ids q0.. (the same ids in every file)."""
    rng = np.random.default_rng(seed)
    rows = ["query_id,doc_id,label," + ",".join(f"f{k + 1}" for k in range(features))]
    for q in range(n):
        for d in range(4):
            rows.append(f"q{q},d{d},{rng.integers(0, 3)}," + ",".join(f"{v:.4f}" for v in rng.random(features)))
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return str(path)


def sizes(data) -> tuple:
    return tuple(None if split is None else len(split["label"]) for split in (data.train, data.val, data.test))


def load(task: str, options: dict | None = None, **settings):
    cfg = RunConfig(task=task, **settings)
    return create_task(task, options or {}).use_config(cfg).load_data(cfg.data, 0)


# ------------------------------------------------------------------ sentiment and ranking: files as given
def test_sentiment_files_land_in_their_splits_exactly(tmp_path):
    files = {name: reviews(tmp_path / f"{name}.csv", n) for name, n in (("train", 50), ("val", 7), ("test", 9))}
    data = load("sentiment", SMALL_SENTIMENT, data=files["train"], val_data=files["val"], test_data=files["test"])
    assert sizes(data) == (50, 7, 9)
    assert any("given splits from the given files: train 50 rows, val 7 rows, test 9 rows" in n for n in data.notes)
    # only val given: no test split; only test given: validation is 10% of the training rows
    assert sizes(load("sentiment", SMALL_SENTIMENT, data=files["train"], val_data=files["val"])) == (50, 7, None)
    assert sizes(load("sentiment", SMALL_SENTIMENT, data=files["train"], test_data=files["test"])) == (45, 5, 9)
    # load_data(path, seed) alone still splits one file 80 / 10 / 10
    assert sizes(create_task("sentiment", SMALL_SENTIMENT).load_data(files["train"], 0)) == (40, 5, 5)


def test_sentiment_weights_are_fit_on_the_given_training_file_only(tmp_path):
    train_file = reviews(tmp_path / "train.csv", 40)
    test_file = tmp_path / "test.csv"
    test_file.write_text("text,label\n" + "zebra unicorn,1\n" * 10, encoding="utf-8")
    task = create_task("sentiment", {**SMALL_SENTIMENT, "weighting": "tfidf"})
    task.use_config(RunConfig(task="sentiment", data=train_file, test_data=str(test_file))).load_data(train_file, 0)
    from core.data.tokenizer import hashed_tokens

    test_ids = hashed_tokens(["zebra unicorn"], 4096, 256, 3)[0]
    assert float(task.bucket_weight[test_ids[test_ids > 0].long()].max()) == 0.0  # never seen in training


def test_test_metrics_come_from_the_test_file(tmp_path):
    """A test file whose labels contradict the training words: a model that learned them scores high on the
    given validation file and low on the given test file."""
    files = {
        "train": reviews(tmp_path / "train.csv", 64),
        "val": reviews(tmp_path / "val.csv", 20),
        "test": reviews(tmp_path / "test.csv", 20, flip=True),
    }
    cfg = RunConfig.for_task(
        "sentiment",
        data=files["train"],
        val_data=files["val"],
        test_data=files["test"],
        task_options=SMALL_SENTIMENT,
        device="cpu",
        threads=1,
        epochs=15,
        batch_size=16,
        lr=0.05,
        out_dir=str(tmp_path / "run"),
    )
    ended = train(cfg)
    assert ended.status == "completed", ended.message
    assert ended.metrics["accuracy"] == 1.0
    assert ended.test_metrics["accuracy"] == 0.0
    # evaluate: the saved config names the given test file
    result = evaluate_checkpoint(ended.checkpoint, split=None)
    assert result.split == "test" and result.metrics["accuracy"] == 0.0 and result.split_data == files["test"]
    assert RunConfig.load_toml(tmp_path / "run" / "config.toml").test_data == files["test"]
    # --data another file: split on its own (80 / 10 / 10), the run's given files left out
    other = evaluate_checkpoint(ended.checkpoint, split="test", data=reviews(tmp_path / "other.csv", 100))
    assert other.metrics["accuracy"] == 1.0


def test_ranking_files_are_split_by_query_and_ids_are_per_split(tmp_path):
    files = {
        name: queries(tmp_path / f"{name}.csv", n, seed=k)
        for k, (name, n) in enumerate((("train", 30), ("val", 5), ("test", 7)))
    }
    data = load("ranking", data=files["train"], val_data=files["val"], test_data=files["test"])
    # q0..q4 appear in all three files: each file's queries are its own
    assert tuple(split["label"].shape[0] for split in (data.train, data.val, data.test)) == (30, 5, 7)
    assert data.info["features"] == 3
    carved = load("ranking", data=files["train"], test_data=files["test"])
    assert (carved.train["label"].shape[0], carved.val["label"].shape[0]) == (27, 3)
    wider = queries(tmp_path / "wide.csv", 4, features=4)
    with pytest.raises(DataError, match=r"wide.csv: 4 feature columns, but the training data \(.*train.csv\) has 3"):
        load("ranking", data=files["train"], test_data=wider)


def test_ranking_normaliser_is_fit_on_the_training_file(tmp_path):
    train_file = queries(tmp_path / "train.csv", 20)
    shifted = tmp_path / "test.csv"
    shifted.write_text(
        "query_id,doc_id,label,f1,f2,f3\n"
        + "".join(f"q{q},d{d},1,1000,1000,1000\n" for q in range(3) for d in range(2))
    )
    data = load("ranking", {"normalize": "standard"}, data=train_file, test_data=str(shifted))
    assert max(data.info["normalizer"]["center"]) < 1.0  # the test file's 1000s are not in the statistics


# ------------------------------------------------------------------ folder convention and split column
def test_folder_with_train_vali_test_files_gives_the_splits(tmp_path):
    fold = tmp_path / "Fold1"
    fold.mkdir()
    reviews(fold / "train.csv", 30), reviews(fold / "vali.csv", 4), reviews(fold / "test.csv", 6)
    data = create_task("sentiment", SMALL_SENTIMENT).load_data(str(fold), 0)
    assert sizes(data) == (30, 4, 6)
    assert any(f"the files of folder {fold} (train.csv, vali.csv, test.csv)" in note for note in data.notes)
    with pytest.raises(ConfigError, match=r"^data: .*Fold1 holds train/validation/test files already"):
        load("sentiment", SMALL_SENTIMENT, data=str(fold), test_data=str(fold / "test.csv"))
    (fold / "notes.csv").write_text("text,label\nx,1\n")
    with pytest.raises(DataError, match=r"Fold1: holds train/validation/test files and also notes.csv"):
        create_task("sentiment", SMALL_SENTIMENT).load_data(str(fold), 0)


def test_mslr_fold_of_svmlight_files_gives_the_splits(tmp_path):
    fold = tmp_path / "Fold1"
    fold.mkdir()
    rng = np.random.default_rng(0)
    for name, n in (("train", 20), ("vali", 4), ("test", 5)):
        lines = [
            f"{rng.integers(0, 3)} qid:{q} 1:{rng.random():.3f} 2:{rng.random():.3f}\n"
            for q in range(n)
            for _ in range(4)
        ]
        (fold / f"{name}.txt").write_text("".join(lines))
    data = create_task("ranking").load_data(str(fold), 0)
    assert tuple(split["label"].shape[0] for split in (data.train, data.val, data.test)) == (20, 4, 5)
    assert data.info["features"] == 2


def test_folder_without_the_convention_is_one_data_set(tmp_path):
    folder = tmp_path / "parts"
    folder.mkdir()
    reviews(folder / "train.csv", 30), reviews(folder / "more.csv", 20)  # no validation or test file
    assert sizes(create_task("sentiment", SMALL_SENTIMENT).load_data(str(folder), 0)) == (40, 5, 5)


def test_split_column_sends_rows_to_their_splits(tmp_path):
    path = reviews(tmp_path / "all.csv", 40, split=["train", "Train", "VAL", "test", " dev "])
    data = create_task("sentiment", SMALL_SENTIMENT).load_data(path, 0)
    assert sizes(data) == (16, 16, 8)
    assert any("the 'split' column" in note for note in data.notes)
    bad = reviews(tmp_path / "bad.csv", 6, split=["train", "val", "holdout"])
    with pytest.raises(DataError, match=r"bad.csv: line 4, column 'split': 'holdout' is not a known value"):
        create_task("sentiment", SMALL_SENTIMENT).load_data(bad, 0)


def test_a_header_less_file_has_no_split_column(tmp_path):
    """Columns of a header-less file are taken by position: a feature column must not be read as `split`."""
    path = tmp_path / "letor.csv"
    path.write_text("".join(f"q{q},d{d},{d % 3},{q / 10},{d / 5},0.5\n" for q in range(20) for d in range(3)))
    data = create_task("ranking").load_data(str(path), 0)
    assert data.info["features"] == 3 and data.train["label"].shape[0] == 16


def test_ranking_split_column_keeps_a_query_in_two_splits_apart(tmp_path):
    path = tmp_path / "letor.csv"
    rows = ["query_id,doc_id,label,f1,f2,split"]
    for q in range(10):
        for d in range(3):
            rows.append(f"q{q},d{d},{d % 2},{q},{d},{'train' if q < 8 else 'test'}")
    rows += [f"q0,d{d},1,0,{d},validation" for d in range(2)]  # q0 again, as a validation query
    path.write_text("\n".join(rows) + "\n")
    data = create_task("ranking").load_data(str(path), 0)
    assert (data.train["label"].shape[0], data.val["label"].shape[0], data.test["label"].shape[0]) == (8, 1, 2)
    assert int((data.val["label"] >= 0).sum()) == 2  # only the validation rows of q0


# ------------------------------------------------------------------ recommender
def interactions(path: Path, events: dict[str, list[tuple[str, int]]]) -> str:
    rows = ["user_id,item_id,timestamp"] + [f"{u},{i},{t}" for u, evs in events.items() for i, t in evs]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def test_recommender_given_files_hold_later_interactions(tmp_path):
    train_file = interactions(
        tmp_path / "train.csv", {"u1": [("a", 1), ("b", 2), ("c", 3)], "u2": [("b", 1), ("c", 2)]}
    )
    val_file = interactions(tmp_path / "val.csv", {"u1": [("e", 5), ("d", 4)], "u3": [("a", 9)]})
    test_file = interactions(tmp_path / "test.csv", {"u1": [("f", 8)], "u2": [("a", 7)]})
    task = create_task("recommender", {"d_model": 8, "heads": 1, "layers": 1, "max_len": 4})
    data = task.use_config(
        RunConfig(task="recommender", data=train_file, val_data=val_file, test_data=test_file)
    ).load_data(train_file, 0)
    names = list(data.vocabulary["item_id"])
    name = lambda code: names[int(code) - 1]  # noqa: E731
    history = task.history
    # validation: u1 only (u3 has no training history); target = u1's first validation event by time: d
    assert [name(t) for t in data.val["target"]] == ["d"]
    start, end = int(data.val["history_start"][0]), int(data.val["history_end"][0])
    assert [name(i) for i in history[start:end]] == ["a", "b", "c"]
    # test: u1 and u2, from training + validation history
    assert sorted(name(t) for t in data.test["target"]) == ["a", "f"]
    row = [name(t) for t in data.test["target"]].index("f")
    start, end = int(data.test["history_start"][row]), int(data.test["history_end"][row])
    assert [name(i) for i in history[start:end]] == ["a", "b", "c", "d", "e"]
    assert any("1 user of the validation data has no training history: skipped" in n for n in data.notes)
    assert int((data.train["target"] > 0).sum()) == 3  # every training transition: a>b, b>c, b>c
    # no validation file: each user's last training event validates
    held = task.use_config(RunConfig(task="recommender", data=train_file, test_data=test_file)).load_data(train_file, 0)
    assert sorted(name(t) for t in held.val["target"]) == ["c", "c"]


# ------------------------------------------------------------------ settings: TOML, CLI, resume
def test_settings_round_trip_through_toml(tmp_path):
    cfg = RunConfig(task="sentiment", delimiter="\t", columns={"user_id": "userId", "item_id": "movieId"})
    cfg.save_toml(tmp_path / "c.toml")
    assert "columns = {" in (tmp_path / "c.toml").read_text() or "[columns]" in (tmp_path / "c.toml").read_text()
    again = RunConfig.load_toml(tmp_path / "c.toml")
    assert (again.delimiter, again.columns) == ("\t", {"user_id": "userId", "item_id": "movieId"})
    (tmp_path / "inline.toml").write_text('columns = {user_id = "userId"}\n')
    assert RunConfig.load_toml(tmp_path / "inline.toml").columns == {"user_id": "userId"}


@pytest.mark.parametrize(
    ("settings", "field", "text"),
    [
        ({"columns": {"user_id": ""}}, "columns", "non-empty"),
        ({"columns": {"a": "x", "b": "x"}}, "columns", "mapped to 2 names"),
        ({"val_data": "/nowhere.csv", "data": "/"}, "val_data", "/nowhere.csv: no such file or folder"),
        ({"test_data": "/"}, "data", "set data to the training data too"),
        ({"delimiter": '"'}, "delimiter", "cannot separate fields"),
    ],
)
def test_invalid_data_settings_are_named(settings, field, text):
    problems = RunConfig(**settings).errors()
    assert field in problems and text in problems[field]


def test_columns_text_parses_or_names_the_field():
    assert parse_columns("user_id=userId,\nitem_id = movieId") == {"user_id": "userId", "item_id": "movieId"}
    assert parse_columns("") == {}
    with pytest.raises(ConfigError, match=r"^columns: 'movieId' is not NAME=FILE_NAME"):
        parse_columns("user_id=userId, movieId")


def test_cli_flags_set_the_data_settings_and_resume_keeps_them(tmp_path, capsys):
    files = {
        name: reviews(tmp_path / f"{name}.csv", n, sep=";", header=("review", "stars"))
        for name, n in (("train", 40), ("val", 8), ("test", 6))
    }
    settings = tmp_path / "base.toml"
    settings.write_text('columns = {text = "review"}\n')
    code = main(
        [
            "train",
            "--task",
            "sentiment",
            "--data",
            files["train"],
            "--val-data",
            files["val"],
            "--test-data",
            files["test"],
            "--delimiter",
            ";",
            "--column",
            "label=stars",
            "--config",
            str(settings),
            "--column",
            "text=review",
            "-o",
            "buckets=4096",
            "--max-steps",
            "2",
            "--device",
            "cpu",
            "--threads",
            "1",
            "--batch-size",
            "8",
            "--out",
            str(tmp_path / "run"),
            "--json",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "given splits from the given files: train 40 rows, val 8 rows, test 6 rows" in err
    saved = RunConfig.load_toml(tmp_path / "run" / "config.toml")
    assert (saved.val_data, saved.test_data, saved.delimiter) == (files["val"], files["test"], ";")
    assert saved.columns == {"text": "review", "label": "stars"}
    assert json.loads(out.strip().splitlines()[-1])["test_metrics"]

    from core.cli.main import build_parser
    from core.cli.train import prepared_run

    args = build_parser().parse_args(
        ["train", "--resume", str(tmp_path / "run" / "checkpoint.pt"), "--max-steps", "4", "--column", "user_id=uid"]
    )
    prepared = prepared_run(args)
    config, notes = prepared.config, prepared.notes
    assert (config.val_data, config.test_data, config.delimiter) == (files["val"], files["test"], ";")
    assert config.columns == {"text": "review", "label": "stars", "user_id": "uid"}
    assert any("columns" in note for note in notes)


def test_cli_refuses_bad_data_flags_in_one_line(tmp_path, capsys):
    train_file = reviews(tmp_path / "train.csv", 20)
    code = main(
        [
            "train",
            "--task",
            "sentiment",
            "--data",
            train_file,
            "--test-data",
            str(tmp_path / "no.csv"),
            "--out",
            str(tmp_path / "run"),
        ]
    )
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "no.csv: no such file or folder" in lines[0], lines
    code = main(
        ["train", "--task", "sentiment", "--data", train_file, "--column", "user_id", "--out", str(tmp_path / "run")]
    )
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "'user_id' is not NAME=FILE_NAME" in lines[0], lines


def test_evaluate_defaults_to_val_when_a_run_has_no_test_split(tmp_path, capsys):
    files = {name: reviews(tmp_path / f"{name}.csv", n) for name, n in (("train", 40), ("val", 8))}
    ended = train(
        RunConfig.for_task(
            "sentiment",
            data=files["train"],
            val_data=files["val"],
            device="cpu",
            threads=1,
            max_steps=2,
            batch_size=8,
            task_options={"buckets": 4096},
            out_dir=str(tmp_path / "run"),
        )
    )
    assert ended.status == "completed" and not ended.test_metrics
    code, out, err = main(["evaluate", ended.checkpoint, "--json"]), *capsys.readouterr()
    assert code == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["split"] == "val" and result["metrics"] == pytest.approx(ended.metrics, abs=1e-9)
