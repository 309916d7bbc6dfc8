"""`amp-console predict`: each task's file format scored with the same numbers as the Predictor, bad rows
skipped and reported by their line (or refused with --strict, nothing written), Parquet in and out,
interactions grouped per user, and one-line errors for a file of another task's format."""

from __future__ import annotations

import csv
import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from cli_in_process import cli
from trained_runs import LESSONS, TASK_OPTIONS

from core.config import RunConfig
from core.engine.trainer import train
from core.runs.predict import load_predictor

TRACK = [str(i) for i in LESSONS]  # the recommender file's lessons
FEATURES = TASK_OPTIONS["ranking"]["features"]


def _train(out, task: str, **settings):
    torch.set_num_threads(1)
    ended = train(RunConfig.for_task(task, device="cpu", threads=1, out_dir=str(out), **settings))
    assert ended.status == "completed", ended.message
    return ended


def _rows(path) -> list[dict]:
    return list(csv.DictReader(io.StringIO(path.read_text())))


def _ranking_file(path, rows: int, features: int = FEATURES, seed: int = 0) -> tuple[list[str], np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.lognormal(1.0, 1.0, (rows, features)).astype(np.float32)
    lines = ["query_id,doc_id,label," + ",".join(f"f{i + 1}" for i in range(features))]
    lines += [f"q{r // 5},d{r},{r % 3}," + ",".join(repr(float(v)) for v in x[r]) for r in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return lines, x


# ---- round trips ------------------------------------------------------------------------------------------------


def test_sentiment_scores_equal_the_predictors_with_the_files_line_numbers(capsys, tmp_path, sentiment_run):
    texts = [
        "Great, clear and helpful!",
        'He said "boring", and it was',
        "a review\nover two lines",
        "useless",
        "not that confusing",
    ]
    source = tmp_path / "reviews.csv"
    with source.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        for t in texts:
            writer.writerow([t, 1])
    out = tmp_path / "scores.csv"
    code, stdout, err = cli(capsys, "predict", sentiment_run.checkpoint, "--input", source, "--out", out)
    assert code == 0, err
    assert "5 reviews scored, 0 skipped" in stdout and "rows/s" in stdout
    rows = _rows(out)
    expected = load_predictor(sentiment_run.checkpoint).sentiment(texts)
    assert [float(r["p_positive"]) for r in rows] == pytest.approx(expected, abs=1e-12)
    assert [int(r["line"]) for r in rows] == [2, 3, 4, 6, 7]  # the third review spans lines 4 and 5
    assert [r["predicted"] for r in rows] == ["positive" if p >= 0.5 else "negative" for p in expected]


def test_recommender_histories_give_the_predictors_top_k_in_lesson_ids(capsys, tmp_path, recommender_run):
    histories = [["5006", "5009", "5012"], ["5027", "gone", "5000"], [TRACK[t % 6] for t in range(20)]]
    source = tmp_path / "histories.csv"
    source.write_text("user_id,history\n" + "".join(f"u{i},{' '.join(h)}\n" for i, h in enumerate(histories)))
    out = tmp_path / "top.csv"
    code, stdout, err = cli(capsys, "predict", recommender_run.checkpoint, "--input", source, "--out", out, "--k", 4)
    assert code == 0, err
    assert "3 users scored" in stdout and "1 lesson ids the model does not know" in stdout
    rows = _rows(out)
    expected = load_predictor(recommender_run.checkpoint).recommend_many(histories, k=4)
    for i, answer in enumerate(expected):
        mine = [r for r in rows if r["user_id"] == f"u{i}"]
        assert [r["item_id"] for r in mine] == answer.items and [int(r["rank"]) for r in mine] == [1, 2, 3, 4]
        assert [float(r["score"]) for r in mine] == pytest.approx(answer.scores, abs=1e-5)
        assert not set(answer.items) & set(histories[i])
    source.write_text("history\n5006 5009\n")
    code, _, err = cli(
        capsys, "predict", recommender_run.checkpoint, "--input", source, "--out", out, "--include-seen", "--k", 10
    )
    rows = _rows(out)
    assert code == 0 and rows[0].keys() == {"line", "rank", "item_id", "score", "seen"} and len(rows) == 10
    assert {r["item_id"] for r in rows if r["seen"] == "true"} == {"5006", "5009"}


def test_interactions_are_grouped_per_user_by_time(capsys, tmp_path, recommender_run):
    rng = np.random.default_rng(3)
    events = [(f"u{u}", TRACK[(u + t) % 10], 5000 + 10 * t) for u in range(6) for t in range(u + 3)]
    shuffled = [events[i] for i in rng.permutation(len(events))]  # not sorted by user or time
    lines = ["user_id,item_id,timestamp"] + [f"{u},{i},{t}" for u, i, t in shuffled]
    lines += ["u0,unknown-lesson,99999", "u1,5000,not-a-time", "u9,nope,1"]
    source = tmp_path / "clicks.csv"
    source.write_text("\n".join(lines) + "\n")
    out = tmp_path / "top.parquet"
    code, stdout, err = cli(
        capsys, "predict", recommender_run.checkpoint, "--input", source, "--out", out, "--k", 3, "--batch-size", 4
    )
    assert code == 0, err
    assert f"line {len(lines) - 1}: timestamp 'not-a-time' is not a number" in err
    assert f"line {len(lines)}: user 'u9' (first seen here): none of its lessons is known" in err
    table = pq.read_table(out).to_pydict()
    predictor = load_predictor(recommender_run.checkpoint)
    for u in range(6):
        history = [i for user, i, _ in sorted(events, key=lambda e: e[2]) if user == f"u{u}"]
        answer = predictor.recommend(history[-8:], k=3)
        mine = [j for j, user in enumerate(table["user_id"]) if user == f"u{u}"]
        assert [table["item_id"][j] for j in mine] == answer.items
        assert [table["score"][j] for j in mine] == pytest.approx(answer.scores, abs=1e-5)
    assert "u9" not in table["user_id"] and "6 users scored, 2 skipped" in stdout


def test_ranking_parquet_in_and_out_keeps_ids_and_copies_labels(capsys, tmp_path, ranking_run):
    rng = np.random.default_rng(1)
    x = rng.lognormal(1.0, 1.0, (50, FEATURES)).astype(np.float32)
    columns = {"query_id": np.repeat(np.arange(10), 5), "doc_id": np.arange(50) + 1000, "label": np.arange(50) % 3}
    columns.update({f"f{i + 1}": x[:, i] for i in range(FEATURES)})
    pq.write_table(pa.table(columns), tmp_path / "candidates.parquet")
    out = tmp_path / "scores.parquet"
    code, stdout, err = cli(
        capsys,
        "predict",
        ranking_run.checkpoint,
        "--input",
        tmp_path / "candidates.parquet",
        "--out",
        out,
        "--batch-size",
        16,
    )
    assert code == 0, err
    table = pq.read_table(out)
    assert table.schema.field("query_id").type == pa.int64() and table.column("doc_id").to_pylist()[:2] == [1000, 1001]
    assert table.column("label").to_pylist() == columns["label"].tolist()
    expected = load_predictor(ranking_run.checkpoint).rank(x)
    assert table.column("score").to_numpy() == pytest.approx(expected, abs=1e-6)


def test_tiny_points_get_the_predictors_class_probabilities(capsys, tmp_path, tiny_run):
    predictor = load_predictor(tiny_run.checkpoint)
    x = predictor.example_rows(limit=30)
    source = tmp_path / "points.csv"
    source.write_text(
        ",".join(f"x{i}" for i in range(1, 11))
        + "\n"
        + "".join(",".join(repr(float(v)) for v in row) + "\n" for row in x)
    )
    out = tmp_path / "classes.csv"
    code, _, err = cli(capsys, "predict", tiny_run.checkpoint, "--input", source, "--out", out)
    assert code == 0, err
    rows = _rows(out)
    expected = predictor.predict_rows(x)
    assert np.array([[float(r["p0"]), float(r["p1"])] for r in rows]) == pytest.approx(expected, abs=1e-6)
    assert [int(r["predicted"]) for r in rows] == expected.argmax(1).tolist()


# ---- bad rows ---------------------------------------------------------------------------------------------------


def test_bad_rows_are_skipped_and_reported_by_line(capsys, tmp_path, ranking_run, monkeypatch):
    import core.runs.file_input as file_input

    monkeypatch.setattr(file_input, "BLOCK_BYTES", 512)  # many CSV blocks: line numbers must carry across them
    lines, x = _ranking_file(tmp_path / "c.csv", 60)
    lines[8] = lines[8].replace(lines[8].split(",")[5], "abc", 1)  # f3 of file line 9
    lines[20] = ",".join(lines[20].split(",")[:-1])  # one value short: file line 21
    lines[33] = "," + lines[33].split(",", 1)[1]  # empty query_id: file line 34
    lines[47] = lines[47] + ",7"  # one value too many: file line 48
    (tmp_path / "c.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "scores.csv"
    code, stdout, err = cli(
        capsys, "predict", ranking_run.checkpoint, "--input", tmp_path / "c.csv", "--out", out, "--batch-size", 7
    )
    assert code == 0, err
    reported = [line for line in err.splitlines() if line.startswith("line ")]
    assert reported == [
        "line 9: f3 'abc' is not a number",
        f"line 21: {FEATURES + 2} values, the header has {FEATURES + 3} columns",
        "line 34: query_id is empty",
        f"line 48: {FEATURES + 4} values, the header has {FEATURES + 3} columns",
    ]
    assert "56 candidates scored, 4 skipped" in stdout
    rows = _rows(out)
    good = [r for r in range(60) if r + 2 not in (9, 21, 34, 48)]
    assert [r["doc_id"] for r in rows] == [f"d{r}" for r in good]
    expected = load_predictor(ranking_run.checkpoint).rank(x[good])
    assert [float(r["score"]) for r in rows] == pytest.approx(expected.tolist(), abs=1e-5)


def test_after_twenty_bad_rows_the_rest_are_counted(capsys, tmp_path, sentiment_run):
    source = tmp_path / "reviews.csv"
    source.write_text("text\n" + "".join("fine lesson\n" if i % 2 else '""\n' for i in range(60)))
    code, stdout, err = cli(capsys, "predict", sentiment_run.checkpoint, "--input", source, "--out", tmp_path / "o.csv")
    shown = [line for line in err.splitlines() if line.startswith("line ")]
    assert code == 0 and len(shown) == 20
    assert shown[0] == "line 2: text is empty" and shown[-1] == "line 40: text is empty"
    assert "... and 10 more bad lines (skipped)" in err and "30 reviews scored, 30 skipped" in stdout


def test_strict_makes_the_first_bad_row_an_error_and_writes_nothing(capsys, tmp_path, ranking_run):
    lines, _ = _ranking_file(tmp_path / "c.csv", 30)
    lines[12] = lines[12].rsplit(",", 1)[0] + ",1e400x"
    (tmp_path / "c.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "scores.csv"
    out.write_text("the previous predictions\n")
    code, stdout, err = cli(
        capsys, "predict", ranking_run.checkpoint, "--input", tmp_path / "c.csv", "--out", out, "--strict"
    )
    assert code == 2 and err.strip().splitlines()[-1] == (
        f"amp-console: error: {tmp_path / 'c.csv'}: line 13: "
        f"f{FEATURES} '1e400x' is not a number (--strict: "
        "nothing written)"
    )
    assert not [line for line in err.splitlines() if line.startswith("line ")]  # the error is the report
    assert out.read_text() == "the previous predictions\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv", "scores.csv"]  # no temporary file left


# ---- wrong inputs -----------------------------------------------------------------------------------------------


def test_another_tasks_file_is_a_one_line_error(capsys, tmp_path, sentiment_run, recommender_run, ranking_run):
    _ranking_file(tmp_path / "c.csv", 10)
    code, _, err = cli(
        capsys, "predict", sentiment_run.checkpoint, "--input", tmp_path / "c.csv", "--out", tmp_path / "o.csv"
    )
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "no column 'text'" in err and "the file's columns: query_id, doc_id, label, f1" in err
    code, _, err = cli(
        capsys, "predict", recommender_run.checkpoint, "--input", tmp_path / "c.csv", "--out", tmp_path / "o.csv"
    )
    assert code == 2 and "no column 'history'" in err and len(err.strip().splitlines()) == 1
    (tmp_path / "r.csv").write_text("text\nnice\n")
    code, _, err = cli(
        capsys, "predict", ranking_run.checkpoint, "--input", tmp_path / "r.csv", "--out", tmp_path / "o.csv"
    )
    assert code == 2 and "no column 'query_id'" in err
    assert not (tmp_path / "o.csv").exists()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--input", "__DIR__/missing.csv", "--out", "__DIR__/o.csv"], "missing.csv: no such input file"),
        (["--input", "__DIR__/in.csv", "--out", "__DIR__/o.json"], "use a .csv or .parquet file name"),
        (["--input", "__DIR__/in.csv", "--out", "__DIR__/o.csv", "--best"], "--best takes a run"),
        (["--input", "__DIR__/in.csv", "--out", "__DIR__/o.csv", "--k", "0"], "at least 1 recommendation"),
        (
            ["--input", "__DIR__/in.parquet", "--out", "__DIR__/o.csv", "--batch-size", str(10**20)],
            "score at most 16,777,216 rows at a time",
        ),
    ],
)
def test_bad_arguments_are_one_line_exit_2(capsys, tmp_path, tiny_run, argv, message):
    (tmp_path / "in.csv").write_text("x1\n1\n")
    pq.write_table(pa.table({f"x{i}": [0.5] for i in range(1, 11)}), tmp_path / "in.parquet")
    argv = [a.replace("__DIR__", str(tmp_path)) for a in argv]
    code, _, err = cli(capsys, "predict", tiny_run.checkpoint, *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_run_folder_uses_its_best_checkpoint(capsys, tmp_path, tiny_run):
    from pathlib import Path

    x = load_predictor(tiny_run.checkpoint).example_rows(limit=3)
    source = tmp_path / "points.csv"
    source.write_text(
        ",".join(f"f{i}" for i in range(1, 11))
        + "\n"
        + "".join(",".join(str(float(v)) for v in row) + "\n" for row in x)
    )
    code, _, err = cli(
        capsys, "predict", Path(tiny_run.checkpoint).parent, "--input", source, "--out", tmp_path / "new" / "o.csv"
    )
    assert code == 0 and "best.pt" in err and len(_rows(tmp_path / "new" / "o.csv")) == 3


def test_line_numbers_count_quoted_line_breaks_across_blocks(capsys, tmp_path, sentiment_run, monkeypatch):
    import core.runs.file_input as file_input

    monkeypatch.setattr(file_input, "BLOCK_BYTES", 256)
    rows, expected_lines, line = [], [], 2
    for i in range(40):
        text = f"review {i} " + ("spans\nthree\nlines" if i % 7 == 3 else "on one line")
        rows.append(f'"{text}",1')
        if i % 11 == 5:
            rows[-1] += ",extra"  # a bad record: one value too many
        else:
            expected_lines.append(line)
        line += text.count("\n") + 1
    bad_lines = [2 + i + sum(2 for j in range(i) if j % 7 == 3) for i in range(40) if i % 11 == 5]
    (tmp_path / "r.csv").write_text("text,label\n" + "\n".join(rows) + "\n")
    code, stdout, err = cli(
        capsys, "predict", sentiment_run.checkpoint, "--input", tmp_path / "r.csv", "--out", tmp_path / "o.csv"
    )
    assert code == 0, err
    assert [int(r["line"]) for r in _rows(tmp_path / "o.csv")] == expected_lines
    assert [line for line in err.splitlines() if line.startswith("line ")] == [
        f"line {n}: 3 values, the header has 2 columns" for n in bad_lines
    ]


def test_progress_off_a_terminal_is_plain_lines():
    from core.runs.file_predict import Progress

    stream = io.StringIO()  # not a terminal
    progress = Progress(every=0.0, stream=stream)
    progress.update(1200, 3)
    progress.update(2400, 3)
    progress.done()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2 and lines[1].startswith("predict: 2,400 scored, 3 skipped, ")
    assert "\r" not in stream.getvalue()


def test_a_run_id_under_the_runs_root(capsys, tmp_path, runs_root_in_tmp):
    import json
    from pathlib import Path

    ended = _train_in_root("tiny", max_steps=5, keep_best=0)
    run_id = json.loads(next(runs_root_in_tmp.glob("*/run.json")).read_text())["id"]
    (tmp_path / "p.csv").write_text(",".join(f"x{i}" for i in range(1, 11)) + "\n" + ",".join(["0.5"] * 10) + "\n")
    code, stdout, err = cli(capsys, "predict", run_id[:6], "--input", tmp_path / "p.csv", "--out", tmp_path / "o.csv")
    assert code == 0, err
    assert "kept no best checkpoint" in err and str(ended.checkpoint) in err and "1 points scored" in stdout
    code, _, err = cli(
        capsys, "predict", run_id[:6], "--best", "--input", tmp_path / "p.csv", "--out", tmp_path / "o.csv"
    )
    assert code == 2 and "no best checkpoint" in err  # asked for explicitly: not replaced by the last
    code, _, err = cli(
        capsys,
        "predict",
        Path(ended.checkpoint).parent,
        "--best",
        "--input",
        tmp_path / "p.csv",
        "--out",
        tmp_path / "o.csv",
    )
    assert code == 2 and "no best checkpoint" in err


def _train_in_root(task: str, **settings):
    torch.set_num_threads(1)
    ended = train(RunConfig.for_task(task, device="cpu", threads=1, **settings))
    assert ended.status == "completed", ended.message
    return ended


def test_parquet_nulls_are_empty_rows_not_a_crash(capsys, tmp_path, recommender_run, sentiment_run):
    source = tmp_path / "h.parquet"
    pq.write_table(pa.table({"user_id": ["u1", "u2", "u3"], "history": ["5006 5009", None, "5012"]}), source)
    code, stdout, err = cli(
        capsys, "predict", recommender_run.checkpoint, "--input", source, "--out", tmp_path / "o.csv", "--k", 2
    )
    assert code == 0, err
    assert "row 2: history is empty" in err and "2 users scored, 1 skipped" in stdout
    assert {r["user_id"] for r in _rows(tmp_path / "o.csv")} == {"u1", "u3"}
    pq.write_table(pa.table({"text": [None, "a fine lesson"]}), source)
    code, stdout, err = cli(capsys, "predict", sentiment_run.checkpoint, "--input", source, "--out", tmp_path / "o.csv")
    assert code == 0 and "row 1: text is empty" in err and "1 reviews scored, 1 skipped" in stdout


def test_a_label_too_large_for_a_whole_number_is_left_empty_not_wrapped(capsys, tmp_path, ranking_run):
    lines, _ = _ranking_file(tmp_path / "c.csv", 4)
    grades = ["2", "1e30", "2.5", "-1e300"]
    lines[1:] = [
        line.split(",", 3)[0] + "," + line.split(",", 3)[1] + f",{g}," + line.split(",", 3)[3]
        for line, g in zip(lines[1:], grades)
    ]
    (tmp_path / "c.csv").write_text("\n".join(lines) + "\n")
    code, _, err = cli(
        capsys, "predict", ranking_run.checkpoint, "--input", tmp_path / "c.csv", "--out", tmp_path / "o.csv"
    )
    assert code == 0, err
    assert [r["label"] for r in _rows(tmp_path / "o.csv")] == ["2", "", "", ""]


def test_a_csv_without_a_header_is_refused_not_short_of_its_first_row(capsys, tmp_path, tiny_run):
    rng = np.random.default_rng(5)
    (tmp_path / "p.csv").write_text(
        "".join(",".join(f"{v:.3f}" for v in row) + "\n" for row in rng.normal(size=(3, 10)))
    )
    out = tmp_path / "o.csv"
    code, _, err = cli(capsys, "predict", tiny_run.checkpoint, "--input", tmp_path / "p.csv", "--out", out)
    assert code == 2 and "line 1 holds numbers" in err and "add a header line" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()


def test_bytes_that_are_not_utf8_cost_their_row_not_the_file(capsys, tmp_path, sentiment_run):
    source = tmp_path / "reviews.csv"
    source.write_bytes(b'text,label\ngood one,1\n"bad \xff\nbytes",0\nfine,1\n\xe9t\xe9 latin-1,0\nlast,1\n')
    out = tmp_path / "o.csv"
    code, stdout, err = cli(capsys, "predict", sentiment_run.checkpoint, "--input", source, "--out", out)
    assert code == 0, err
    assert "line 3: text is not valid UTF-8 (byte 0xff at position 5)" in err
    assert "line 6: text is not valid UTF-8 (byte 0xe9 at position 1)" in err
    assert "3 reviews scored, 2 skipped" in stdout
    rows = _rows(out)
    assert [int(r["line"]) for r in rows] == [2, 5, 7]  # the quoted value on lines 3-4 still counts its lines
    expected = load_predictor(sentiment_run.checkpoint).sentiment(["good one", "fine", "last"])
    assert [float(r["p_positive"]) for r in rows] == pytest.approx(expected, abs=1e-12)
    pq.write_table(pa.table({"text": pa.array([b"good", b"\xff bad"], pa.binary())}), tmp_path / "r.parquet")
    code, stdout, err = cli(
        capsys, "predict", sentiment_run.checkpoint, "--input", tmp_path / "r.parquet", "--out", out
    )
    assert code == 0 and "row 2: text is not valid UTF-8" in err and "1 reviews scored, 1 skipped" in stdout
    code, _, err = cli(
        capsys, "predict", sentiment_run.checkpoint, "--input", source, "--out", tmp_path / "s.csv", "--strict"
    )
    assert code == 2 and "line 3: text is not valid UTF-8" in err and not (tmp_path / "s.csv").exists()


def test_parquet_lists_categoricals_and_bytes_are_read_as_ids(capsys, tmp_path, recommender_run, sentiment_run):
    histories = [["5006", "5009"], [], None, ["gone"], ["5012", "5015", "5018"]]
    source = tmp_path / "h.parquet"
    pq.write_table(
        pa.table(
            {
                "user_id": pa.array(["a", "b", "c", "d", "e"]).dictionary_encode(),
                "history": pa.array(histories, pa.list_(pa.string())),
            }
        ),
        source,
    )
    out = tmp_path / "o.csv"
    code, stdout, err = cli(capsys, "predict", recommender_run.checkpoint, "--input", source, "--out", out, "--k", 3)
    assert code == 0, err
    assert "row 2: history is empty" in err and "row 3: history is empty" in err
    assert "row 4: history has no lesson the model knows ('gone')" in err and "2 users scored, 3 skipped" in stdout
    expected = load_predictor(recommender_run.checkpoint).recommend_many([histories[0], histories[4]], k=3)
    rows = _rows(out)
    assert [r["user_id"] for r in rows] == ["a"] * 3 + ["e"] * 3
    assert [r["item_id"] for r in rows] == expected[0].items + expected[1].items
    pq.write_table(pa.table({"user_id": pa.array([b"u1"], pa.binary()), "history": ["5006 5009"]}), source)
    code, _, err = cli(capsys, "predict", recommender_run.checkpoint, "--input", source, "--out", out, "--k", 3)
    assert code == 0, err
    assert [r["item_id"] for r in _rows(out)] == expected[0].items and _rows(out)[0]["user_id"] == "u1"
    pq.write_table(pa.table({"text": pa.array([{"x": 1}])}), source)
    code, _, err = cli(capsys, "predict", sentiment_run.checkpoint, "--input", source, "--out", out)
    assert code == 2 and "column 'text' holds struct<x: int64> values, not text" in err.strip().splitlines()[-1]
    assert _rows(out)[0]["user_id"] == "u1"  # the earlier output is not replaced by a failed run


def test_interactions_with_iso_date_times_are_ordered_by_them(capsys, tmp_path, recommender_run):
    # the training importer reads a timestamp column of date-times: predict reads the same file
    events = [
        ("u1", "5006", "2024-03-02T10:00:00Z"),
        ("u1", "5015", "2024-03-01"),
        ("u2", "5003", "2024-03-01 08:00"),
        ("u1", "5009", "2024-03-02 09:59:59"),
        ("u2", "5021", "2024-02-30"),
        ("u2", "5024", "2024-03-01 09:00"),
    ]
    source = tmp_path / "clicks.csv"
    source.write_text("user_id,item_id,timestamp\n" + "".join(f"{u},{i},{t}\n" for u, i, t in events))
    out = tmp_path / "top.csv"
    code, stdout, err = cli(capsys, "predict", recommender_run.checkpoint, "--input", source, "--out", out, "--k", 3)
    assert code == 0, err
    assert "line 6: timestamp '2024-02-30' is not a number or a date-time" in err and "2 users scored" in stdout
    histories = [["5015", "5009", "5006"], ["5003", "5024"]]
    expected = load_predictor(recommender_run.checkpoint).recommend_many(histories, 3)
    rows = _rows(out)
    assert [r["item_id"] for r in rows if r["user_id"] == "u1"] == expected[0].items
    assert [r["item_id"] for r in rows if r["user_id"] == "u2"] == expected[1].items


def test_parquet_text_numbers_with_a_null_and_a_word_are_bad_rows(capsys, tmp_path, tiny_run):
    columns = {f"x{i}": ["0.5", "0.5", "0.5"] for i in range(1, 11)}
    columns["x3"] = ["0.5", None, "abc"]
    pq.write_table(pa.table(columns), tmp_path / "p.parquet")
    code, stdout, err = cli(
        capsys, "predict", tiny_run.checkpoint, "--input", tmp_path / "p.parquet", "--out", tmp_path / "o.csv"
    )
    assert code == 0, err
    assert "row 2: x3 is empty" in err and "row 3: x3 'abc' is not a number" in err
    assert "1 points scored, 2 skipped" in stdout


@pytest.mark.parametrize("sep", ["\t", ";"])
def test_a_tab_or_semicolon_file_named_csv_is_read_as_training_reads_it(capsys, tmp_path, tiny_run, sep):
    rng = np.random.default_rng(6)
    x = rng.normal(size=(4, 10)).astype(np.float32)
    header = sep.join(f"x{i}" for i in range(1, 11))
    (tmp_path / "p.csv").write_text(header + "\n" + "".join(sep.join(repr(float(v)) for v in row) + "\n" for row in x))
    code, stdout, err = cli(
        capsys, "predict", tiny_run.checkpoint, "--input", tmp_path / "p.csv", "--out", tmp_path / "o.csv"
    )
    assert code == 0, err
    assert "4 points scored, 0 skipped" in stdout
    expected = load_predictor(tiny_run.checkpoint).predict_rows(x)
    assert [float(r["p1"]) for r in _rows(tmp_path / "o.csv")] == pytest.approx(expected[:, 1].tolist(), abs=1e-6)


def test_a_needed_column_named_twice_is_a_one_line_error(capsys, tmp_path, sentiment_run):
    (tmp_path / "r.csv").write_text("text,label,text\nclear lesson,1,dull lesson\n")
    code, _, err = cli(
        capsys, "predict", sentiment_run.checkpoint, "--input", tmp_path / "r.csv", "--out", tmp_path / "o.csv"
    )
    assert code == 2 and "the column 'text' appears 2 times (columns 1, 3)" in err
    (tmp_path / "r.csv").write_text("text,label,label\nclear lesson,1,1\n")  # a column it does not read: fine
    code, stdout, err = cli(
        capsys, "predict", sentiment_run.checkpoint, "--input", tmp_path / "r.csv", "--out", tmp_path / "o.csv"
    )
    assert code == 0 and "1 reviews scored" in stdout, err


def test_a_history_written_as_a_list_with_commas_is_read_whole(capsys, tmp_path, recommender_run):
    source = tmp_path / "h.csv"
    source.write_text('user_id,history\nu1,"[5006, 5009, 5012]"\nu2,"5006,5009,5012"\nu3,5006 5009 5012\nu4,[]\n')
    out = tmp_path / "o.csv"
    code, stdout, err = cli(capsys, "predict", recommender_run.checkpoint, "--input", source, "--out", out, "--k", 3)
    assert code == 0, err
    assert "line 5: history is empty" in err and "3 users scored, 1 skipped" in stdout
    assert "does not know" not in stdout  # "5006," is 5006
    expected = load_predictor(recommender_run.checkpoint).recommend(["5006", "5009", "5012"], k=3).items
    rows = _rows(out)
    for user in ("u1", "u2", "u3"):
        assert [r["item_id"] for r in rows if r["user_id"] == user] == expected


def test_a_damaged_parquet_page_is_one_line_and_nothing_is_written(capsys, tmp_path, sentiment_run):
    source = tmp_path / "reviews.parquet"
    pq.write_table(
        pa.table({"text": [f"review {i}: a clear lesson, not boring" for i in range(20000)]}),
        source,
        compression="zstd",
        row_group_size=5000,
    )
    data = bytearray(source.read_bytes())
    third = len(data) // 3
    data[third : 2 * third] = b"\x55" * third  # the middle row groups' pages (the footer is intact)
    source.write_bytes(bytes(data))
    out = tmp_path / "scores.csv"
    code, _, err = cli(capsys, "predict", sentiment_run.checkpoint, "--input", source, "--out", out)
    assert code == 2 and "cannot be read as Parquet after row" in err.strip().splitlines()[-1]
    assert "Traceback" not in err and not out.exists() and list(tmp_path.iterdir()) == [source]


def test_interactions_exclude_lessons_seen_before_the_models_window(capsys, tmp_path, recommender_run):
    # max_len is 8: u1 saw 12 lessons, 10 of them distinct (5006 and 5009 twice, long ago)
    long = ["5006", "5009", "5000", "5003", "5006", "5009", "5012", "5015", "5018", "5021", "5024", "5027"]
    events = [("u1", item, 100 + t) for t, item in enumerate(long)] + [("u2", "5012", 5), ("u2", "5015", 6)]
    source = tmp_path / "clicks.csv"
    source.write_text("user_id,item_id,timestamp\n" + "".join(f"{u},{i},{t}\n" for u, i, t in reversed(events)))
    histories = [long, ["5012", "5015"]]
    predictor = load_predictor(recommender_run.checkpoint)
    out = tmp_path / "top.csv"
    for flags in ([], ["--include-seen"]):
        code, _, err = cli(
            capsys, "predict", recommender_run.checkpoint, "--input", source, "--out", out, "--k", 10, *flags
        )
        assert code == 0, err
        rows = _rows(out)
        expected = predictor.recommend_many(histories, k=10, exclude_seen=not flags)
        for user, answer in zip(("u1", "u2"), expected):
            mine = [r for r in rows if r["user_id"] == user]
            assert [r["item_id"] for r in mine] == answer.items
            assert [float(r["score"]) for r in mine] == pytest.approx(answer.scores, abs=1e-5)
            if flags:
                assert [r["seen"] == "true" for r in mine] == answer.seen
    assert not [r for r in _rows(out) if r["user_id"] == "u1" and r["seen"] == "false"]  # it saw all ten


def test_a_writer_that_cannot_start_leaves_no_temporary_file(capsys, tmp_path, tiny_run, monkeypatch):
    import pyarrow.csv as pacsv

    def refuse(*args, **kwargs):
        raise pa.ArrowInvalid("Unsupported Type: something odd")

    monkeypatch.setattr(pacsv, "CSVWriter", refuse)
    (tmp_path / "p.csv").write_text(",".join(f"x{i}" for i in range(1, 11)) + "\n" + ",".join(["0.5"] * 10) + "\n")
    out = tmp_path / "out" / "o.csv"
    code, _, err = cli(capsys, "predict", tiny_run.checkpoint, "--input", tmp_path / "p.csv", "--out", out)
    assert code == 2 and "cannot write CSV with columns ['line', 'p0', 'p1', 'predicted']" in err
    assert "Unsupported Type" in err and list((tmp_path / "out").iterdir()) == []  # no .o.csv.*.tmp left


def test_blank_lines_and_line_breaks_in_unread_columns_keep_line_numbers_true(capsys, tmp_path, sentiment_run):
    # the `line` column is how predictions are joined back to the file: it must be the file's own line
    source = tmp_path / "reviews.csv"
    source.write_text('text,note\ngood lesson,x\n\nfine lesson,"a note\non two lines"\n\n"",z\nlast lesson,y\n\n')
    out = tmp_path / "o.csv"
    code, stdout, err = cli(capsys, "predict", sentiment_run.checkpoint, "--input", source, "--out", out)
    assert code == 0, err
    assert [line for line in err.splitlines() if line.startswith("line ")] == ["line 7: text is empty"]
    assert "3 reviews scored, 1 skipped" in stdout  # blank lines are neither rows nor bad rows
    rows = _rows(out)
    assert [int(r["line"]) for r in rows] == [2, 4, 8]
    expected = load_predictor(sentiment_run.checkpoint).sentiment(["good lesson", "fine lesson", "last lesson"])
    assert [float(r["p_positive"]) for r in rows] == pytest.approx(expected, abs=1e-12)
    source.write_text("\ntext\ngood lesson\n")  # a blank line 1 is no header (it was skipped, line 2 taken)
    code, _, err = cli(capsys, "predict", sentiment_run.checkpoint, "--input", source, "--out", out)
    assert code == 2 and "no header line" in err


@pytest.mark.parametrize(
    "payload, message",
    [
        ("text\ngood lesson\n".encode("utf-16"), "a NUL byte; this is binary data or UTF-16 text, not a UTF-8 CSV"),
        (b"text,r\xe9sum\xe9\ngood lesson,x\n", "line 1: a column name is not UTF-8 text (byte 0xe9)"),
    ],
)
def test_a_utf16_file_or_a_latin1_header_is_one_line(capsys, tmp_path, sentiment_run, payload, message):
    (tmp_path / "r.csv").write_bytes(payload)
    code, _, err = cli(
        capsys, "predict", sentiment_run.checkpoint, "--input", tmp_path / "r.csv", "--out", tmp_path / "o.csv"
    )
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
