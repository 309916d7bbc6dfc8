"""A run folder's metrics.jsonl as TensorBoard event files (`amp-console runs tensorboard`, tensorboardX): the
scalars a live run writes, a `run/summary` text and the settings as hparams; a resumed segment replaces the
points after its start.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from core.engine.tensorboard_live import number, run_summary, scalar_values, summary_writer_class
from core.errors import AmpConsoleError, DataError
from core.files import check_regular_file, check_writable_folder, read_jsonl, shown_path

METRICS_FILE = "metrics.jsonl"  # core.engine.run_folder.METRICS_FILE (not imported: that module is not needed)
FILENAME_SUFFIX = ".amp-console"  # marks the event files this export writes, so a re-export replaces them
MISSING_MESSAGE = "TensorBoard export needs tensorboardX: pip install 'amp-console[tensorboard]'"
_TIME_KEYS = ("time", "wall_time", "timestamp")


@dataclass
class _Export:
    """What metrics.jsonl says, with overwritten points already dropped."""

    scalars: dict[str, dict[int, tuple[float, float | None]]] = field(default_factory=dict)  # (value, walltime)
    texts: list[tuple[int, str, float | None]] = field(default_factory=list)  # (step, markdown, walltime)
    config: dict = field(default_factory=dict)  # the latest segment's settings
    last_val: dict[str, float] = field(default_factory=dict)  # tag -> value of the latest validation

    def add(self, tag: str, step: int, value, walltime: float | None) -> None:
        value = number(value)
        if value is not None:
            self.scalars.setdefault(tag, {})[step] = (value, walltime)

    def resume_at(self, step: int) -> None:
        """A segment starts at `step`: what earlier segments logged after it was done again (or never kept)."""
        for points in self.scalars.values():
            for later in [s for s in points if s > step]:
                del points[later]
        self.texts = [text for text in self.texts if text[0] < step]
        self.last_val = {
            tag: points[max(points)][0] for tag, points in self.scalars.items() if tag.startswith("val/") and points
        }


def export_run(run_dir: Path, out_dir: Path) -> Path:
    """Write the run's metrics.jsonl as a TensorBoard event file in `out_dir`, replacing an older export."""
    run_dir, out_dir = Path(run_dir), Path(out_dir)
    try:
        writer_class = summary_writer_class()
    except ImportError:
        raise AmpConsoleError(MISSING_MESSAGE) from None
    records = _read_records(run_dir)
    export = _collect(records)
    if not export.scalars and not export.texts:
        raise DataError(f"{shown_path(run_dir)}: {METRICS_FILE} holds no training events to export")
    check_writable_folder(out_dir, "out")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AmpConsoleError(f"could not create {shown_path(out_dir)}: {exc.strerror or exc}") from None
    try:  # written aside, then moved in: a failed export leaves the last one, a new one replaces it
        with tempfile.TemporaryDirectory(prefix=".export-", dir=out_dir) as scratch:
            _write(writer_class, Path(scratch), export)
            for path in out_dir.glob(f"events.out.tfevents.*{FILENAME_SUFFIX}"):
                path.unlink()
            for path in Path(scratch).iterdir():
                os.replace(path, out_dir / path.name)
    except OSError as exc:
        raise AmpConsoleError(
            f"could not write the event file in {shown_path(out_dir)}: {exc.strerror or exc}"
        ) from None
    return out_dir


def _read_records(run_dir: Path) -> list[dict]:
    path = run_dir / METRICS_FILE
    if not run_dir.is_dir():
        raise DataError(f"{shown_path(run_dir)}: no such run folder")
    if not os.path.lexists(path):
        raise DataError(f"{shown_path(run_dir)}: no {METRICS_FILE} here (not a run folder, or the run never started)")
    check_regular_file(path, "run")  # a FIFO or device is refused unopened
    records = read_jsonl(path)
    if not records:
        raise DataError(f"{shown_path(run_dir)}: {METRICS_FILE} is empty")
    return records


def _collect(records: list[dict]) -> _Export:
    export = _Export()
    for record in records:
        kind = record.get("event")
        walltime = _walltime(record)
        step = _step(record)
        if kind == "RunStarted":
            start = _step({"step": record.get("start_step", 0)}) or 0
            export.resume_at(start)
            config = record.get("config")
            export.config = dict(config) if isinstance(config, dict) else {}
            export.texts.append((start, run_summary(record), walltime))
        elif step is None:
            continue
        elif kind in ("StepMetrics", "EvalMetrics"):
            for tag, value in scalar_values(record):  # the tags the live writer uses too
                export.add(tag, step, value, walltime)
                if tag.startswith("val/"):
                    export.last_val[tag] = value
    return export


def _write(writer_class, out_dir: Path, export: _Export) -> None:
    now = time.time()
    writer = writer_class(logdir=str(out_dir), filename_suffix=FILENAME_SUFFIX, flush_secs=3600)
    try:
        for step, text, walltime in export.texts:
            writer.add_text("run/summary", text, global_step=step, walltime=walltime or now)
        for tag, points in export.scalars.items():
            for step, (value, walltime) in sorted(points.items()):
                writer.add_scalar(tag, value, global_step=step, walltime=walltime or now)
        _write_hparams(writer, export)
    finally:
        writer.close()


def _write_hparams(writer, export: _Export) -> None:
    """The settings as hparams, in the same event file (add_hparams would open a second run)."""
    hparams = _flat_hparams(export.config)
    if not hparams:
        return
    from tensorboardX.summary import hparams as hparams_summaries

    for summary in hparams_summaries(hparams, dict(export.last_val)):
        writer.file_writer.add_summary(summary)


def _flat_hparams(config: dict, prefix: str = "") -> dict:
    """Settings as the plain values hparams take: nested dicts (task options) as `a.b`, None and lists as text."""
    flat: dict = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flat_hparams(value, f"{name}."))
        elif isinstance(value, bool | str):
            flat[name] = value
        elif isinstance(value, int | float):
            flat[name] = value if math.isfinite(value) else str(value)
        else:
            flat[name] = json.dumps(value, default=str)
    return flat


def _step(record: dict) -> int | None:
    step = record.get("step")
    if isinstance(step, bool) or not isinstance(step, int | float) or not math.isfinite(step):
        return None
    return int(step)


def _walltime(record: dict) -> float | None:
    for key in _TIME_KEYS:
        value = number(record.get(key))
        if value is not None and math.isfinite(value) and value > 0:
            return value
    return None
