"""`amp-console runs list | show | note | compare | export | delete | tensorboard`: the runs under a runs folder, each
named by its id, a unique id prefix, its folder name, or its folder (a path, under the runs root or not). Everything
printed that was read from a run's files passes through core.text.printable. No torch here.
"""

from __future__ import annotations

import argparse
import csv
import gc
import json
import sys
from pathlib import Path

from core.cli import format as fmt
from core.cli.common import add_runs_dir_flag, fail_bad_input
from core.cli.long_table import LongTable
from core.engine.run_delete import RunDeleteError, check_deletable, delete_run
from core.engine.run_folder import METRICS_FILE, is_in_use
from core.engine.run_index import find_runs, listed_runs, runs_named
from core.engine.run_record import read_run, runs_root, write_note
from core.errors import AmpConsoleError, ConfigError
from core.files import UnreadableFile, read_jsonl
from core.runs.compare import best_text, compare_rows, differing_config, precision_text, steps_text
from core.text import printable


class RunNotFound(AmpConsoleError):
    pass


def runs_dir(args) -> Path:
    return runs_root(args.runs_dir)


def _shown_root(root: Path) -> str:
    text = str(root)
    return text if text.endswith("/") else text + "/"


def resolve(runs: list[dict], key: str, root: Path) -> dict:
    """The run named `key`: its full id, its folder name, or a unique id prefix."""
    exact = [r for r in runs if r.get("id") == key or r.get("name") == key]
    if len(exact) == 1:
        return exact[0]
    matches = exact or [r for r in runs if str(r.get("id", "")).startswith(key)]
    if not matches:
        raise RunNotFound(printable(f"runs: no run '{key}' in {_shown_root(root)}"))
    if len(matches) > 1:
        names = ", ".join(_named(r) for r in matches)
        raise RunNotFound(printable(f"runs: '{key}' is ambiguous: {names}"))
    return matches[0]


def _named(run: dict) -> str:
    """'a1b2c3d4e5 (20261201-023712-tiny-fp32)', printable."""
    return printable(f"{run.get('id')} ({run.get('name')})")


def in_folder(key: str) -> dict | None:
    """The run in the folder `key` names (a path, anywhere: as evaluate, export and predict take a run), else None."""
    path = Path(key).expanduser()
    return read_run(path.absolute()) if path.is_dir() else None


def find_run(root: Path, key: str) -> dict:
    """The run in the folder `key` names, else the one it names under `root` (parsing only the records that match)."""
    return in_folder(key) or resolve(runs_named(root, [key]), key, root)


def run_folder(where: str) -> Path:
    """The folder of the run `where` names (a folder, a checkpoint in one, an id or name); else ConfigError (--from)."""
    path = Path(where).expanduser()
    if path.is_file():
        return path.parent
    try:
        return Path(find_run(runs_root(), where)["folder"])
    except RunNotFound as exc:
        raise ConfigError("--from", str(exc)) from None


def resolve_all(args) -> list[dict]:
    """The runs `args.ids` name: a run's folder, or a run under the runs root (each as `resolve` finds it)."""
    root = runs_dir(args)
    folders = {key: in_folder(key) for key in args.ids}
    named = [key for key, run in folders.items() if run is None]
    candidates = runs_named(root, named) if named else []
    return [folders[key] or resolve(candidates, key, root) for key in args.ids]


# `runs list`'s columns. A name is never broken; on a narrow terminal columns give way in `drop` order.
LIST_COLUMNS = (
    ("id", {"no_wrap": True}),
    ("name", {"whole": True}),
    ("task", {"min_width": 6, "drop": 3}),
    ("status", {"no_wrap": True, "drop": 8}),
    ("precision", {"no_wrap": True, "drop": 2}),
    ("device", {"no_wrap": True, "drop": 1}),
    ("steps", {"justify": "right", "no_wrap": True, "drop": 5}),
    ("best", {"min_width": 8, "drop": 7}),
    ("wall", {"justify": "right", "no_wrap": True, "drop": 4}),
    ("started", {"no_wrap": True, "drop": 6}),
)


def cmd_list(args) -> int:
    enabled = gc.isenabled()
    gc.disable()  # thousands of records, all kept to the end: a collection would only walk them
    try:
        return _list(args)
    finally:
        if enabled:
            gc.enable()


