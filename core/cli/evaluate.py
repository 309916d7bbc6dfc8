"""`amp-console evaluate RUN_OR_CHECKPOINT`: a checkpoint's metrics on its run's test (or val) split, or on another data
file (core.runs.evaluate). For a run, its best checkpoint (else its last), or as --best/--last asks. No torch at
import time.
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

from core.cli.common import add_checkpoint_args
from core.cli.train import add_data_flags, data_flag_values, references
from core.errors import CheckpointError, ConfigError
from core.files import UnreadableFile
from core.text import printable


def register(sub) -> None:
    p = sub.add_parser(
        "evaluate",
        help="a checkpoint's metrics on its run's test or val split (or another file)",
        description="Rebuild the run's task, split and model from the checkpoint's settings, load "
        "its weights and measure the split, in the precision it trained in. Nothing "
        "is written where the checkpoint lives.",
    )
    add_checkpoint_args(p)
    p.add_argument(
        "--split", choices=("test", "val"), help="which split (default: test, or val when the data has no test split)"
    )
    p.add_argument(
        "--data",
        metavar="FILE",
        help="measure on this data file (or folder) instead of the run's own, "
        "split on its own (its split column or train/val/test files, "
        "else the task's split); a run trained on given splits "
        "otherwise measures its given test file",
    )
    add_data_flags(p)
    p.add_argument("--device", help="evaluate on this device (default: the run's setting)")
    p.add_argument("--batch-size", type=int, help="rows per evaluation batch (default: the run's)")
    p.add_argument(
        "--report",
        action="store_true",
        help="also the evaluation report (confusion matrix and ROC curve, HR@k / NDCG@k curves, by "
        "history length or query size) on the run's own split, written as evaluation.json in "
        "the run folder; with --json the report is the JSON printed",
    )
    p.add_argument("--json", action="store_true", help="last stdout line: one JSON object")
    p.set_defaults(handler=cmd_evaluate)


def _run_folder(target: str, runs_dir: str | None) -> Path:
    """The folder of the run `target` names: a folder, or a run's id, id prefix or folder name under the runs root."""
    path = Path(target).expanduser()
    if path.is_dir():
        return path
    from core.cli.runs import RunNotFound, find_run
    from core.engine.run_record import runs_root

    try:
        return Path(find_run(runs_root(runs_dir), target)["folder"])
    except RunNotFound as exc:
        raise ConfigError(
            "checkpoint", f"{target}: no such checkpoint file or run folder, and {str(exc).removeprefix('runs: ')}"
        ) from None


def find_checkpoint(target: str, best: bool, runs_dir: str | None) -> Path:
    """The checkpoint `target` names: a checkpoint file as it is; a run's best with `best` (ConfigError, field
    'checkpoint', when it kept none), else its last (core.engine.run_record.run_checkpoint)."""
    from core.engine.run_record import read_record, run_checkpoint

    if Path(target).expanduser().is_file():
        if best:
            raise ConfigError("checkpoint", f"{target} is a checkpoint file: --best takes a run (folder or id)")
        return Path(target).expanduser()
    folder = _run_folder(target, runs_dir)
    if not best:
        return run_checkpoint(folder, "last")[0]
    with contextlib.suppress(CheckpointError):
        path, fell_back = run_checkpoint(folder, "best")
        if not fell_back:
            return path
    try:  # why run.json could not say which checkpoints the run kept
        read_record(folder)
        why = ""
    except UnreadableFile as exc:
        why = f"; its {printable(exc)}"
    except OSError:
        why = ""
    raise ConfigError(
        "checkpoint", f"{folder}: no best checkpoint (the run kept none: --keep-best 0, or it never evaluated{why})"
    )


def chosen_checkpoint(args, doing: str) -> Path:
    """The checkpoint a command works on (common.add_checkpoint_args): a file as it is; a run's best, or its last
    with --last. With neither asked for, the one its summary advised (run_checkpoint "advised"): its best when it
    kept one, else its last, said on stderr."""
    from core.engine.run_record import run_checkpoint

    if args.best or args.last or Path(args.target).expanduser().is_file():
        return find_checkpoint(args.target, args.best, args.runs_dir)
    path, notes = run_checkpoint(_run_folder(args.target, args.runs_dir), "advised")
    for note in notes:  # the last weights, advised by the run's summary or for want of a best checkpoint
        sys.stderr.write(f"note: {note.replace('; using its last one', f': {doing} its last')} (--best, --last)\n")
    return path


