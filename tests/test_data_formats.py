"""The formats public data sets come in: sniffed delimiters (TSV, ';', MovieLens '::'), column mapping and
aliases, header-less files, svmlight / LETOR, JSON lines; each bad file one line naming the file and line."""

from __future__ import annotations

import numpy as np
import pytest

from core.data.importers import Column, ReadOptions, data_files, read_table
from core.data.sequences import INTERACTION_COLUMNS
from core.errors import ConfigError, DataError
from core.tasks import create_task
from core.tasks.ranking.task import RANKING_COLUMNS
from core.tasks.sentiment.task import REVIEW_COLUMNS


def write(tmp_path, name: str, text: str | bytes):
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def ratings(sep: str, users: int = 30, per_user: int = 8, header: str | None = None) -> str:
    """MovieLens-style ratings: user, item, rating, timestamp."""
    lines = [header] if header else []
    lines += [
        sep.join(map(str, (u + 1, 1000 + (u * 7 + k) % 50, 1 + k % 5, 978300000 + 60 * k)))
        for u in range(users)
        for k in range(per_user)
    ]
    return "\n".join(lines) + "\n"


def reviews(sep: str, header: str = "text{sep}label") -> str:
    rows = [f"good film number {i}{sep}1" if i % 2 else f"bad film number {i}{sep}0" for i in range(40)]
    return header.format(sep=sep) + "\n" + "\n".join(rows) + "\n"


def error(call) -> str:
    with pytest.raises(DataError) as err:
        call()
    message = str(err.value)
    assert "\n" not in message
    return message


# ---- delimiters ---------------------------------------------------------------------------------------------


def test_tsv_is_sniffed(tmp_path):
    table = read_table(write(tmp_path, "reviews.tsv", reviews("\t")), REVIEW_COLUMNS)
    assert table.num_rows == 40 and table.column("text")[0].as_py() == "bad film number 0"


def test_a_tab_separated_csv_is_sniffed_and_a_comma_in_text_does_not_fool_it(tmp_path):
    text = "text\tlabel\nfine, really\t1\nnot, at all, no\t0\n"
    table = read_table(write(tmp_path, "reviews.csv", text), REVIEW_COLUMNS)
    assert table.column("text").to_pylist() == ["fine, really", "not, at all, no"]
    assert table.column("label").to_pylist() == ["1", "0"]


def test_semicolon_and_pipe(tmp_path):
    for sep, name in ((";", "semi.csv"), ("|", "pipe.txt")):
        table = read_table(write(tmp_path, name, reviews(sep)), REVIEW_COLUMNS)
        assert table.num_rows == 40, sep


def test_quoted_fields_holding_the_delimiter(tmp_path):
    text = 'text,label\n"a, b; c\tand more",1\n"plain",0\n"x,y",1\n'
    table = read_table(write(tmp_path, "quoted.csv", text), REVIEW_COLUMNS)
    assert table.column("text").to_pylist() == ["a, b; c\tand more", "plain", "x,y"]


def test_movielens_ratings_dat_loads_as_is_for_the_recommender(tmp_path):
    path = write(tmp_path, "ratings.dat", ratings("::"))
    table = read_table(path, INTERACTION_COLUMNS)
    assert table.column_names == ["user_id", "item_id", "timestamp"]  # rating, position 3, is not read
    assert table.column("user_id")[0].as_py() == "1" and table.column("item_id")[0].as_py() == "1000"
    assert table.column("timestamp")[1].as_py() == 978300060
    data = create_task("recommender").load_data(str(path), 0)
    assert data.info["interactions"] == 240 and data.info["n_items"] == 50


def test_double_colon_cut_by_read_blocks_still_reads(tmp_path):
    # Long enough that pyarrow reads it in several blocks (1 MiB): every '::' must still split fields.
    text = ratings("::", users=3000, per_user=40)
    path = write(tmp_path, "big.dat", text)
    table = read_table(path, INTERACTION_COLUMNS)
    assert table.num_rows == 120_000
    assert table.column("timestamp").to_numpy().max() == 978300000 + 60 * 39