def _list(args) -> int:
    root = runs_dir(args)
    runs = find_runs(root) if args.json else listed_runs(root)  # the table: a few fields of each run
    if args.task:
        runs = [r for r in runs if r.get("task") == args.task]
    if args.status:
        runs = [r for r in runs if r.get("status") == args.status]
    if args.json:
        print(json.dumps(runs, indent=2, default=str))
        return 0
    if not runs:
        print(f"no runs in {_shown_root(root)}")
        return 0
    print_run_table(runs)
    return 0


def print_run_table(runs: list[dict]) -> None:
    """`runs list`'s table of `runs` (brief records will do), and a line under it per unreadable run."""
    table = LongTable()  # thousands of rows: rich's Table would be slow
    for name, kwargs in LIST_COLUMNS:
        table.add_column(name, **kwargs)
    for r in runs:
        table.add_row(
            str(r.get("id") or "-")[:8],
            str(r.get("name")),
            str(r.get("task") or "-"),
            str(r.get("status") or "-"),
            precision_text(r),
            str(r.get("device") or "-"),
            steps_text(r),
            best_text(r),
            fmt.duration(r.get("wall_seconds")),
            (r.get("start_time") or "").replace("T", " ")[5:16] or "-",  # 12-01 01:07 (UTC)
        )
    console = fmt.console()
    table.print(console)
    left_out = table.left_out(console.width)
    if left_out:
        console.print(
            f"(left out to fit {console.width} columns: {', '.join(left_out)}; `runs show ID` has them)",
            highlight=False,
        )
    for r in runs:
        if r.get("unreadable"):  # why, under the table: a sentence
            console.print(printable(f"{r.get('name')}: unreadable: {r['unreadable']}"), soft_wrap=True)


def _metrics_text(metrics: dict | None) -> str:
    if not metrics:
        return "-"
    return ", ".join(f"{k} {fmt.number(v) if isinstance(v, (int, float)) else v}" for k, v in metrics.items())


def cmd_show(args) -> int:
    root = runs_dir(args)
    run = find_run(root, args.id)
    if args.json:
        print(json.dumps(run, indent=2, default=str))
        return 0
    console = fmt.console()
    head = [("id", run.get("id")), ("name", run.get("name")), ("folder", run.get("folder"))]
    if run.get("unreadable"):
        _print_fields([*head, ("status", f"unreadable: {run['unreadable']}"), ("note", _note(run))], console)
        return 0
    versions = run.get("versions") or {}
    checkpoints = run.get("checkpoints") or {}
    named = f" ({run['device_name']})" if run.get("device_name") else ""
    device = f"{run.get('device') or ''}{named}".strip()
    best_step = (run.get("best") or {}).get("step")
    rows = [
        *head,
        ("task", run.get("task")),
        ("status", run.get("status")),
        ("device", device),
        ("precision", f"{precision_text(run)} (autocast {run.get('autocast_dtype') or '-'})"),
        ("versions", ", ".join(f"{k} {v}" for k, v in versions.items() if v) or "-"),
        ("started", run.get("start_time") or "-"),
        ("ended", run.get("end_time") or "-"),
        ("wall time", fmt.duration(run.get("wall_seconds"))),
        ("steps", steps_text(run)),
        ("final loss", fmt.number(run.get("final_loss"))),
        ("samples/s", fmt.count(run.get("samples_per_second"))),
        ("best", best_text(run) + (f" at step {fmt.exact(best_step)}" if best_step is not None else "")),
        ("val metrics", _metrics_text(run.get("metrics"))),
        ("test metrics", _metrics_text(run.get("test_metrics"))),
    ]
    rows += [(f"checkpoint ({k})", (v or {}).get("path", "-")) for k, v in checkpoints.items()]
    rows.append(("message", run.get("message") or "-"))
    rows.append(("note", _note(run)))
    _print_fields(rows, console)
    config = run.get("config") or {}
    if config:
        console.print(
            printable("config: " + ", ".join(f"{k}={fmt.setting(v)}" for k, v in config.items())), soft_wrap=True
        )
    for note in run.get("notes") or []:  # the engine's notes on the run (the user's note is in the table)
        console.print(printable(f"engine note: {note}"), soft_wrap=True)
    return 0


def _print_fields(rows: list, console) -> None:
    """A two-column field/value table, "-" for a missing value."""
    table = fmt.table(None, show_header=False, show_edge=False)
    table.add_column("field", no_wrap=True)
    table.add_column("value", overflow="fold")
    for key, value in rows:
        table.add_row(key, str(value if value is not None else "-"))
    console.print(table)