def cmd_evaluate(args) -> int:
    from core.runs.evaluate import evaluate_checkpoint

    if args.report and (args.data or data_flag_values(args)):
        raise ConfigError(
            "report", "--report measures the run's own split (its evaluation.json): leave out --data and the data flags"
        )
    checkpoint = chosen_checkpoint(args, "evaluating")

    def announce(split: str) -> None:  # the split measured, once the rebuilt run has chosen it
        why = " (the data has no test split)" if args.split is None and split != "test" else ""
        sys.stderr.write(f"evaluating {checkpoint} on the {split} split{why}…\n")

    if args.report:
        return _report(args, checkpoint, announce)
    result = evaluate_checkpoint(
        checkpoint,
        args.split,
        data=args.data,
        device=args.device,
        batch_size=args.batch_size,
        data_settings=data_flag_values(args),
        announce=announce,
    )
    if args.json:
        print(json.dumps(result.to_dict()))
        return 0
    _print_metrics(result.to_dict(), checkpoint)
    return 0


def _print_metrics(result: dict, checkpoint: Path) -> None:
    """The usual lines: where and how the checkpoint was measured, then each metric with its references."""
    from core.cli import format as fmt

    split = result["split"]
    where = f"{result['split_data'] or result['data']}" if result["data"] else "the task's own data (no --data)"
    compute = f" (autocast {result['autocast_dtype']})" if result["autocast_dtype"] else ""
    print(
        f"{result['task']} checkpoint at step {result['step']:,} ({checkpoint}), {split} split of {where}, "
        f"on {result['device']} in {result['precision']}{compute}: {fmt.duration(result['seconds'])}"
    )
    on = "" if split == "val" else "on val: "
    for name, value in result["metrics"].items():
        print(f"  {split:<4} {name:<26} {_value(value)}{references(name, result['baseline'], result['ceiling'], on)}")


def _value(value) -> str:
    return "-" if value is None else f"{value:.4f}"


TABLE_KS = (1, 5, 10, 20, 50)  # the report's curves in the terminal: these k (those the curve has)


def _report(args, checkpoint: Path, announce) -> int:
    """--report: the report computed and written beside the checkpoint, then printed (or its JSON)."""
    from core.runs.evaluation_report import evaluation_report, report_folder, write_report

    report = evaluation_report(
        checkpoint, args.split, device=args.device, batch_size=args.batch_size, announce=announce
    )
    path = write_report(report, report_folder(checkpoint))
    if args.json:
        print(json.dumps(report))
        return 0
    _print_metrics(report, checkpoint)
    for line in report_lines(report):
        print(line)
    print(f"report written to {path}")
    return 0


def _aligned(label, width: int, cells, cell_width: int) -> str:
    """'  label  cell cell': `label` left-aligned in `width`, each cell right-aligned in `cell_width`."""
    return f"  {label:<{width}}" + "".join(f"{cell:>{cell_width}}" for cell in cells)


def report_lines(report: dict) -> list[str]:
    """The report's sections present as compact text: confusion matrix, figures, curves at TABLE_KS, buckets."""
    lines: list[str] = []
    confusion = report.get("confusion") or {}
    labels, matrix = confusion.get("labels") or [], confusion.get("matrix") or []
    if labels and len(matrix) == len(labels):
        width = max(8, *(len(str(label)) for label in labels))
        lines += ["", "confusion matrix (rows: true class, columns: predicted)", _aligned("", width, labels, width + 2)]
        lines += [_aligned(label, width, (f"{n:,}" for n in row), width + 2) for label, row in zip(labels, matrix)]
    classification = report.get("classification") or {}
    roc = report.get("roc") or {}
    figures = [f"{name} {value:.4f}" for name, value in classification.items() if isinstance(value, float)]
    if isinstance(roc.get("auc"), float):
        figures.append(f"ROC AUC {roc['auc']:.4f} ({len(roc.get('fpr') or [])} curve points)")
    if figures:
        lines += ["", "  " + ", ".join(figures)]
    for curve in report.get("curves") or []:
        ks = curve.get("ks") or []
        shown = [k for k in TABLE_KS if k in ks]
        if not shown:
            continue
        series = curve.get("series") or []
        names = [s.get("label") or s.get("name") or "" for s in series]
        width = max([len(name) for name in names] + [10])
        metric = (curve.get("metric") or "").upper()
        lines += ["", f"{curve.get('title', '')}".strip(), _aligned("", width, (f"{metric}@{k}" for k in shown), 10)]
        for name, s in zip(names, series):
            values = s.get("values") or []
            cells = [_value(values[ks.index(k)]) if ks.index(k) < len(values) else "-" for k in shown]
            lines.append(_aligned(name, width, cells, 10))
    buckets = report.get("buckets") or {}
    rows = buckets.get("rows") or []
    if rows:  # one column per bucket (a few), one line per figure: fits 100 columns
        names = list(dict.fromkeys(name for row in rows for name in (row.get("values") or {})))
        unit = buckets.get("unit") or "count"
        width = max([len(n) for n in names] + [len(str(unit))])
        lines += [
            "",
            buckets.get("title") or "by bucket",
            _aligned("", width, (row.get("label", "") for row in rows), 9),
            _aligned(unit, width, (f"{row.get('count', 0):,}" for row in rows), 9),
        ]
        lines += [_aligned(n, width, (_value((row.get("values") or {}).get(n)) for row in rows), 9) for n in names]
    return lines