def test_a_header_longer_than_the_sniffed_sample_is_read_to_its_end(tmp_path):
    names = ["query_id", "doc_id", "label"] + [f"feature_{'x' * 30}_{k}" for k in range(1, 2001)]  # ~80 KB
    rows = ["\t".join(names)] + ["\t".join(["q1", f"d{i}", "1"] + ["0.5"] * 2000) for i in range(3)]
    path = write(tmp_path, "wide.tsv", "\n".join(rows) + "\n")
    assert len(rows[0]) > 65536
    table = read_table(path, RANKING_COLUMNS, prefix_columns=f"feature_{'x' * 30}_")
    assert table.num_columns == 2003 and table.num_rows == 3


def test_explicit_delimiter_overrides_sniffing(tmp_path):
    path = write(tmp_path, "r.csv", "text|label\na,b|1\nc,d|0\n")
    table = read_table(path, REVIEW_COLUMNS, options=ReadOptions(delimiter="|"))
    assert table.column("text").to_pylist() == ["a,b", "c,d"]
    tsv = write(tmp_path, "r2.txt", "text\tlabel\nx\t1\n")
    assert read_table(tsv, REVIEW_COLUMNS, options=ReadOptions(delimiter="\\t")).num_rows == 1
    with pytest.raises(ConfigError, match="delimiter"):
        read_table(tsv, REVIEW_COLUMNS, options=ReadOptions(delimiter='"'))


def test_a_wrong_delimiter_names_it_and_suggests_the_flag(tmp_path):
    path = write(tmp_path, "reviews.csv", "sentence\tlabel\ngood\t1\n")
    message = error(lambda: read_table(path, REVIEW_COLUMNS, options=ReadOptions(delimiter=",")))
    assert message.startswith(f"{path}: line 1: missing column 'text'")
    assert "seems separated by tabs, but the given delimiter was ','" in message and "--delimiter '\\t'" in message


def test_a_ragged_double_colon_line_is_located(tmp_path):
    path = write(tmp_path, "ratings.dat", "1::10::5::100\n1::11::4::101\n\n1::12::4\n")
    message = error(lambda: read_table(path, INTERACTION_COLUMNS))
    assert f"{path}: line 4: cannot parse CSV: 3 fields where line 1 has 4" in message


def test_a_bad_value_in_a_headerless_double_colon_file_names_its_line(tmp_path):
    path = write(tmp_path, "ratings.dat", "1::10::5::100\n\n1::11::4::soon\n")
    message = error(lambda: read_table(path, INTERACTION_COLUMNS))
    assert message == f"{path}: line 3, column 'timestamp': 'soon' is not a number or a date-time"
    write(tmp_path, "ratings.dat", "1::10::5::100\n1::11::4::NA\n")
    message = error(lambda: read_table(path, INTERACTION_COLUMNS))
    assert message == f"{path}: line 2, column 'timestamp': 'NA' marks a missing value; a value is needed"
    write(tmp_path, "ratings.dat", "1::10::5::100\n::11::4::101\n")
    message = error(lambda: read_table(path, INTERACTION_COLUMNS, options=ReadOptions(columns={"user_id": "1"})))
    assert message == f"{path}: line 2, column 'user_id': the field is empty; a value is needed"


# ---- column mapping, aliases, header-less files ---------------------------------------------------------------


def test_mapping_by_name_and_the_message_names_the_files_column(tmp_path):
    path = write(tmp_path, "r.csv", "who,what,when\nu1,a,10\nu1,b,later\n")
    options = ReadOptions(columns={"user_id": "who", "item_id": "what", "timestamp": "when"})
    message = error(lambda: read_table(path, INTERACTION_COLUMNS, options=options))
    assert f"{path}: line 3, column 'when' (timestamp): 'later' is not a number" in message
    write(tmp_path, "r.csv", "who,what,when\nu1,a,10\nu1,b,11\n")
    table = read_table(path, INTERACTION_COLUMNS, options=options)
    assert table.column("user_id").to_pylist() == ["u1", "u1"] and table.column("timestamp").to_pylist() == [10, 11]


def test_mapping_by_position_in_a_headerless_file(tmp_path):
    rows = "".join(f"{i % 2},review text {i}\n" for i in range(12))
    path = write(tmp_path, "polarity.csv", rows)  # label first, text second (Yelp / Amazon polarity style)
    with pytest.raises(DataError):  # by default: the expected columns in order (text, label)
        read_table(path, REVIEW_COLUMNS)
    table = read_table(path, REVIEW_COLUMNS, options=ReadOptions(columns={"label": "1", "text": "2"}))
    assert table.column("text")[3].as_py() == "review text 3" and table.column("label")[3].as_py() == "1"
    assert table.num_rows == 12  # line 1 is data: not lost as a header


