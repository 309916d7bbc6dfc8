"""evaluation.json from a folder anyone may have edited: a FIFO, a link, a file larger than a record may be,
JSON nested too deep or not UTF-8 is "no report" (or one line naming the file, with `strict`), at once: never a
read that blocks, a whole-disk read or a RecursionError."""

from __future__ import annotations

import os

import pytest

from core.errors import DataError
from core.files import RECORD_LIMIT
from core.runs.evaluation_report import REPORT_FILE, load_report

pytestmark = [pytest.mark.reliability, pytest.mark.timeout(60)]


def _fifo(path):
    if not hasattr(os, "mkfifo"):
        pytest.skip("FIFOs are POSIX's")
    os.mkfifo(path)


def _link(path):
    target = path.with_name("elsewhere.json")
    target.write_text('{"task": "tiny"}')
    path.symlink_to(target)


def _too_big(path):
    with open(path, "wb") as f:
        f.write(b'{"pad": "')
        f.truncate(RECORD_LIMIT + 10)


@pytest.mark.parametrize(
    "make, reason",
    [
        (_fifo, "named pipe"),
        (_link, "symbolic link"),
        (_too_big, "more than a record may be"),
        (lambda p: p.write_text("[" * 100_000 + "]" * 100_000), "nested more than"),
        (lambda p: p.write_bytes(b'{"task": "\xff"}'), "not UTF-8"),
    ],
    ids=["fifo", "link", "too-big", "too-deep", "not-utf8"],
)
def test_a_hostile_evaluation_json_is_no_report_or_one_line(tmp_path, make, reason):
    make(tmp_path / REPORT_FILE)
    assert load_report(tmp_path) is None
    with pytest.raises(DataError) as caught:
        load_report(tmp_path, strict=True)
    message = str(caught.value)
    assert reason in message and str(tmp_path / REPORT_FILE) in message and "\n" not in message
