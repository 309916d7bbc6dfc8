"""One set of reading rules (core.data.formats) for every reader of user files: the predict CLI reads a file
as training's importer reads it, and formats depends on nothing above it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from core.data import formats
from core.data.importers import read_table
from core.data.sequences import INTERACTION_COLUMNS
from core.runs.file_input import InputReader

NAMES = ("user_id", "item_id", "timestamp")
FILES = {
    # line 1 holds a comma (in a quoted name) but the file is separated by semicolons
    "semicolons": 'user_id;item_id;timestamp;"note, free text"\n1;10;100;a\n1;11;101;b\n2;10;102;c\n',
    # MovieLens' two-character delimiter in a file named .csv
    "colons": "user_id::item_id::timestamp\n1::10::100\n1::11::101\n2::10::102\n",
    # column names written with other blanks than spaces (a tab, a no-break space)
    "blanks": '"User\tId",item\u00a0id,Timestamp\n1,10,100\n1,11,101\n2,10,102\n',
}


def _predict_reads(path: Path) -> dict[str, list[str]]:
    reader = InputReader(path, 1000)
    columns = [reader.require(name, "a test") for name in NAMES]
    reader.use(columns)
    read = {name: [] for name in NAMES}
    for batch, _, problems in reader:
        assert problems == []
        for name, column in zip(NAMES, columns):
            read[name] += [str(v) for v in batch.column(column).to_pylist()]
    return read


@pytest.mark.parametrize("case", sorted(FILES))
def test_predict_reads_a_file_as_training_does(tmp_path, case):
    path = tmp_path / "interactions.csv"
    path.write_text(FILES[case], encoding="utf-8")
    table = read_table(path, INTERACTION_COLUMNS)
    trained = {name: [str(v) for v in table.column(name).to_pylist()] for name in NAMES}
    trained["timestamp"] = [str(int(float(v))) for v in trained["timestamp"]]
    assert (
        _predict_reads(path)
        == trained
        == {"user_id": ["1", "1", "2"], "item_id": ["10", "11", "10"], "timestamp": ["100", "101", "102"]}
    )


def test_one_rule_for_numbers_and_names():
    assert formats.is_number(" -1.5e3 ") and formats.is_number(".5") and not formats.is_number("1,5")
    assert formats.normalise_name("User\tID") == formats.normalise_name("user-id") == "userid"


@pytest.mark.slow
def test_formats_works_without_the_importer(tmp_path):
    """formats and svmlight sit below the importer: their error paths too run with core.data.importers
    unimportable."""
    bad = tmp_path / "bad.svm"
    bad.write_bytes(b"1 qid:1 1:0.5\n0 qid:1 1:0.\xe95\n")
    code = (
        "import sys; sys.modules['core.data.importers'] = None\n"
        "from pathlib import Path\nfrom core.data import svmlight\nfrom core.errors import DataError\n"
        f"try:\n    svmlight.read_svmlight(Path({str(bad)!r}))\nexcept DataError as exc:\n    print(exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{bad}: line 2, column 13 (byte): text is not valid UTF-8"