def _note(run: dict) -> str:
    if run.get("note_unreadable"):
        return f"unreadable: {run['note_unreadable']}"
    return run.get("note") or "-"


def cmd_note(args) -> int:
    root = runs_dir(args)
    run = find_run(root, args.id)
    if args.text is None:
        if run.get("note"):
            print(printable(run["note"], keep_newlines=True))
        elif run.get("note_unreadable"):
            return fail_bad_input(
                printable(f"runs note: the note of {_named(run)} is unreadable: {run['note_unreadable']}")
            )
        return 0
    try:
        note = write_note(run["folder"], args.text)
    except ValueError as exc:
        return fail_bad_input(f"runs note: {exc}; nothing was written")
    except OSError as exc:
        return fail_bad_input(f"runs note: could not write the note of {_named(run)}: {exc.strerror or exc}")
    print(f"{'set the note of' if note else 'cleared the note of'} {_named(run)}")
    return 0


COMPARED_FIELDS = (
    "id name task precision autocast_dtype device status samples_per_second peak_memory_bytes best metrics "
    "test_metrics final_loss wall_seconds steps note"
).split()  # each run's fields in `runs compare --json`


def cmd_compare(args) -> int:
    runs = resolve_all(args)
    differing = differing_config(runs)
    rows = compare_rows(runs)
    if args.json:
        compared = [{"label": row.label, "values": list(row.values), "differs": row.differs} for row in rows]
        runs_json = [{k: r.get(k) for k in COMPARED_FIELDS} for r in runs]
        print(json.dumps({"runs": runs_json, "config_differs": differing, "rows": compared}, indent=2, default=str))
        return 0
    table = fmt.table(None)
    table.add_column("", no_wrap=True)
    for r in runs:
        table.add_column(f"{printable(str(r.get('id'))[:8])}\n{printable(r.get('name'))}", overflow="fold")
    for row in rows:  # the rows where the runs differ in bold
        table.add_row(row.label, *row.values, style="bold" if row.differs else None)
    fmt.console().print(table)
    if not differing:
        print("config: the same in every run (out_dir aside)")
    return 0


STEP_FIELDS = "epoch loss lr samples_per_second grad_scale grad_norm skipped_steps tokens_per_second".split()


def export_rows(folder: Path) -> tuple[list[str], list[dict]]:
    """StepMetrics and EvalMetrics of a run's metrics.jsonl as CSV rows keyed by step (val_*, test_*)."""
    by_step: dict[int | None, dict] = {}
    columns = ["step", "epoch", "loss", "lr", "samples_per_second"]
    extra: dict[str, None] = {}  # the further columns, in the order they first appear
    for record in read_jsonl(folder / METRICS_FILE):
        kind = record.get("event")
        if kind == "RunStarted" and isinstance(record.get("start_step"), int):  # a resume replaces what came after
            by_step = {s: row for s, row in by_step.items() if s is None or s <= record["start_step"]}
            continue
        if kind == "StepMetrics":
            values = {key: record[key] for key in STEP_FIELDS if record.get(key) is not None}
        elif kind == "EvalMetrics":
            split = record.get("split") or "val"
            values = {f"{split}_{name}": value for name, value in (record.get("metrics") or {}).items()}
        else:
            continue
        by_step.setdefault(record.get("step"), {"step": record.get("step")}).update(values)
        extra.update(dict.fromkeys(key for key in values if key not in columns))
    rows = [by_step[s] for s in sorted(by_step, key=lambda s: (s is None, s or 0))]
    return columns + list(extra), rows


def cmd_export(args) -> int:
    root = runs_dir(args)
    run = find_run(root, args.id)
    try:
        columns, rows = export_rows(Path(run["folder"]))
    except UnreadableFile as exc:
        return fail_bad_input(printable(f"runs export: cannot read the metrics of {_named(run)}: {exc}"))
    try:
        out = sys.stdout if args.csv == "-" else open(args.csv, "w", encoding="utf-8", newline="")
    except OSError as exc:
        return fail_bad_input(f"runs export: could not write {args.csv}: {exc.strerror or exc}")
    try:
        writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    finally:
        if out is not sys.stdout:
            out.close()
    if args.csv != "-":
        print(f"wrote {len(rows)} rows of run {_named(run)} to {printable(args.csv)}")
    return 0


