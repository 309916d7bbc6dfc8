"""Public data sets in their own conventions, read and trained on unmodified: LightGBM's / XGBoost's ranking
files (svmlight without qid: plus a .query / .group file of query sizes), SST-2's and fastText's `label text`
lines, SASRec's `user item` files in time order; files of any suffix recognised by their content."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_in_process import cli

from core.config import DATA_FORMATS, RunConfig
from core.data import formats
from core.data.importers import ReadOptions, read_table
from core.data.sequences import INTERACTION_COLUMNS
from core.errors import DataError
from core.tasks import create_task
from core.tasks.ranking.task import RANKING_COLUMNS
from core.tasks.sentiment.task import REVIEW_COLUMNS

TRAIN = ["--max-steps", "2", "--device", "cpu", "--threads", "1", "--batch-size", "8", "--json"]


def write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


def rank_file(path, queries: int, seed: int = 0, sizes_suffix: str | None = ".query", dense: bool = False) -> list[int]:
    """LightGBM's lambdarank example layout: `label index:value ...` lines without qid:, the query sizes (one
    per line) in PATH.query (or PATH.group, XGBoost's name) beside it; `dense`: every index on every line."""
    rng = np.random.default_rng(seed)
    lines, sizes = [], []
    for _ in range(queries):
        sizes.append(int(rng.integers(3, 7)))
        for _ in range(sizes[-1]):
            x = rng.random(4)
            lines.append(
                f"{int(x[0] * 3)} " + " ".join(f"{k + 1}:{v:.3f}" for k, v in enumerate(x) if dense or v > 0.3)
            )
    write(path, "\n".join(lines) + "\n")
    if sizes_suffix:
        write(path.with_name(path.name + sizes_suffix), "\n".join(map(str, sizes)) + "\n")
    return sizes


def train_cli(capsys, *args: str) -> tuple[dict, str]:
    code, out, err = cli(capsys, "train", *args, *TRAIN)
    assert code == 0, err
    return json.loads(out.strip().splitlines()[-1]), err


def one_line_error(call) -> str:
    with pytest.raises(DataError) as err:
        call()
    assert "\n" not in str(err.value)
    return str(err.value)


# ---- svmlight without qid: and its query sizes ----------------------------------------------------------------


@pytest.mark.parametrize("sizes_suffix", [".query", ".group"])
def test_lightgbm_rank_files_train_as_they_are(tmp_path, capsys, sizes_suffix):
    rank_file(tmp_path / "rank.train", 30, sizes_suffix=sizes_suffix)
    rank_file(tmp_path / "rank.test", 10, seed=1, sizes_suffix=sizes_suffix)
    summary, err = train_cli(
        capsys,
        "--task",
        "ranking",
        "--data",
        str(tmp_path / "rank.train"),
        "--test-data",
        str(tmp_path / "rank.test"),
        "--out",
        str(tmp_path / "run"),
    )
    assert summary["test_metrics"]
    assert (
        f"rank.train: read as svmlight / LETOR (by content); 30 queries from rank.train{sizes_suffix} "
        "(beside it; the lines have no qid:)"
    ) in err
    assert f"rank.test: read as svmlight / LETOR (by content); 10 queries from rank.test{sizes_suffix}" in err


def test_the_sizes_make_the_queries(tmp_path):
    sizes = rank_file(tmp_path / "rank.train", 5)
    notes: list[str] = []
    table = read_table(tmp_path / "rank.train", RANKING_COLUMNS, "f", notes=notes)
    assert table.column("query_id").to_pylist() == [q for q, n in enumerate(sizes) for _ in range(n)]
    assert table.column("doc_id").to_pylist()[:2] == ["1", "2"]  # the line numbers, as with qid:
    assert len(notes) == 1 and "5 queries from rank.train.query" in notes[0]


@pytest.mark.parametrize("dense", [False, True])  # the general path, and the fast one for regular lines
def test_lines_without_qid_read_in_blocks_as_the_same_lines_with_qid(tmp_path, dense):
    from core.data import svmlight

    sizes = rank_file(tmp_path / "rank.train", 60, dense=dense)
    qids = [q for q, n in enumerate(sizes) for _ in range(n)]
    lines = (tmp_path / "rank.train").read_text().splitlines()
    write(tmp_path / "with.svm", "".join(f"{line.replace(' ', f' qid:{q} ', 1)}\n" for q, line in zip(qids, lines)))
    plain, plain_lines = svmlight.read_svmlight(tmp_path / "rank.train", block=97, with_qid=False)  # many blocks
    with_qid, _ = svmlight.read_svmlight(tmp_path / "with.svm")
    assert plain.drop_columns(["query_id"]).equals(with_qid.drop_columns(["query_id"]).combine_chunks())
    assert plain_lines.tolist() == list(range(1, len(lines) + 1))
    table = read_table(tmp_path / "rank.train", RANKING_COLUMNS, "f")
    assert table.column("query_id").to_pylist() == qids
    write(tmp_path / "rank.train", "\n".join([*lines[:2], lines[2] + " 7"]) + "\n")
    message = one_line_error(lambda: read_table(tmp_path / "rank.train", RANKING_COLUMNS, "f"))
    assert message == f"{tmp_path / 'rank.train'}: line 3: '7' is not <index>:<value>"


def test_query_file_names_the_sizes_anywhere(tmp_path, capsys):
    sizes = rank_file(tmp_path / "train.txt", 20, sizes_suffix=None)
    sizes_file = write(tmp_path / "elsewhere.sizes", "\n".join(map(str, sizes)) + "\n")
    message = one_line_error(lambda: read_table(tmp_path / "train.txt", RANKING_COLUMNS, "f"))
    assert message == (
        f"{tmp_path / 'train.txt'}: svmlight lines without qid: and no query sizes: put them in "
        "train.txt.query (or .group) beside it, one query's row count per line, or name that file "
        "with --query-file (setting query_file), or add qid:<id> after each label"
    )
    _, err = train_cli(
        capsys,
        "--task",
        "ranking",
        "--data",
        str(tmp_path / "train.txt"),
        "--query-file",
        str(sizes_file),
        "--out",
        str(tmp_path / "run"),
    )
    assert "train.txt: 20 queries from elsewhere.sizes (the query_file; the lines have no qid:)" in err
    assert RunConfig.load_toml(tmp_path / "run" / "config.toml").query_file == str(sizes_file)


def test_sizes_that_do_not_count_the_rows_are_one_error(tmp_path):
    sizes = rank_file(tmp_path / "rank.train", 4)
    write(tmp_path / "rank.train.query", "\n".join(map(str, sizes[:-1])) + "\n")
    message = one_line_error(lambda: read_table(tmp_path / "rank.train", RANKING_COLUMNS, "f"))
    assert message == (
        f"{tmp_path / 'rank.train.query'}: its 3 query sizes add up to {sum(sizes[:-1])} rows, but "
        f"{tmp_path / 'rank.train'} has {sum(sizes)} data rows; the sizes must count every row once, "
        "in order"
    )
    write(tmp_path / "rank.train.query", "3\n\n2 1\n")
    message = one_line_error(lambda: read_table(tmp_path / "rank.train", RANKING_COLUMNS, "f"))
    assert message.startswith(f"{tmp_path / 'rank.train.query'}: line 3: '2 1' is not a query size")


def test_a_query_file_for_lines_with_qid_is_refused(tmp_path):
    path = write(tmp_path / "train.svm", "1 qid:1 1:0.5\n0 qid:1 1:0.1\n")
    message = one_line_error(lambda: read_table(path, RANKING_COLUMNS, "f", ReadOptions(query_file="q.txt")))
    assert "its lines name their queries (qid:); query_file q.txt is for svmlight files without qid:" in message


# ---- label text lines ----------------------------------------------------------------------------------------------


def sst2(path, n: int = 60):
    """SST-2's stsa.binary.* layout: `label text`, the text tokenised with commas of its own."""
    lines = [f"{i % 2} a {'moving , funny' if i % 2 else 'dull , tired'} film , number {i} ." for i in range(n)]
    return write(path, "\n".join(lines) + "\n")


def test_sst2_lines_train_as_they_are(tmp_path, capsys):
    path = sst2(tmp_path / "stsa.binary.train")
    table = read_table(path, REVIEW_COLUMNS)
    assert table.column("text")[1].as_py() == "a moving , funny film , number 1 ."  # the comma is text
    assert table.column("label").to_pylist()[:2] == ["0", "1"]
    summary, err = train_cli(
        capsys, "--task", "sentiment", "--data", str(path), "-o", "buckets=4096", "--out", str(tmp_path / "run")
    )
    assert "stsa.binary.train: read as label text lines (by content)" in err and summary["metrics"]


def test_fasttext_labels_and_a_txt_suffix(tmp_path):
    text = "".join(f"__label__{'pos' if i % 2 else 'neg'} {'good' if i % 2 else 'bad'}\tfilm {i}\n" for i in range(20))
    notes: list[str] = []
    table = read_table(write(tmp_path / "reviews.txt", "\n" + text), REVIEW_COLUMNS, notes=notes)
    assert table.column("label").to_pylist()[:2] == ["neg", "pos"] and table.column("text")[0].as_py() == "bad\tfilm 0"
    assert notes == ["reviews.txt: read as label text lines (by content)"]
    data = create_task("sentiment", {"buckets": 4096}).load_data(str(tmp_path / "reviews.txt"), 0)
    assert len(data.train["label"]) == 16


def test_label_text_asked_for_and_its_bad_lines_named(tmp_path):
    path = write(tmp_path / "mixed.csv", "positive fine, yes\nnegative poor\n\nmaybe so-so\nnegative\tdull\n")
    with pytest.raises(DataError, match="cannot parse CSV"):  # by content: too few lines read `label text`
        read_table(path, REVIEW_COLUMNS)
    options = ReadOptions(data_format="label_text")
    message = one_line_error(lambda: read_table(path, REVIEW_COLUMNS, options=options))
    assert (
        message == f"{path}: line 4, column 'label': 'maybe' is not a known value (1, positive, pos, true, 0, "
        "negative, neg, false)"
    )
    write(path, "positive fine, yes\nnegativity\n")
    message = one_line_error(lambda: read_table(path, REVIEW_COLUMNS, options=options))
    assert message == (
        f"{path}: line 2: not a 'label text' line (a label such as 1 or __label__pos, a blank, then the text)"
    )


def test_a_tab_separated_file_with_a_header_is_not_label_text(tmp_path):
    path = write(tmp_path / "dev.tsv", "sentence\tlabel\n" + "".join(f"1 fine film {i}\t1\n" for i in range(5)))
    assert read_table(path, REVIEW_COLUMNS).column("text")[0].as_py() == "1 fine film 0"


# ---- interactions in file order ------------------------------------------------------------------------------------


def sasrec(path, users: int = 12, per_user: int = 6, rating: bool = False):
    """SASRec's input: `user item` per line, space-separated, each user's lines in time order (interleaved)."""
    lines = [
        f"{u} {100 + (u * 3 + k) % 17}" + (f" {1 + k % 5}" if rating else "")
        for k in range(per_user)
        for u in range(1, users + 1)
    ]
    return write(path, "\n".join(lines) + "\n")


def test_sasrec_user_item_files_train_in_file_order(tmp_path, capsys):
    path = sasrec(tmp_path / "ml-1m.txt")
    message = one_line_error(lambda: create_task("recommender").load_data(str(path), 0))
    assert "missing column 'timestamp'" in message and message.endswith(
        "if each user's lines are in time order (SASRec's `user item` files), say so with -o file_order=true "
        "(the recommender's option File order)"
    )
    summary, err = train_cli(
        capsys,
        "--task",
        "recommender",
        "--data",
        str(path),
        "-o",
        "file_order=true",
        "-o",
        "d_model=16",
        "--out",
        str(tmp_path / "run"),
    )
    assert "recommender: each user's history is their lines in file order (file_order)" in err
    assert summary["test_metrics"]


@pytest.mark.parametrize("rating", [False, True])
def test_file_order_holds_out_each_users_last_lines(tmp_path, rating):
    path = sasrec(tmp_path / "seq.txt", rating=rating)
    data = create_task("recommender", {"file_order": True, "d_model": 16}).load_data(str(path), 0)
    items = [int(i) for i in data.vocabulary["item_id"]]
    test_items = [items[t - 1] for t in data.test["target"].tolist()]
    val_items = [items[t - 1] for t in data.val["target"].tolist()]
    assert test_items == [100 + (u * 3 + 5) % 17 for u in range(1, 13)]  # each user's last line
    assert val_items == [100 + (u * 3 + 4) % 17 for u in range(1, 13)]  # and the one before


def test_a_header_with_a_timestamp_is_not_read_in_file_order(tmp_path):
    path = write(
        tmp_path / "log.csv",
        "user_id,item_id,timestamp\n" + "".join(f"u{u},i{k},{100 - k}\n" for u in range(4) for k in range(4)),
    )
    by_time = create_task("recommender", {"d_model": 16}).load_data(str(path), 0)
    in_order = create_task("recommender", {"d_model": 16, "file_order": True}).load_data(str(path), 0)
    names = in_order.vocabulary["item_id"]
    assert {names[t - 1] for t in in_order.test["target"].tolist()} == {"i3"}
    assert {by_time.vocabulary["item_id"][t - 1] for t in by_time.test["target"].tolist()} == {"i0"}


def test_whitespace_is_a_sniffed_delimiter(tmp_path):
    path = write(tmp_path / "u.data", "user_id   item_id\ttimestamp\n  1  10   100 \n1\t11\t101\n2 10 102\n")
    table = read_table(path, INTERACTION_COLUMNS)
    assert table.column("item_id").to_pylist() == ["10", "11", "10"] and table.column("timestamp")[2].as_py() == 102
    assert formats.sniff_delimiter(path, set()) == formats.WHITESPACE
    given = read_table(path, INTERACTION_COLUMNS, options=ReadOptions(delimiter="\\s+"))
    assert given.equals(table)
    comma = write(tmp_path / "r.csv", "text,label\na fine film,1\nsome poor film,0\n")  # a comma still wins
    assert formats.sniff_delimiter(comma, {"text", "label"}) == ","


# ---- any suffix, by content ----------------------------------------------------------------------------------------


def test_files_of_any_suffix_are_read_by_content(tmp_path):
    notes: list[str] = []
    csv_file = write(tmp_path / "export.out", "text;label\nfine film;1\npoor film;0\n")
    assert read_table(csv_file, REVIEW_COLUMNS, notes=notes).num_rows == 2
    json_file = write(tmp_path / "events.log", '{"text": "fine", "label": 1}\n{"text": "poor", "label": 0}\n')
    assert read_table(json_file, REVIEW_COLUMNS, notes=notes).column("label").to_pylist() == ["1", "0"]
    assert notes == [
        "export.out: read as delimited text separated by ';' (by content)",
        "events.log: read as JSON lines (by content)",
    ]


def test_a_file_that_matches_nothing_says_what_was_tried(tmp_path):
    path = write(tmp_path / "notes.md", "Some notes about the data\nnothing: here, to; read\n")
    message = one_line_error(lambda: read_table(path, REVIEW_COLUMNS))
    assert message == (
        f"{path}: not a format this reads; tried delimited text (no delimiter splits its lines "
        "alike), JSON lines, svmlight / LETOR, label text lines; line 1 reads 'Some notes about the "
        "data'; give the format with --data-format, or use a .csv, .parquet, .jsonl or .svm file"
    )
    fasttext = write(tmp_path / "ft.train", "__label__pos good film\n__label__neg bad film\n")
    message = one_line_error(lambda: read_table(fasttext, INTERACTION_COLUMNS))
    assert "'label text' lines hold a label and a text (sentiment data); this task reads user_id" in message


def test_the_format_settings_are_one_list_in_the_cli_and_config(tmp_path, capsys):
    assert set(DATA_FORMATS) == {"auto", *formats.FORMAT_NAMES}
    assert RunConfig(data_format="jsonl").errors()["data_format"].startswith("'jsonl' is not one of auto")
    assert "set data too" in RunConfig(query_file=str(tmp_path)).errors()["query_file"]
    path = sst2(tmp_path / "reviews.csv")
    summary, _ = train_cli(
        capsys,
        "--task",
        "sentiment",
        "--data",
        str(path),
        "--data-format",
        "label_text",
        "-o",
        "buckets=4096",
        "--out",
        str(tmp_path / "run"),
    )
    assert summary["metrics"] and RunConfig.load_toml(tmp_path / "run" / "config.toml").data_format == "label_text"