def test_aliases_userid_movieid(tmp_path):
    path = write(tmp_path, "ratings.csv", ratings(",", header="userId,movieId,rating,timestamp"))
    table = read_table(path, INTERACTION_COLUMNS)
    assert table.column_names == ["user_id", "item_id", "timestamp"] and table.num_rows == 240
    assert table.column("item_id")[0].as_py() == "1000"
    data = create_task("recommender").load_data(str(path), 0)
    assert data.info["interactions"] == 240


def test_two_aliases_are_ambiguous(tmp_path):
    path = write(tmp_path, "r.csv", "user,uid,item,ts\n1,2,3,4\n")
    message = error(lambda: read_table(path, INTERACTION_COLUMNS))
    assert "missing column 'user_id'; user, uid could each be it: choose one with --column user_id=NAME" in message


def test_a_wrong_mapping_names_file_mapping_and_columns(tmp_path):
    path = write(tmp_path, "ratings.csv", ratings(",", header="userId,movieId,rating,timestamp"))
    message = error(lambda: read_table(path, INTERACTION_COLUMNS, options=ReadOptions(columns={"user_id": "user"})))
    assert message == (
        f"{path}: line 1: column mapping user_id=user: no column 'user' (found: userId, movieId, rating, timestamp)"
    )
    message = error(lambda: read_table(path, INTERACTION_COLUMNS, options=ReadOptions(columns={"user_id": "9"})))
    assert message == f"{path}: line 1: column mapping user_id=9: the file has 4 columns (positions count from 1)"
    message = error(lambda: read_table(path, INTERACTION_COLUMNS, options=ReadOptions(columns={"usr": "userId"})))
    assert "column mapping usr=userId: this task reads no column 'usr'" in message


def test_headerless_file_by_position_for_ranking_gets_prefix_features(tmp_path):
    rows = "".join(f"{q},{d},{(q + d) % 3},{q / 10},{d / 10}\n" for q in range(3) for d in range(4))
    table = read_table(write(tmp_path, "rank.csv", rows), RANKING_COLUMNS, prefix_columns="f")
    assert table.column_names == ["query_id", "doc_id", "label", "f1", "f2"] and table.num_rows == 12


def test_a_headerless_file_short_of_columns_says_so(tmp_path):
    path = write(tmp_path, "pairs.csv", "1,2\n3,4\n")
    message = error(lambda: read_table(path, INTERACTION_COLUMNS))
    assert (
        "missing column 'timestamp' (line 1 holds data, not a header, so its 2 columns are taken by position" in message
    )


# ---- svmlight / LETOR -----------------------------------------------------------------------------------------

LETOR = """# a comment line before the data
2 qid:10 1:0.5 3:-1.25 # docid = GX000-00-0000000 inc = 1 prob = 0.0863

0 qid:10 2:3e2 4:7
1 qid:11 1:1 2:2 3:3 4:4 5:0.125
"""


def test_svmlight_with_comments_and_missing_indices_gives_exact_dense_features(tmp_path):
    path = write(tmp_path, "train.txt", LETOR)
    table = read_table(path, RANKING_COLUMNS, prefix_columns="f")
    assert table.column_names == ["query_id", "doc_id", "label", "f1", "f2", "f3", "f4", "f5"]
    assert table.column("query_id").to_pylist() == [10, 10, 11]
    assert table.column("doc_id").to_pylist() == ["2", "4", "5"]  # the line numbers
    assert table.column("label").to_pylist() == [2, 0, 1]
    features = np.stack([table.column(f"f{k}").to_numpy() for k in range(1, 6)], axis=1)
    assert features.dtype == np.float32
    np.testing.assert_array_equal(
        features, np.array([[0.5, 0, -1.25, 0, 0], [0, 300, 0, 7, 0], [1, 2, 3, 4, 0.125]], np.float32)
    )