def cmd_delete(args) -> int:
    root = runs_dir(args)
    runs = resolve_all(args)
    for run in runs:
        if is_in_use(run["folder"]):
            return fail_bad_input(f"runs delete: run {_named(run)} is running; stop it first")
    try:
        for run in runs:  # every one checked before any is deleted (delete_run checks again)
            check_deletable(root, run["folder"])
    except RunDeleteError as exc:
        return fail_bad_input(printable(f"runs delete: {exc}"))
    names = ", ".join(_named(r) for r in runs)
    if not args.yes:
        if not sys.stdin.isatty():
            return fail_bad_input(f"runs delete: add --yes to delete {names} (no terminal to ask on)")
        answer = input(f"Delete {len(runs)} run folder(s): {names}? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("nothing deleted")
            return 1
    for run in runs:
        try:
            delete_run(root, run["folder"])
        except RunDeleteError as exc:
            return fail_bad_input(printable(f"runs delete: {exc}"))
        print(printable(f"deleted {run.get('id')} ({run['folder']})"))
    return 0


def cmd_tensorboard(args) -> int:
    runs = resolve_all(args)
    try:
        from core.runs.tensorboard_export import export_run
    except ImportError as exc:
        return fail_bad_input(f"runs tensorboard: TensorBoard export is not available ({exc})")
    out = Path(args.out)
    for run in runs:
        try:
            path = export_run(Path(run["folder"]), out / str(run.get("name", run.get("id"))).replace("/", "_"))
        except UnreadableFile as exc:
            return fail_bad_input(printable(f"runs tensorboard: cannot read the metrics of {_named(run)}: {exc}"))
        print(printable(f"{_named(run)} -> {path}"))
    print(f"open with: tensorboard --logdir {out}")
    return 0


def register(sub) -> None:
    from core.cli.common import OneLineParser

    runs = sub.add_parser(
        "runs",
        help="list, show, annotate, compare, export and delete the runs under a runs folder",
        description="The runs under a runs folder (each subfolder with run.json, or an older "
        "one with metrics.jsonl). A run is named by its id, a unique prefix of "
        "it, or its folder name.",
    )
    add_runs_dir_flag(runs)
    commands = runs.add_subparsers(dest="runs_command", required=True, parser_class=OneLineParser, metavar="COMMAND")

    def add(name, handler, help_text):
        parser = commands.add_parser(name, help=help_text, description=help_text)
        add_runs_dir_flag(parser, default=argparse.SUPPRESS)
        parser.set_defaults(handler=handler)
        return parser

    p = add("list", cmd_list, "the runs, newest first (start times in UTC)")
    p.add_argument("--json", action="store_true", help="print a JSON list of the runs' records")
    p.add_argument("--task", help="only runs of this task")
    p.add_argument(
        "--status",
        choices=("running", "completed", "stopped", "failed", "interrupted", "unreadable"),
        help="only runs with this status",
    )
    p = add("show", cmd_show, "one run in full")
    p.add_argument("id", metavar="ID", help="run id, unique id prefix, or folder name")
    p.add_argument("--json", action="store_true", help="print the run's record as JSON")
    p = add("note", cmd_note, "print a run's note, or set it (an empty TEXT clears it); kept in note.txt in its folder")
    p.add_argument("id", metavar="ID", help="run id, unique id prefix, or folder name")
    p.add_argument("text", metavar="TEXT", nargs="?", help="the new note ('' clears it)")
    p = add("compare", cmd_compare, "runs side by side: speed, metrics, wall time, the config fields that differ")
    p.add_argument("ids", nargs="+", metavar="ID", help="run id, unique id prefix, folder name, or a run's folder")
    p.add_argument("--json", action="store_true", help="print JSON")
    p = add("export", cmd_export, "a run's step and evaluation metrics as CSV")
    p.add_argument("id", metavar="ID")
    p.add_argument("--csv", required=True, metavar="FILE", help="the CSV file to write ('-': stdout)")
    p = add("delete", cmd_delete, "delete run folders (asks first on a terminal; never a running run)")
    p.add_argument("ids", nargs="+", metavar="ID")
    p.add_argument("--yes", action="store_true", help="do not ask")
    p = add("tensorboard", cmd_tensorboard, "write runs as TensorBoard event files")
    p.add_argument("ids", nargs="+", metavar="ID")
    p.add_argument("--out", required=True, metavar="DIR", help="the TensorBoard log folder to write")
