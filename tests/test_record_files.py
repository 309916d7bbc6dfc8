"""The readers of record files (core.files.read_regular / read_json_record) and terminal-safe text
(core.text.printable): a FIFO, a device, a link, a huge or deeply nested file is one UnreadableFile naming the
file, never a hang, a RecursionError or a traceback; control sequences from a file never reach the terminal."""

from __future__ import annotations

import json
import os

import pytest

from core.files import UnreadableFile, is_inside, read_json_record, read_regular
from core.text import printable


def test_a_regular_file_reads_and_a_missing_one_is_file_not_found(tmp_path):
    (tmp_path / "run.json").write_text('{"a": 1}')
    assert read_json_record(tmp_path / "run.json") == {"a": 1}
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "absent.json")


@pytest.mark.timeout(30)
def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "run.json"
    os.mkfifo(fifo)
    with pytest.raises(UnreadableFile, match=r"run\.json is a named pipe \(FIFO\), not a file"):
        read_regular(fifo)


@pytest.mark.timeout(30)
def test_a_link_to_a_device_or_anywhere_is_refused(tmp_path):
    (tmp_path / "run.json").symlink_to("/dev/zero")
    with pytest.raises(UnreadableFile, match="symbolic link"):
        read_regular(tmp_path / "run.json")
    (tmp_path / "real.json").write_text("{}")
    (tmp_path / "note.txt").symlink_to(tmp_path / "real.json")
    with pytest.raises(UnreadableFile, match="note.txt is a symbolic link"):
        read_json_record(tmp_path / "note.txt")


def test_a_file_over_the_limit_is_refused_by_its_size(tmp_path):
    big = tmp_path / "evaluation.json"
    big.write_bytes(b" " * 5000)
    with pytest.raises(UnreadableFile, match=r"evaluation\.json is 4\.88 KiB, more than a record may be"):
        read_regular(big, limit=4096)
    assert len(read_regular(big, limit=5000)) == 5000


@pytest.mark.parametrize(
    "payload, reason",
    [
        (b"[" * 100_000 + b"]" * 100_000, "nested more than 64 deep"),
        (json.dumps({"a": [[[[1]]]]}).encode(), "nested more than 3 deep"),
        (b"\xff\xfe{}", "not UTF-8"),
        (b'{"a": ', "not valid JSON"),
        (b"[1, 2]", "holds list, not a JSON object"),
    ],
)
def test_bad_json_is_one_reason(tmp_path, payload, reason):
    path = tmp_path / "run.json"
    path.write_bytes(payload)
    limit = 3 if "3 deep" in reason else 64
    with pytest.raises(UnreadableFile, match=reason) as caught:
        read_json_record(path, depth_limit=limit)
    assert "run.json" in str(caught.value) and "\n" not in str(caught.value)


def test_the_depth_limit_holds_exactly_whatever_the_brackets_in_strings(tmp_path):
    from core.files import parse_json

    def nested(depth: int, leaf) -> dict:  # `depth` objects, the innermost holding `leaf` (at depth + 1)
        value = leaf
        for _ in range(depth):
            value = {"k": value}
        return value

    for depth, leaf in ((63, 1), (63, {}), (63, []), (4, "[[[[{{{{" * 20)):  # the leaf at 64: not too deep
        assert parse_json(json.dumps(nested(depth, leaf)).encode(), "run.json") == nested(depth, leaf)
    for depth, leaf in ((64, 1), (64, {}), (63, [1]), (63, {"k": None})):
        with pytest.raises(UnreadableFile, match="nested more than 64 deep"):
            parse_json(json.dumps(nested(depth, leaf)).encode(), "run.json")


def test_is_inside_sees_through_links_and_dotdot(tmp_path):
    root = tmp_path / "runs"
    (root / "a").mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (root / "ext").symlink_to(outside)
    assert is_inside(root, root / "a")
    assert is_inside(root, root)
    assert not is_inside(root, root / "ext" / "victim")
    assert not is_inside(root, root / "a" / ".." / ".." / "elsewhere")
    assert not is_inside(root, tmp_path / "runs-other")


def test_printable_escapes_control_sequences_and_keeps_the_rest():
    assert printable("run \x1b]0;owned\x07 \x1b[2J ok") == "run \\x1b]0;owned\\x07 \\x1b[2J ok"
    assert printable("a\u202eb\x9bc\x7f") == "a\\u202eb\\x9bc\\x7f"
    assert printable("naïve 😀 日本") == "naïve 😀 日本"
    assert printable("two\nlines\tx") == "two\\nlines\\tx"
    assert printable("two\nlines", keep_newlines=True) == "two\nlines"
    assert printable(3.5) == "3.5"


def test_read_jsonl_refuses_a_link_as_its_doc_says(tmp_path):
    from core.files import UnreadableFile, read_jsonl

    outside = tmp_path / "elsewhere.jsonl"
    outside.write_text('{"event": "RunStarted"}\n')
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "metrics.jsonl").symlink_to(outside)
    with pytest.raises(UnreadableFile):
        read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert read_jsonl(outside) == [{"event": "RunStarted"}]