def test_svmlight_in_blocks_and_through_the_ranking_task(tmp_path):
    from core.data import svmlight

    rng = np.random.default_rng(0)
    lines = [
        f"{rng.integers(0, 3)} qid:{i // 10} " + " ".join(f"{k}:{rng.normal():.4f}" for k in range(1, 7))
        for i in range(400)
    ]
    path = write(tmp_path, "data.svm", "\n".join(lines) + "\n")
    whole, _ = svmlight.read_svmlight(path)
    blocked, row_lines = svmlight.read_svmlight(path, block=997)  # many blocks, lines cut at their ends
    assert whole.equals(blocked.combine_chunks()) and row_lines[-1] == 400
    data = create_task("ranking").load_data(str(path), 0)
    assert data.info["features"] == 6


@pytest.mark.parametrize(
    "line,expected",
    [
        ("1 qid:x 1:0.5", "line 3: 'qid:x' is not qid:<id>"),
        ("1 1:0.5 2:0.1", "line 3: '1:0.5' is not qid:<id>"),
        ("1 qid:3 1:0.5 2:abc", "line 3: '2:abc' is not <index>:<value>"),
        ("1 qid:3 1:0.5 7", "line 3: '7' is not <index>:<value>"),
        ("1 qid:3 0:0.5", "line 3: '0:0.5': feature indices start at 1"),
        ("1 qid:3 1:inf", "line 3: '1:inf' is not a finite number"),
        ("1.5 qid:3 1:0.5", "line 3, column 'label': '1.5' is not a whole number"),
    ],
)
def test_a_bad_svmlight_token_names_its_line(tmp_path, line, expected):
    path = write(tmp_path, "bad.txt", "0 qid:1 1:0.1\n# note\n" + line + "\n2 qid:4 1:0.3\n")
    message = error(lambda: read_table(path, RANKING_COLUMNS, prefix_columns="f"))
    assert message.startswith(f"{path}: ") and expected in message


def test_a_folder_of_svmlight_files_pads_to_the_largest_index(tmp_path):
    write(tmp_path, "a.svm", "1 qid:1 1:0.5\n0 qid:1 2:0.25\n")
    write(tmp_path, "b.svm", "1 qid:2 4:1.5\n")
    table = read_table(tmp_path, RANKING_COLUMNS, prefix_columns="f")
    assert table.column_names[-4:] == ["f1", "f2", "f3", "f4"]
    assert table.column("f4").to_pylist() == [0.0, 0.0, 1.5] and table.column("f2").to_pylist() == [0, 0.25, 0]


def test_svmlight_is_only_ranking_data(tmp_path):
    path = write(tmp_path, "x.libsvm", "1 qid:1 1:0.5\n")
    assert "an svmlight file holds ranking data" in error(lambda: read_table(path, REVIEW_COLUMNS))


# ---- JSON lines -----------------------------------------------------------------------------------------------


def test_json_lines_good(tmp_path):
    rows = "".join(f'{{"user_id": "u{i % 4}", "item_id": {i % 7}, "timestamp": {i}}}\n' for i in range(20))
    for name in ("clicks.jsonl", "clicks.ndjson", "clicks.json"):
        table = read_table(write(tmp_path, name, rows + "\n"), INTERACTION_COLUMNS)
        assert table.num_rows == 20 and table.column("timestamp").to_pylist()[-1] == 19


@pytest.mark.parametrize(
    "body,expected",
    [
        ('{"text": "ok", "label": 1}\n{"text": "broken", "label": 0\n', "line 2, column 30: not valid JSON"),
        (
            '{"text": "ok", "label": 1}\n\n{"text": "no", "label": "x"}\n',
            "line 3: field 'label' holds a string where line 1 holds a number",
        ),
        ('{"text": "ok", "label": 1}\n[1, 2]\n', "line 2: a JSON array where an object {...} is expected"),
        ('[{"text": "ok", "label": 1}]\n', "line 1: a JSON array; use JSON lines"),
        (
            '{"text": "ok", "label": 1}\n\n{"text": "no", "label": 7}\n',
            "line 3, column 'label': '7' is not a known value",
        ),
    ],
)
def test_json_lines_bad_names_the_line(tmp_path, body, expected):
    path = write(tmp_path, "reviews.jsonl", body)
    message = error(lambda: read_table(path, REVIEW_COLUMNS))
    assert message.startswith(f"{path}: ") and expected in message


# ---- guarantees -------------------------------------------------------------------------------------------------


