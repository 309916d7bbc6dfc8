"""TensorBoard event files written as a run goes (RunConfig.tensorboard), and the tag mapping they share with
`runs tensorboard` (core.runs.tensorboard_export). Rank 0's EventLog hands each event's dict to a
`LiveTensorBoard`, which writes `<run>/tensorboard` with tensorboardX: RunStarted as the text `run/summary`,
StepMetrics and EvalMetrics as the scalars of `scalar_values`.
"""

from __future__ import annotations

import json
import uuid
import warnings
from pathlib import Path

TENSORBOARD_FOLDER = "tensorboard"
LIVE_SUFFIX = ".amp-console-live"  # not the export's suffix: a re-export into this folder leaves these files


def scalar_values(record: dict) -> list[tuple[str, float]]:
    """(tag, value) of every number a StepMetrics (train/...) or EvalMetrics (<split>/<metric>) record gives."""
    kind = record.get("event")
    found: list[tuple[str, object]] = []
    if kind == "StepMetrics":
        found += [
            ("train/loss", record.get("loss")),
            ("train/lr", record.get("lr")),
            ("train/samples_per_second", record.get("samples_per_second")),
            ("train/grad_norm", record.get("grad_norm")),
        ]
        if record.get("grad_scale") is not None:  # fp16 runs only
            found += [("train/grad_scale", record["grad_scale"]), ("train/skipped_steps", record.get("skipped_steps"))]
        memory = number(record.get("memory_bytes"))
        found.append(("train/memory_mib", memory / 2**20 if memory is not None else None))
        found.append(("train/tokens_per_second", record.get("tokens_per_second")))
    elif kind == "EvalMetrics":
        split = record.get("split") or "val"
        metrics = record.get("metrics")
        if isinstance(metrics, dict):
            found += [(f"{split}/{name}", value) for name, value in metrics.items()]
    return [(tag, value) for tag, value in ((tag, number(value)) for tag, value in found) if value is not None]


def number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def run_summary(record: dict) -> str:
    """RunStarted as markdown: what ran, where, in which precision, and every setting."""
    device = f"{record.get('device', '?')}" + (f" ({record['device_name']})" if record.get("device_name") else "")
    paragraphs = [
        f"**task** {record.get('task', '?')}, **device** {device}",
        f"**precision** {record.get('precision', '?')} (autocast {record.get('autocast_dtype', '?')}, "
        f"parameters {record.get('param_dtype', '?')}, GradScaler {'on' if record.get('scaler') else 'off'})",
        f"**steps** {record.get('start_step', 0)} to {record.get('total_steps', '?')}, "
        f"{record.get('param_count', '?')} parameters",
        *(f"note: {note}" for note in record.get("notes") or []),
    ]
    config = record.get("config")
    if isinstance(config, dict) and config:
        rows = [f"| {key} | {json.dumps(value, default=str)} |" for key, value in config.items()]
        paragraphs.append("\n".join(["| setting | value |", "|---|---|", *rows]))
    return "\n\n".join(paragraphs)


def summary_writer_class():
    """tensorboardX's SummaryWriter; ImportError when tensorboardX is not installed (or broken)."""
    with warnings.catch_warnings():  # protobuf/tensorboardX may warn of their own deprecations at import
        warnings.simplefilter("ignore", DeprecationWarning)
        from tensorboardX import SummaryWriter
    return SummaryWriter


class LiveTensorBoard:
    """Event files in `folder`, written from rank 0's events (ImportError without tensorboardX)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self._writer_class = summary_writer_class()
        self._writer = None

    def write(self, record: dict) -> None:
        kind = record.get("event")
        if kind == "RunStarted":
            self.close()  # one writer per run segment, each its own file: tensorboardX names files by the second
            # and host only, so a segment started within the same second would overwrite the last one's file
            start = int(record.get("start_step") or 0)
            self.folder.mkdir(parents=True, exist_ok=True)
            self._writer = writer = self._writer_class(
                logdir=str(self.folder),
                filename_suffix=f".{uuid.uuid4().hex[:8]}{LIVE_SUFFIX}",
                flush_secs=3600,
                max_queue=1000,
                purge_step=start + 1 if start else None,
            )  # a resumed run: hide what was logged after `start`
            writer.add_text("run/summary", run_summary(record), global_step=start)
            writer.flush()
        elif self._writer is None:
            return
        elif kind in ("StepMetrics", "EvalMetrics"):
            step = int(record["step"])
            for tag, value in scalar_values(record):
                self._writer.add_scalar(tag, value, global_step=step)
            self._writer.flush()  # at log intervals and evaluations, never per step
        elif kind == "RunEnded":
            self.close()

    def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
