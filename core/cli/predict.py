"""`amp-console predict RUN_OR_CHECKPOINT --input FILE --out FILE`: a trained model's predictions for a whole file in
the task's own input format. The work is core.runs.file_predict's; a task's own options (a recommender's --k) are its
file scorer's. Bad rows, --strict, exit statuses and the partial file: docs/runs.md. No torch at import time.
"""

from __future__ import annotations

import sys
from pathlib import Path

from core.cli.common import add_checkpoint_args
from core.runs.file_predict import DEFAULT_BATCH
from core.text import printable


def register(sub) -> None:
    p = sub.add_parser(
        "predict",
        help="a trained model's predictions for a CSV/Parquet/JSON lines file in the task's input format",
        description="Score a whole file with a run's model (best checkpoint by default): reviews -> P(positive), "
        "user histories -> top-k lesson ids, query candidates -> scores, tiny points -> class "
        "probabilities, a task's declared inputs (a column each) -> its outputs. Streams the input in bounded memory; bad rows are skipped and reported by "
        "line (or refused with --strict); the output appears only when complete.",
    )
    add_checkpoint_args(p)
    p.add_argument("--input", required=True, metavar="FILE", help="the rows to score (.csv, .parquet or .jsonl)")
    p.add_argument("--out", required=True, metavar="FILE", help="where the predictions go (.csv or .parquet)")
    from core.tasks import predict_options

    for option in predict_options():  # the tasks' own, as their file scorers declare them
        if isinstance(option.default, bool):
            p.add_argument(option.flag, action="store_true", help=option.help)
        else:
            p.add_argument(option.flag, type=type(option.default), default=option.default, help=option.help)
    p.add_argument("--device", help="score on this device (default: cpu)")
    p.add_argument(
        "--batch-size", type=int, default=DEFAULT_BATCH, help=f"rows scored at a time (default {DEFAULT_BATCH})"
    )
    p.add_argument("--strict", action="store_true", help="the first bad row is an error (exit 2), nothing written")
    p.set_defaults(handler=cmd_predict)


def cmd_predict(args) -> int:
    """Exit codes: 0 written, 1 the output could not be written (a full disk), 2 bad input, 128 + the signal's
    number when SIGINT, SIGTERM or SIGHUP stopped it (the partial output removed, nothing written)."""
    from core.cli.common import StopBeforeStart, StopSignals, safe_standard_streams
    from core.process import signal_name
    from core.runs.predict_output import WriteFailed

    # Any stop signal unwinds the command from wherever it is (a StopBeforeStart raised by the handler), so the
    # partial output is removed on the way out; a repeated one while unwinding is ignored.
    with safe_standard_streams(), StopSignals(announce=False) as signals:
        try:
            return _predict(args, signals)
        except StopBeforeStart as exc:
            sys.stderr.write(
                f"amp-console: {signal_name(exc.signum)}: predict stopped; nothing written to {printable(args.out)}\n"
            )
            return signals.exit_code
        except WriteFailed as exc:
            sys.stderr.write(f"amp-console: error: {exc}\n")
            return 1


def _predict(args, signals) -> int:
    import contextlib
    from types import SimpleNamespace

    from core.cli.common import stop_signals_held
    from core.cli.evaluate import chosen_checkpoint  # a run's best by default, else its last
    from core.runs.file_predict import FilePrediction, PredictRequest, check_request
    from core.runs.predict import load_predictor
    from core.tasks import predict_options

    request = PredictRequest(
        source=Path(args.input).expanduser(),
        out=Path(args.out).expanduser(),
        batch_size=args.batch_size,
        task_options={option.dest: getattr(args, option.dest) for option in predict_options()},
        strict=args.strict,
    )
    for note in check_request(request):
        sys.stderr.write(f"note: {note}\n")
    checkpoint = chosen_checkpoint(args, "predicting with")
    predictor = load_predictor(checkpoint, device=args.device)
    for note in predictor.notes:
        sys.stderr.write(f"note: {note}\n")
    job = FilePrediction(predictor, request)
    sys.stderr.write(f"predict: {job.describe()}\n")

    @contextlib.contextmanager
    def committing():  # once renamed into place the output stands: a later signal stops nothing
        with stop_signals_held():
            yield
            signals.started(SimpleNamespace(stop=lambda: None))

    done = job.run(committing)
    extra = "".join(f"; {note}" for note in done.notes)
    print(
        f"predict: {done.scored:,} {done.unit} scored, {done.skipped:,} skipped, {done.rows_per_second:,.0f} "
        f"rows/s ({done.seconds:.1f} s){extra} -> {request.out}"
    )
    return 0
