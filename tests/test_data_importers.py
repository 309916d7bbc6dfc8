"""Importers: every bad file is one DataError naming the file and the line or column; folders; the CLI."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.cli.main import main
from core.data.importers import Column, read_table
from core.errors import DataError
from core.tasks import create_task

HEADER = "user_id,item_id,timestamp,event\n"


def load(task: str, path) -> None:
    create_task(task).load_data(str(path), 0)


def write(tmp_path, name: str, text: str | bytes):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


@pytest.mark.parametrize(
    "content,expected",
    [
        (b"", "empty file"),
        (HEADER.encode(), "no data rows"),
        (b"user_id,timestamp\nu1,5\n", "line 1: missing column 'item_id'"),
        ((HEADER + "u1,a,10,click\nu1,b,yesterday,click\n").encode(), "line 3, column 'timestamp': 'yesterday'"),
        ((HEADER + "u1,a,10,click\nu1,b,11,purchase\n").encode(), "line 3, column 'event': 'purchase'"),
        ((HEADER + "u1,a,10,click\nu1,b,,click\n").encode(), "line 3, column 'timestamp'"),
    ],
)
def test_interaction_file_errors_name_file_and_place(tmp_path, content, expected):
    path = write(tmp_path, "clicks.csv", content)
    with pytest.raises(DataError) as err:
        load("recommender", path)
    assert str(path) in str(err.value) and expected in str(err.value)


def test_non_utf8_text_names_line_and_column(tmp_path):
    path = write(tmp_path, "reviews.csv", b'text,label\n"fine",1\n"caf\xe9 ok",0\n')
    with pytest.raises(DataError, match=r"reviews\.csv: line 3, column 5 .*not valid UTF-8"):
        load("sentiment", path)


def test_unknown_sentiment_label(tmp_path):
    path = write(tmp_path, "reviews.csv", "text,label\ngood,positive\nmeh,neutral\n")
    with pytest.raises(DataError, match=r"reviews\.csv: line 3, column 'label': 'neutral' is not a known value"):
        load("sentiment", path)


def test_ranking_feature_and_label_types(tmp_path):
    bad_feature = write(tmp_path, "a.csv", "query_id,doc_id,label,f1,f2\nq,d1,1,0.5,0.1\nq,d2,0,abc,0.2\n")
    with pytest.raises(DataError, match=r"a\.csv: line 3, column 'f1': 'abc' is not a number"):
        load("ranking", bad_feature)
    bad_label = write(tmp_path, "b.csv", "query_id,doc_id,label,f1\nq,d1,1.5,0.5\n")
    with pytest.raises(DataError, match=r"b\.csv: line 2, column 'label': '1.5' is not a whole number"):
        load("ranking", bad_label)
    no_features = write(tmp_path, "c.csv", "query_id,doc_id,label\nq,d1,1\n")
    with pytest.raises(DataError, match=r"c\.csv: line 1: no feature columns"):
        load("ranking", no_features)


def test_parquet_wrong_type_names_row_and_column(tmp_path):
    path = tmp_path / "clicks.parquet"
    pq.write_table(pa.table({"user_id": [1, 1], "item_id": [2, 3], "timestamp": ["5", "later"]}), path)
    with pytest.raises(DataError, match=r"clicks\.parquet: row 2, column 'timestamp': 'later'"):
        load("recommender", path)


def test_folder_reads_every_file_and_blames_the_bad_one(tmp_path):
    write(tmp_path, "part1.csv", HEADER + "".join(f"u{i % 5},i{i % 7},{i},click\n" for i in range(50)))
    write(tmp_path, "part2.csv", HEADER + "".join(f"u{i % 5},i{i % 9},{100 + i},complete\n" for i in range(50)))
    table = read_table(tmp_path, [Column("user_id", "id"), Column("timestamp", "number")])
    assert table.num_rows == 100
    data = create_task("recommender").load_data(str(tmp_path), 0)
    assert data.info["n_items"] == 9 and data.info["interactions"] == 100
    bad = write(tmp_path, "part3.csv", HEADER + "u1,i1,x,click\n")
    with pytest.raises(DataError, match="part3.csv: line 2"):
        load("recommender", tmp_path)
    bad.unlink()


@pytest.mark.parametrize(
    "task,text,expected",
    [
        ("recommender", HEADER + "u1,a,1,click\nu2,b,2,click\n", "no user has the 3 interactions"),
        ("ranking", "query_id,doc_id,label,f1\nq1,d1,1,0.5\nq1,d2,0,0.1\n", "at least 10 queries"),
        ("sentiment", "text,label\ngood,1\nbad,0\n", "at least 10 reviews"),
    ],
)
def test_too_little_data_is_a_data_error(tmp_path, task, text, expected):
    path = write(tmp_path, "small.csv", text)
    with pytest.raises(DataError, match=expected):
        load(task, path)


def test_unsupported_or_missing_paths(tmp_path):
    xlsx = write(tmp_path, "x.xlsx", b"PK\x03\x04\x14\x00\x06\x00" + bytes(range(256)))  # a zip: binary
    with pytest.raises(DataError, match=r"x.xlsx: line 1, column 6 \(byte\): a NUL byte; this is binary data"):
        read_table(xlsx, [])
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="holds no .csv or .parquet"):
        read_table(tmp_path / "empty", [])


@pytest.mark.parametrize("task,suffix", [("recommender", "csv"), ("ranking", "parquet"), ("sentiment", "csv")])
def test_data_generate_round_trips_through_the_importer(tmp_path, capsys, task, suffix):
    out = tmp_path / f"{task}.{suffix}"
    assert main(["data", "generate", "--task", task, "--rows", "3000", "--out", str(out)]) == 0
    assert "wrote 3,000" in capsys.readouterr().err
    data = create_task(task).load_data(str(out), 0)
    assert len(next(iter(data.train.values()))) > 0


def test_data_generate_bad_input_is_one_line_exit_2(tmp_path, capsys):
    assert main(["data", "generate", "--task", "ranking", "--rows", "10", "--out", str(tmp_path / "x.txt")]) == 2
    assert main(["data", "generate", "--task", "ranking", "--rows", "0", "--out", str(tmp_path / "x.csv")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and "--out" in lines[0] and "--rows" in lines[1]


def test_train_cli_reports_a_bad_file_in_one_line(tmp_path, capsys):
    path = write(tmp_path, "clicks.csv", "who,what\n1,2\n")
    assert main(["train", "--task", "recommender", "--data", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "clicks.csv: line 1: missing column 'user_id'" in err
