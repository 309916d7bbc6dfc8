"""A `train` process under torchrun (or SLURM) that may be a restart: a restarted worker or a requeued SLURM job resumes
from the run folder's checkpoint.pt (rank 0 notes it in run.json); every rank's stderr also goes to
`<run>/ranks/rank-<R>.log`; a failed rank writes torchelastic's error file (importing torch): torchrun's root cause is
our message. `python -m core.cli.elastic ARGS` is torchrun's worker: `python -m core.cli ARGS` without torch's
deprecation warnings, which every rank would print at every start.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from core.cli.nodes import AUTO_RESUME_ENV
from core.engine.run_folder import CHECKPOINT_FILE, HELD_ENV, METRICS_FILE, ClaimedFolder, claim_run_folder
from core.files import read_jsonl

RANK_LOGS_DIR = "ranks"
RANK_LOGS_ENV = "AMP_CONSOLE_RANK_LOGS"  # the launcher's <run>/ranks: each rank's stderr is copied there
RANK0_CLAIMS_ENV = "AMP_CONSOLE_RANK0_CLAIMS"  # a multi-node run's folder, claimed by global rank 0

_tee: subprocess.Popen | None = None  # kept for the process's life: it copies fd 2


def _int_env(name: str) -> int:
    try:
        return int(os.environ.get(name, "0") or 0)
    except ValueError:
        return 0


def restart_source(out_dir: str | None) -> tuple[str, int] | None:
    """('torchrun', n) for a worker torchrun restarted, ('slurm', n) for a requeued SLURM job, else None."""
    count = _int_env("TORCHELASTIC_RESTART_COUNT")
    if count > 0 and os.environ.get(AUTO_RESUME_ENV):
        return "torchrun", count
    job = os.environ.get("SLURM_JOB_ID", "")
    if job:
        count = _int_env("SLURM_RESTART_COUNT")
        # the script's folder <name>-<job id>, the id matched exactly (not "7" in exp-2027)
        if count > 0 or (out_dir and Path(out_dir).name.rpartition("-")[2] == job):
            return "slurm", count
    return None


def _out_dir(args) -> str | None:
    if getattr(args, "out_dir", None):
        return args.out_dir
    if getattr(args, "config", None):
        from core.config import read_config_file

        return read_config_file(args.config).get("out_dir") or None
    return None


def auto_resume(args) -> dict | None:
    """Set `args.resume` to the run folder's checkpoint when this process is a restart (see the module doc);
    the restart's record ({'count', 'by', 'reason', 'last_step'}) for rank 0, else None."""
    out = _out_dir(args)
    source = restart_source(out)
    if source is None or not out or not (Path(out) / CHECKPOINT_FILE).is_file():
        return None
    args.resume = str(Path(out) / CHECKPOINT_FILE)
    by, count = source
    reason, last_step = previous_attempt(Path(out) / METRICS_FILE)
    return {"count": count, "by": by, "reason": reason, "last_step": last_step}


def previous_attempt(events: Path) -> tuple[str, int | None]:
    """How the latest start in metrics.jsonl ended (its RunEnded message), and the last step it logged."""
    records = read_jsonl(events) if events.is_file() else []
    starts = [i for i, record in enumerate(records) if record.get("event") == "RunStarted"]
    attempt = records[starts[-1] :] if starts else records
    ended = [r for r in attempt if r.get("event") == "RunEnded"]
    steps = [r.get("step") for r in attempt if r.get("event") in ("StepMetrics", "CheckpointSaved")]
    last_step = max((s for s in steps if isinstance(s, int)), default=None)
    if ended:
        return f"{ended[-1].get('status')}: {ended[-1].get('message')}", last_step
    return "it ended without a word (a process was killed)", last_step


def restart_note(restart: dict, checkpoint: str) -> str:
    how = "torchrun --max-restarts" if restart["by"] == "torchrun" else "a requeued SLURM job"
    return (
        f"restart {restart['count']} ({how}): resumed from {checkpoint}; the attempt before ended {restart['reason']}"
    )


def tee_stderr() -> None:
    """Copy this rank's stderr to <run>/ranks/rank-<RANK>.log (see the module doc); nothing when not asked."""
    global _tee
    folder = os.environ.get(RANK_LOGS_ENV)
    if not folder or _tee is not None:
        return
    rank = os.environ.get("RANK", "0")
    path = Path(folder) / f"rank-{rank}.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        from core.engine.run_record import now_iso

        with open(path, "a", encoding="utf-8") as log:
            log.write(
                f"--- {now_iso()} rank {rank} (local rank {os.environ.get('LOCAL_RANK', '0')}) on node "
                f"{socket.gethostname()}, process {os.getpid()}, restart "
                f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}\n"
            )
        tee = shutil.which("tee")
        sys.stderr.flush()
        if tee is None:  # no tee here: the log alone
            fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            os.dup2(fd, 2)
            os.close(fd)
            return
        _tee = subprocess.Popen([tee, "-a", str(path)], stdin=subprocess.PIPE, stdout=2, stderr=subprocess.DEVNULL)
        assert _tee.stdin is not None  # stdin=PIPE
        os.dup2(_tee.stdin.fileno(), 2)
    except OSError as exc:
        sys.stderr.write(f"amp-console: rank {rank}: no log in {path}: {exc.strerror or exc}\n")


class RankFailed(Exception):
    """A rank's run failed: the message torchelastic's error file carries (its root cause)."""


def record_failure(message: str) -> None:
    """Write torchelastic's error file for this rank (torch's own ErrorHandler, as @record does)."""
    if not os.environ.get("TORCHELASTIC_ERROR_FILE"):
        return
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler

    try:
        raise RankFailed(message)
    except RankFailed as exc:
        ErrorHandler().record_exception(exc)


def claim_for_rank0() -> ClaimedFolder | None:
    """Global rank 0 of a multi-node run claims the run folder (the launchers checked it is new or resumed)."""
    shared = os.environ.get(RANK0_CLAIMS_ENV)
    if not shared or os.environ.get("RANK") != "0":
        return None
    folder = claim_run_folder(shared, keep=True)
    os.environ[HELD_ENV] = str(folder.path)  # the Trainer writes there without claiming it again
    return folder


if __name__ == "__main__":
    import warnings

    from core.cli.main import main
    from core.process import exit_process

    for kind in (FutureWarning, DeprecationWarning):  # torch's, for calls of torch or the engine: not the user's
        warnings.filterwarnings("ignore", category=kind, module=r"(torch|core)\.")
    exit_process(main())
