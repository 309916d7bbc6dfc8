"""CLI output fits a 100-column terminal (and stays readable at 80), numbers read as people write them, and
bench reports its progress per mode and per window on stderr with the thread count it used."""

from __future__ import annotations

import json

import pytest

from core.cli import format as fmt
from core.cli.main import main

BENCH = [
    "bench",
    "--task",
    "tiny",
    "--device",
    "cpu",
    "--precisions",
    "fp32,bf16",
    "--steps",
    "2",
    "--repeats",
    "1",
    "--no-isolate",
    "--threads",
    "1",
]
INSPECT = [
    "inspect",
    "--task",
    "recommender",
    "--device",
    "cpu",
    "--precision",
    "bf16",
    "--batch-size",
    "4",
    "-o",
    "layers=1",
    "-o",
    "items=100",
    "-o",
    "interactions=2000",
    "-o",
    "d_model=16",
    "-o",
    "max_len=8",
]
COMMANDS = {
    "devices": ["devices"],
    "tasks": ["tasks"],
    "tasks NAME": ["tasks", "sentiment"],
    "bench": BENCH,
    "inspect": INSPECT,
}


@pytest.mark.parametrize("width", [100, 80])
@pytest.mark.parametrize("name", list(COMMANDS))
def test_tables_fit_the_terminal_width(name, width, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", str(width))
    assert main(COMMANDS[name]) == 0
    out = capsys.readouterr().out
    too_wide = [line for line in out.splitlines() if len(line) > width]
    assert not too_wide, too_wide[:3]
    assert "e+0" not in out  # no 1.04858e+06


def test_piped_output_is_laid_out_for_100_columns(monkeypatch, capsys):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert main(["tasks", "recommender"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= fmt.PIPED_WIDTH
    assert any("1,000 to 1,000,000,000" in line for line in lines)


def test_numbers_are_readable():
    assert fmt.count(1_048_576) == "1.05 M" and fmt.count(12_345) == "12,345" and fmt.count(2.5e9) == "2.5 G"
    assert fmt.count(None) == "-" and fmt.count(float("nan")) == "-" and fmt.count(0.5) == "0.5"
    assert fmt.size(12.3 * 2**20) == "12.3 MiB" and fmt.size(312 * 2**20) == "312 MiB"
    assert fmt.size(1.25 * 2**30) == "1.25 GiB" and fmt.size(512) == "512 B" and fmt.size(None) == "-"
    assert fmt.setting(1 << 16) == "65,536" and fmt.setting(3e-3) == "0.003" and fmt.setting("full") == "full"
    assert fmt.exact(1_048_576) == "1,048,576"


def test_option_ranges_read_without_exponents():
    from core.tasks import get_task_info

    buckets = get_task_info("sentiment").option("buckets")
    assert buckets.allowed() == "16 to 67,108,864"
    assert buckets.error(1 << 30) == "1073741824 is out of range: must be between 16 and 67,108,864"


def test_bench_progress_per_mode_and_window_and_threads(monkeypatch, capsys):
    assert main(BENCH + ["--json"]) == 0
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert any("fp32: setting up" in line for line in err)
    assert any("bf16: window 1/2 (warm-up), step 2/4" in line for line in err)
    assert any("bf16: window 2/2, step 4/4" in line and "ms/step" in line for line in err)
    assert any("1 CPU thread" in line for line in err)
    data = json.loads(captured.out.strip().splitlines()[-1])
    assert data["threads"] == 1 and all(r["threads"] == 1 for r in data["rows"])


@pytest.mark.slow
def test_isolated_bench_relays_window_progress():
    from core.config import RunConfig
    from core.lab.precision_sweep import run_sweep

    seen = []
    result = run_sweep(
        RunConfig.for_task("tiny", device="cpu", threads=1),
        ["fp32"],
        steps=2,
        repeats=1,
        isolate=True,
        progress=seen.append,
    )
    phases = [(p.mode, p.phase, p.window) for p in seen]
    assert phases == [
        ("fp32", "running", 0),
        ("fp32", "setup", 0),
        ("fp32", "window", 1),
        ("fp32", "window", 2),
        ("fp32", "done", 0),
    ]
    assert seen[-2].describe().startswith("fp32: window 2/2, step 4/4") and result.threads == 1


def test_bench_rejects_bad_threads_in_one_line(capsys):
    assert main(["bench", "--device", "cpu", "--threads", "-1"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--threads" in err


COLUMNS_OF_RUNS_LIST = (
    ("id", {"no_wrap": True}),
    ("name", {"overflow": "fold", "min_width": 8}),
    ("task", {"overflow": "fold", "min_width": 6}),
    ("status", {"no_wrap": True}),
    ("steps", {"justify": "right", "no_wrap": True}),
    ("best", {"overflow": "fold", "min_width": 8}),
    ("started", {"no_wrap": True}),
)
ROWS_OF_RUNS_LIST = [
    (
        "a1b2c3d4",
        "20261201-023712-recommender-bf16",
        "recommender",
        "completed",
        "1,000/1,000",
        "hr@10 0.4321",
        "12-01 02:37",
    ),
    ("ffee0011", "a name with several words in it", "tiny", "failed", "5", "-", "12-02 10:00"),
    ("0123abcd", "実験-ラン-日本語の名前", "sentiment", "interrupted", "12/400", "accuracy 0.9", "-"),
    ("99999999", "x", "ranking", "stopped", "300", "ndcg@10 0.812345", "01-01 00:00"),
]


@pytest.mark.parametrize("width", [200, 100, 80, 66, 60])
def test_runs_list_table_lays_out_as_the_rich_table_did(width):
    """`runs list` lays its table out without rich (a row costs microseconds, not 2 ms): the same text."""
    import io

    from rich.console import Console

    from core.cli.long_table import LongTable

    rich_table = fmt.table(None, show_edge=False, padding=(0, 1, 0, 0))
    long_table = LongTable()
    for name, kwargs in COLUMNS_OF_RUNS_LIST:
        rich_table.add_column(name, **kwargs)
        long_table.add_column(name, **kwargs)
    for row in ROWS_OF_RUNS_LIST:
        rich_table.add_row(*row)
        long_table.add_row(*row)
    outputs = []
    for table in (rich_table, long_table):
        console = Console(file=io.StringIO(), width=width, color_system=None, highlight=False, soft_wrap=False)
        if table is rich_table:
            console.print(table)
        else:
            table.print(console)
        outputs.append(console.file.getvalue())
    assert outputs[1] == outputs[0]


LISTED_RUNS = [  # name, task, status, precision, device, steps, total, best metric, value, wall seconds
    (
        "20261201-023712-recommender-bf16",
        "recommender",
        "completed",
        "bf16",
        "cuda:0",
        12000,
        12000,
        "hr@10_full_filtered",
        0.4321,
        3725.0,
    ),
    ("20261202-101500-sentiment-fp32", "sentiment", "stopped", "fp32", "cpu", 1611, 200000, "accuracy", 0.9123, 75.0),
    ("20261203-090000-tiny-fp16", "tiny", "failed", "fp16", "cpu", 5, 100, "accuracy", None, 2.0),
    ("my baseline", "ranking", "interrupted", "fp32", "cpu", 300, 400, "ndcg@10", 0.812345, 12.5),
]


@pytest.fixture
def listed_root(tmp_path):
    for i, (name, task, status, precision, device, steps, total, metric, value, wall) in enumerate(LISTED_RUNS):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "run.json").write_text(
            json.dumps(
                {
                    "id": f"{i}a1b2c3d4e5",
                    "name": name,
                    "task": task,
                    "status": status,
                    "device": device,
                    "precision": precision,
                    "start_time": f"2026-12-0{i + 1}T10:00:00+00:00",
                    "wall_seconds": wall,
                    "steps": steps,
                    "total_steps": total,
                    "config": {},
                    "best": {"name": metric, "value": value, "step": steps} if value is not None else {},
                }
            )
        )
    return tmp_path


@pytest.mark.parametrize("width", [80, 90, 100, 110, 120])
def test_runs_list_never_breaks_a_name_and_columns_give_way_in_order(listed_root, width, monkeypatch, capsys):
    """In an ordinary terminal each run is one line (or two where a best metric wraps at its space), each name
    whole; the columns that don't fit are left out, least useful first, and said so under the table."""
    from core.cli.runs import LIST_COLUMNS

    monkeypatch.setenv("COLUMNS", str(width))
    assert main(["runs", "list", "--runs-dir", str(listed_root)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= width
    for name, *_ in LISTED_RUNS:
        assert sum(name in line for line in lines) == 1, (name, lines)
    header = lines[0].split()
    order = [name for name, _ in sorted(LIST_COLUMNS, key=lambda c: c[1].get("drop") or 99)]
    left_out = [name for name, _ in LIST_COLUMNS if name not in header]
    assert set(left_out) == set(order[: len(left_out)])  # none kept while one that gives way earlier went
    assert {"id", "name", "status", "best"} <= set(header)
    if width >= 100:
        assert "started" in header
    if width >= 120:
        assert {"steps", "wall"} <= set(header)
    if left_out:
        note = " ".join(lines[-2:])
        assert f"left out to fit {width} columns: {', '.join(left_out)}" in note
    body = [line for line in lines[2:] if line[:9].rstrip().endswith("a1b2c3d")]
    assert [line.split()[0] for line in body] == ["3a1b2c3d", "2a1b2c3d", "1a1b2c3d", "0a1b2c3d"]


def test_a_whole_column_is_never_cut_even_when_nothing_else_fits():
    import io

    from rich.console import Console

    from core.cli.long_table import LongTable

    table = LongTable()
    table.add_column("id", no_wrap=True)
    table.add_column("name", whole=True)
    table.add_column("status", no_wrap=True, drop=1)
    table.add_row("a1b2c3d4", "20261201-023712-a-very-long-run-name-for-a-narrow-terminal", "completed")
    console = Console(file=io.StringIO(), width=40, color_system=None, highlight=False, soft_wrap=False)
    table.print(console)
    out = console.file.getvalue()
    assert "a1b2c3d4  20261201-023712-a-very-long-run-name-for-a-narrow-terminal\n" in out
    assert table.left_out(40) == ["status"] and table.left_out(200) == []


def test_runs_list_piped_is_what_a_console_writes(tmp_path, monkeypatch, capsys):
    """Piped `runs list` writes as a console that shows no styles would, with unreadable runs said under the
    table."""
    import sys

    from rich.console import Console

    from tests.test_runs_cli import fake_run

    root = tmp_path / "runs"
    names = ("20261201-023712-recommender-bf16-and-a-long-name", "実験-ラン-日本語の名前", "x")
    for i, name in enumerate(names):
        fake_run(root, name, f"{i:02d}b2c3d4e5", start=f"2026-01-0{i + 1}T10:00:00+00:00")
    (root / "broken").mkdir()
    (root / "broken" / "run.json").write_text("{")
    for width in (100, 60):
        monkeypatch.setenv("COLUMNS", str(width))
        assert main(["runs", "--runs-dir", str(root), "list"]) == 0
        plain = capsys.readouterr().out
        with monkeypatch.context() as patched:
            patched.setattr(
                fmt,
                "console",
                lambda stderr=False, width=width: Console(
                    file=sys.stdout,
                    width=width,
                    color_system=None,
                    highlight=False,
                    soft_wrap=False,
                    markup=False,
                    emoji=False,
                ),
            )
            assert main(["runs", "--runs-dir", str(root), "list"]) == 0
        assert plain == capsys.readouterr().out
        assert "broken: unreadable: run.json is not valid JSON" in plain.splitlines()[-1]