def test_folders_list_the_new_suffixes_and_refuse_binary(tmp_path):
    for name in ("a.tsv", "b.dat", "c.jsonl", "d.txt", "e.svm", "notes.md"):
        write(tmp_path, name, "x\n")
    assert [p.name for p in data_files(tmp_path)] == ["a.tsv", "b.dat", "c.jsonl", "d.txt", "e.svm"]
    binary = write(tmp_path, "blob.dat", b"1::2\x00\x01::3\n")
    assert "blob.dat: line 1, column 5 (byte): a NUL byte" in error(lambda: read_table(binary, INTERACTION_COLUMNS))


def test_a_bad_value_is_shown_truncated(tmp_path):
    long = "y" * 200
    path = write(tmp_path, "r.tsv", f"user_id\titem_id\ttimestamp\nu\ti\t{long}\n")
    message = error(lambda: read_table(path, [Column("user_id", "id"), Column("timestamp", "number")]))
    assert "line 2, column 'timestamp'" in message and long not in message and len(message) < len(str(path)) + 120


def _reference_svmlight(text: str) -> tuple[list, list, np.ndarray]:
    """A plain Python reading of an svmlight file: (qids, labels, dense features)."""
    rows = []
    for line in text.splitlines():
        tokens = line.split("#", 1)[0].split()
        if tokens:
            rows.append(
                (
                    int(tokens[1][4:]),
                    float(tokens[0]),
                    {int(k): float(v) for k, v in (t.split(":") for t in tokens[2:])},
                )
            )
    width = max(max(r[2], default=0) for r in rows)
    dense = np.zeros((len(rows), width), np.float32)
    for i, (_, _, features) in enumerate(rows):
        for k, v in features.items():
            dense[i, k - 1] = v
    return [r[0] for r in rows], [r[1] for r in rows], dense


@pytest.mark.parametrize("shape", ["same indices", "same count", "ragged"])
def test_svmlight_fast_and_general_paths_match_a_plain_reading(tmp_path, shape):
    from core.data import svmlight

    rng = np.random.default_rng(1)
    lines = []
    for i in range(300):
        count = 5 if shape == "same count" else rng.integers(1, 8)
        keep = range(1, 9) if shape == "same indices" else sorted(rng.choice(np.arange(1, 12), count, replace=False))
        body = " ".join(f"{k}:{rng.normal() * 10.0 ** rng.integers(-3, 4):.5g}" for k in keep)
        comment = f" # docid = GX{i:05d} inc = 1 prob = 0.5" if i % 3 == 0 else ""
        lines.append(f"{rng.integers(0, 5)} qid:{i // 7} {body}{comment}")
    text = "\r\n".join(lines) + "\r\n"
    path = write(tmp_path, "mixed.txt", text)
    part = svmlight._strip_comments(path.read_bytes())
    assert (svmlight._svm_dense(part, 1) is not None) == (shape != "ragged")  # which path this case exercises
    table, row_lines = svmlight.read_svmlight(path, block=4096)
    qids, labels, dense = _reference_svmlight(text)
    assert table.column("query_id").to_pylist() == qids and table.column("label").to_pylist() == labels
    got = np.stack([table.column(f"f{k}").to_numpy() for k in range(1, dense.shape[1] + 1)], axis=1)
    np.testing.assert_array_equal(got, dense)
    assert row_lines.tolist() == list(range(1, 301))


def test_a_json_line_longer_than_a_read_block_still_reads(tmp_path):
    long = "word " * 500_000  # 2.5 MB on one line: pyarrow's default 1 MiB block cannot hold it
    path = write(tmp_path, "reviews.jsonl", '{"text": "short", "label": 1}\n' + f'{{"text": "{long}", "label": 0}}\n')
    table = read_table(path, REVIEW_COLUMNS)
    assert table.num_rows == 2 and len(table.column("text")[1].as_py()) == len(long)


def test_a_csv_row_longer_than_a_read_block_still_reads(tmp_path):
    long = "word " * 500_000  # a 2.5 MB quoted review: longer than pyarrow's 1 MiB CSV block
    path = write(tmp_path, "reviews.csv", f'text,label\nshort,1\n"{long}",0\n')
    assert read_table(path, REVIEW_COLUMNS).column("text")[1].as_py() == long
    dat = write(tmp_path, "ratings.dat", "1::2::3::4\n" + f"1::{'x' * 3_000_000}::3::5\n")
    assert read_table(dat, INTERACTION_COLUMNS).num_rows == 2
