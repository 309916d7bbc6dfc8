"""`amp-console evaluate RUN_OR_CHECKPOINT`: a checkpoint's metrics on its run's test (or val) split, or on
another data file (core.lab.evaluate). RUN_OR_CHECKPOINT is a checkpoint file, a run folder, or a run id /
unique id prefix / folder name under the runs root (as `amp-console runs` names runs); for a run, its last
checkpoint, or its best with --best. No torch at import time.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from core.cli.train import add_data_flags, data_flag_values
from core.errors import ConfigError


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="a checkpoint's metrics on its run's test or val split (or another file)",
                       description="Rebuild the run's task, split and model from the checkpoint's settings, load "
                                   "its weights and measure the split, in the precision it trained in. Nothing "
                                   "is written where the checkpoint lives.")
    p.add_argument("target", metavar="RUN_OR_CHECKPOINT",
                   help="a checkpoint file, a run folder, or a run id / unique prefix / folder name")
    p.add_argument("--split", choices=("test", "val"), default=None,
                   help="which split (default: test, or val when the data has no test split)")
    p.add_argument("--best", action="store_true", help="a run's best checkpoint instead of its last")
    p.add_argument("--data", metavar="FILE", help="measure on this data file (or folder) instead of the run's own, "
                                                  "split on its own (its split column or train/val/test files, "
                                                  "else the task's split); a run trained on given splits "
                                                  "otherwise measures its given test file")
    add_data_flags(p)
    p.add_argument("--device", help="evaluate on this device (default: the run's setting)")
    p.add_argument("--batch-size", type=int, default=None, help="rows per evaluation batch (default: the run's)")
    p.add_argument("--runs-dir", metavar="DIR", default=None, help="the runs root to look run ids up in")
    p.add_argument("--json", action="store_true", help="last stdout line: one JSON object")
    p.set_defaults(handler=cmd_evaluate)


def find_checkpoint(target: str, best: bool, runs_dir: str | None) -> Path:
    """The checkpoint `target` names (see the module doc); ConfigError (field 'checkpoint') when none."""
    from core.engine.run_folder import CHECKPOINT_FILE

    path = Path(target).expanduser()
    if path.is_file():
        if best:
            raise ConfigError("checkpoint", f"{target} is a checkpoint file: --best takes a run (folder or id)")
        return path
    if path.is_dir():
        return _run_checkpoint(path, best)
    from core.cli.runs import RunNotFound, resolve
    from core.engine.run_record import find_runs, runs_root

    root = runs_root(runs_dir)
    try:
        run = resolve(find_runs(root), target, root)
    except RunNotFound as exc:
        raise ConfigError("checkpoint", f"{target}: no such checkpoint file or run folder, and "
                                        f"{str(exc).removeprefix('runs: ')}") from None
    if not best and (Path(run["folder"]) / CHECKPOINT_FILE).is_file():
        return Path(run["folder"]) / CHECKPOINT_FILE
    return _run_checkpoint(Path(run["folder"]), best)


def _run_checkpoint(folder: Path, best: bool) -> Path:
    from core.engine.run_folder import CHECKPOINT_FILE
    from core.engine.run_record import load_record

    if not best:
        if (folder / CHECKPOINT_FILE).is_file():
            return folder / CHECKPOINT_FILE
        raise ConfigError("checkpoint", f"{folder}: no {CHECKPOINT_FILE} in this folder")
    entries = [v for k, v in ((load_record(folder) or {}).get("checkpoints") or {}).items()
               if k != "last" and isinstance(v, dict) and v.get("path")]
    ranked = sorted(entries, key=lambda e: e.get("rank", 1))
    for entry in ranked:
        candidate = folder / Path(entry["path"]).name
        if candidate.is_file():
            return candidate
    if (folder / "best.pt").is_file():
        return folder / "best.pt"
    raise ConfigError("checkpoint", f"{folder}: no best checkpoint (the run kept none: --keep-best 0, or it "
                                    f"never evaluated)")


def cmd_evaluate(args) -> int:
    from core.cli import format as fmt
    from core.lab.evaluate import evaluate_checkpoint

    checkpoint = find_checkpoint(args.target, args.best, args.runs_dir)
    sys.stderr.write(f"evaluating {checkpoint} on the {args.split or 'test'} split…\n")
    result = evaluate_checkpoint(checkpoint, args.split, data=args.data, device=args.device,
                                 batch_size=args.batch_size, data_settings=data_flag_values(args))
    args.split = result.split
    if args.json:
        print(json.dumps(result.to_dict()))
        return 0
    where = f"{result.split_data or result.data}" if result.data else "its synthetic data"
    compute = f" (autocast {result.autocast_dtype})" if result.autocast_dtype else ""
    print(f"{result.task} checkpoint at step {result.step:,} ({checkpoint}), {args.split} split of {where}, "
          f"on {result.device} in {result.precision}{compute}: {fmt.duration(result.seconds)}")
    on = "" if args.split == "val" else "on val: "
    for name, value in result.metrics.items():
        refs = [f"baseline {result.baseline[name]:.4f}"] if name in result.baseline else []
        refs += [f"planted ceiling {result.ceiling[name]:.4f}"] if name in result.ceiling else []
        print(f"  {args.split:<4} {name:<26} {value:.4f}" + (f"   ({on}{', '.join(refs)})" if refs else ""))
    return 0
