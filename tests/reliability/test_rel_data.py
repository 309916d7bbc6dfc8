"""Bad data files: each is refused with one line naming the file, the line (as an editor shows it) and the
column, never a traceback; a huge query trains in bounded memory."""

from __future__ import annotations

import os
import resource
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.errors import AmpConsoleError, DataError
from core.tasks import create_task

pytestmark = pytest.mark.reliability

HEADER = "query_id,doc_id,label,f1,f2\n"
ROW = "q,d,1,0.1,0.2\n"


def load_error(path, task: str = "ranking") -> str:
    """The one-line error loading `path` gives (fails the test if it loads or raises anything else)."""
    with pytest.raises(AmpConsoleError) as err:
        create_task(task).load_data(str(path), 0)
    message = str(err.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def write(tmp_path, name: str, content: str | bytes):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


HOSTILE_CSV = [
    (
        "dup_feature.csv",
        "query_id,doc_id,label,f1,f1\n" + ROW,
        "dup_feature.csv: line 1: column 'f1' appears 2 times; column names must be unique",
    ),
    (
        "dup_label.csv",
        "query_id,doc_id,label,label,f1\n" + ROW,
        "dup_label.csv: line 1: column 'label' appears 2 times",
    ),
    ("inf.csv", HEADER + ROW + "q,e,0,inf,0.3\n", "inf.csv: line 3, column 'f1': 'inf' is not a finite number"),
    ("minus_inf.csv", HEADER + ROW + ROW + "q,e,0,0.5,-inf\n", "line 4, column 'f2': '-inf' is not a finite"),
    (
        "overflow.csv",
        HEADER + ROW + "q,e,0,1e39,0.3\n",
        "overflow.csv: line 3, column 'f1': '1e+39' is not a number that fits in float32",
    ),
    ("nan.csv", HEADER + ROW + "q,e,0,nan,0.3\n", "line 3, column 'f1': 'nan' marks a missing value"),
    ("na.csv", HEADER + ROW * 5 + "q,e,NA,0.5,0.3\n", "na.csv: line 7, column 'label': 'NA' marks a missing value"),
    ("null.csv", HEADER + ROW + "q,e,0,0.5,null\n", "line 3, column 'f2': 'null' marks a missing value"),
    ("empty_field.csv", HEADER + ROW + "q,e,,0.5,0.3\n", "line 3, column 'label': the field is empty"),
    ("empty_id.csv", HEADER + ROW + ",e,0,0.5,0.3\n", "line 3, column 'query_id': the field is empty"),
    (
        "huge_label.csv",
        HEADER + ROW + "q,e,99999999999999999999999,0.5,0.3\n",
        "line 3, column 'label': '1e+23' is not a whole number of a usable size",
    ),
    ("negative.csv", HEADER + ROW + "q,e,-1,0.5,0.3\n", "line 3, column 'label': '-1' is not at least 0"),
    ("empty.csv", "", "empty.csv: empty file"),
    ("header_only.csv", HEADER, "header_only.csv: empty file (a header at line 1 but no data rows)"),
    ("garbage.csv", bytes(range(256)) * 8, "garbage.csv: line 1, column 1 (byte): a NUL byte"),
    ("utf16.csv", HEADER.encode("utf-16"), "utf16.csv: line 1, column 4 (byte): a NUL byte"),
    (
        "latin1.csv",
        (HEADER + "caf\xe9,d,1,0.1,0.2\n").encode("latin-1"),
        "latin1.csv: line 2, column 4 (byte): text is not valid UTF-8",
    ),
    (
        "blank_lines.csv",
        HEADER + ROW + "\n\n" + '"q\nstill q",e,0,0.5,0.3\n' + "q,f,0,abc,0.3\n",
        "blank_lines.csv: line 7, column 'f1': 'abc' is not a number",
    ),
]


@pytest.mark.parametrize("name,content,expected", HOSTILE_CSV, ids=[case[0] for case in HOSTILE_CSV])
def test_hostile_csv_is_one_line_naming_file_line_and_column(tmp_path, name, content, expected):
    message = load_error(write(tmp_path, name, content))
    assert str(tmp_path) in message and expected in message


@pytest.mark.parametrize("name,separator,said", [("semicolon.csv", ";", "';'"), ("tabs.csv", "\t", "tabs")])
def test_other_separators_are_sniffed_and_a_wrong_given_one_is_named(tmp_path, name, separator, said):
    from core.data.importers import ReadOptions, read_table
    from core.tasks.ranking.task import RANKING_COLUMNS

    path = write(tmp_path, name, HEADER.replace(",", separator) + ROW.replace(",", separator))
    table = read_table(path, RANKING_COLUMNS, prefix_columns="f")  # sniffed: it loads
    assert table.num_rows == ROW.count("\n") and "f1" in table.column_names
    with pytest.raises(DataError) as err:
        read_table(path, RANKING_COLUMNS, prefix_columns="f", options=ReadOptions(delimiter=","))
    message = str(err.value)
    assert "\n" not in message and name in message and "missing column 'query_id'" in message
    assert f"line 1 seems separated by {said}" in message and "--delimiter" in message


def test_a_ragged_row_is_located(tmp_path):
    path = write(tmp_path, "ragged.csv", HEADER + ROW + "\n" + "q,e,0,0.1,0.3,0.4\n")
    message = load_error(path)
    assert "ragged.csv: line 4: cannot parse CSV: 6 fields where the header has 5" in message


def test_a_long_header_is_shown_truncated(tmp_path):
    names = ",".join(f"column_number_{i}" for i in range(40))
    message = load_error(write(tmp_path, "wide.csv", names + "\n" + ",".join("1" * 40) + "\n"))
    shown = message.split("found: ", 1)[1].rstrip(")")
    assert shown.startswith("column_number_0, column_number_1") and shown.endswith("...") and len(shown) <= 80


def test_a_link_names_its_target(tmp_path):
    target = write(tmp_path, "target.txt", "a,b\n1,2\n")
    link = tmp_path / "data.csv"
    link.symlink_to(target)
    assert load_error(link).startswith(f"{target}: line 1: missing column")
    dangling = tmp_path / "gone.csv"
    dangling.symlink_to(tmp_path / "missing.csv")
    assert "gone.csv: a link to" in load_error(dangling) and "which does not exist" in load_error(dangling)


def _refused_without_hanging(path) -> str:
    """The error for `path`, from a thread: opening a FIFO would block for ever, so a hang fails fast."""
    result: list = []

    def attempt():
        try:
            create_task("ranking").load_data(str(path), 0)
            result.append("loaded")
        except AmpConsoleError as exc:
            result.append(str(exc))

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(20)
    if thread.is_alive():  # unblock the reader so the thread ends, then fail
        with open(path, "wb"):
            pass
        thread.join(5)
        pytest.fail(f"reading {path} blocked: the FIFO was opened")
    return result[0]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_fifo_or_a_device_is_refused_unopened(tmp_path):
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    assert _refused_without_hanging(fifo) == (
        f"{fifo}: a named pipe (FIFO), not a regular file; use a .csv or .parquet file or a folder of them"
    )
    device = tmp_path / "zeros.csv"
    device.symlink_to(os.devnull)
    assert _refused_without_hanging(device).startswith(f"{os.devnull}: a device, not a regular file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_folder_skips_a_fifo_and_reads_its_files(tmp_path):
    os.mkfifo(tmp_path / "pipe.csv")
    write(tmp_path, "part.csv", HEADER + "".join(f"q{i // 4},d{i},{i % 3},{i / 10},0.5\n" for i in range(200)))
    data = create_task("ranking").load_data(str(tmp_path), 0)
    assert data.info["features"] == 2


def test_hostile_parquet(tmp_path):
    base = {"query_id": ["q", "q"], "doc_id": ["a", "b"], "label": [1, 0]}
    pq.write_table(pa.table({**base, "f1": [0.1, float("nan")]}), tmp_path / "nan.parquet")
    assert "nan.parquet: row 2, column 'f1': 'nan' is not a finite number" in load_error(tmp_path / "nan.parquet")
    pq.write_table(pa.table({**base, "f1": [float("inf"), 0.0]}), tmp_path / "inf.parquet")
    assert "inf.parquet: row 1, column 'f1': 'inf' is not a finite number" in load_error(tmp_path / "inf.parquet")
    pq.write_table(pa.table({**base, "f1": [0.1, 1e300]}), tmp_path / "big.parquet")
    assert "row 2, column 'f1': '1e+300' is not a number that fits in float32" in load_error(tmp_path / "big.parquet")
    pq.write_table(pa.table({**base, "doc_id": ["a", None], "f1": [0.1, 0.2]}), tmp_path / "null.parquet")
    assert "row 2, column 'doc_id': the value is missing (null)" in load_error(tmp_path / "null.parquet")
    columns = [pa.array(v) for v in (*base.values(), [0.1, 0.2], [0.3, 0.4])]
    pq.write_table(pa.table(columns, names=[*base, "f1", "f1"]), tmp_path / "dup.parquet")
    assert load_error(tmp_path / "dup.parquet").endswith(
        "dup.parquet: column 'f1' appears 2 times; column names must be unique"
    )
    write(tmp_path, "text.parquet", "not parquet\n")
    assert "text.parquet: not a readable Parquet file" in load_error(tmp_path / "text.parquet")


def test_other_tasks_name_missing_markers_too(tmp_path):
    reviews = write(tmp_path, "reviews.csv", "text,label\ngood,NA\nfine,NA\n")
    assert "reviews.csv: line 2, column 'label': 'NA' marks a missing value" in load_error(reviews, "sentiment")
    clicks = write(tmp_path, "clicks.csv", "user_id,item_id,timestamp\nu,a,1\nu,b,NaN\n")
    assert "clicks.csv: line 3, column 'timestamp': 'NaN' marks a missing value" in load_error(clicks, "recommender")
    with pytest.raises(DataError, match=r"clicks2\.csv: line 2, column 'timestamp': 'inf' is not a finite number"):
        create_task("recommender").load_data(
            str(write(tmp_path, "clicks2.csv", "user_id,item_id,timestamp\nu,a,inf\n")), 0
        )


def _huge_query_file(tmp_path, big: int = 20_000, singles: int = 8_000):
    """One query with `big` candidates plus `singles` one-candidate queries (0.8 MB): padding every query to the
    longest would take GBs."""
    rng = np.random.default_rng(0)
    grades = rng.integers(0, 3, big)
    feats = rng.normal(size=(big, 2)).round(3)
    rows = [f"big,d{i},{grades[i]},{feats[i, 0]},{feats[i, 1] + grades[i]}\n" for i in range(big)]
    rows += [f"s{i},d,{i % 2},0.5,{i % 7}\n" for i in range(singles)]
    return write(tmp_path, "huge_query.csv", HEADER + "".join(rows))


def test_a_huge_query_loads_and_trains_in_bounded_memory(tmp_path):
    from core.config import RunConfig
    from core.engine.trainer import train

    path = _huge_query_file(tmp_path)
    assert path.stat().st_size < 1_000_000
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    candidates = 28_000
    for seed in (0, 1):  # seed 0 validates on the huge query, seed 1 trains on it
        data = create_task("ranking").load_data(str(path), seed)
        splits = (data.train, data.val, data.test)
        held = sum(t.numel() * t.element_size() for split in splits for t in split.values())
        assert held < candidates * 4 * (2 * 4 + 8 + 8)  # ~4 padded cells per candidate, not 8,001 x 20,000
        assert sum(int((split["label"] >= 0).sum()) for split in splits) == candidates  # each kept once
    assert data.train["label"].shape[1] <= 256 and "qid" not in data.train
    assert data.notes == [
        "ranking: queries of up to 20,000 candidates train as lists of 8 of their candidates "
        "(memory stays within a few times the data); evaluation ranks every query whole"
    ]
    ended = train(
        RunConfig.for_task(
            "ranking",
            data=str(path),
            device="cpu",
            precision="fp32",
            max_steps=3,
            batch_size=64,
            seed=1,
            out_dir=str(tmp_path / "run"),
        )
    )
    assert ended.status == "completed", ended.message
    assert all(np.isfinite(v) for v in ended.metrics.values())
    growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - peak_before
    assert growth < 600 * 2**20, f"peak memory grew by {growth / 2**20:.0f} MiB"


@pytest.mark.parametrize(
    "name,content,said",
    [
        ("blob.bin", bytes(range(1, 256)) * 4, "line 1 reads '\\x01\\x02"),
        ("notes.out", "hello\nthere\n", "line 1 reads 'hello'"),
        ("zeros.bin", b"PK\x03\x04\x00\x00" + bytes(100), "a NUL byte; this is binary data or UTF-16 text, not a text"),
    ],
)
def test_a_file_of_another_suffix_that_reads_as_nothing_says_what_was_tried(tmp_path, name, content, said):
    message = load_error(write(tmp_path, name, content), "sentiment")
    assert said in message


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_query_sizes_from_a_fifo_are_refused_unopened(tmp_path):
    from core.data.importers import ReadOptions, read_table
    from core.tasks.ranking.task import RANKING_COLUMNS

    data = write(tmp_path, "rank.train", "1 1:0.5\n0 1:0.25\n")
    os.mkfifo(tmp_path / "rank.train.query")  # beside it: not a file, so not taken
    assert "no query sizes" in load_error(data)
    result: list = []

    def attempt():
        try:
            read_table(data, RANKING_COLUMNS, "f", ReadOptions(query_file=str(tmp_path / "rank.train.query")))
        except AmpConsoleError as exc:
            result.append(str(exc))

    thread = threading.Thread(target=attempt, daemon=True)
    thread.start()
    thread.join(20)
    if thread.is_alive():
        with open(tmp_path / "rank.train.query", "wb"):
            pass
        pytest.fail("the FIFO was opened")
    assert result and result[0].startswith(f"{tmp_path / 'rank.train.query'}: cannot read the query sizes")


def test_hostile_query_sizes_and_label_text_lines(tmp_path):
    write(tmp_path, "rank.train.query", "2\nabc\n")
    message = load_error(write(tmp_path, "rank.train", "1 1:0.5\n0 1:0.25\n"))
    assert message.startswith(f"{tmp_path / 'rank.train.query'}: line 2: 'abc' is not a query size")
    message = load_error(write(tmp_path, "reviews.txt", "1 fine\n0 poor\x1f film\n"), "sentiment")
    assert message == f"{tmp_path / 'reviews.txt'}: a line holds a control character (unit separator, 0x1f); remove it"
    from core.data.importers import ReadOptions, read_table
    from core.data.sequences import FILE_ORDER_COLUMNS

    seq = write(tmp_path, "seq.txt", "1 2\n1 3\n2  4\x1f 5\n")
    with pytest.raises(DataError) as err:
        read_table(seq, FILE_ORDER_COLUMNS, options=ReadOptions(delimiter="\\s+"))
    assert str(err.value) == (
        f"{seq}: line 3: a control character (unit separator, 0x1f) in a file separated by whitespace; remove it"
    )
