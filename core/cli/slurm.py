"""`amp-console slurm`: an sbatch script for a config (srun starts `amp-console train` on each node, meeting at the
job's first node), and what `train` does inside a SLURM job: SIGUSR1 before the time limit checkpoints and stops the
run, the job's first task runs `scontrol requeue`, and the requeued job resumes from the checkpoint. Torch-free.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from core.cli.nodes import DEFAULT_PORT
from core.errors import ConfigError

WARNING_SIGNAL = "USR1"
WARNING_SECONDS = 90


# Each flag: (flag, type, default, metavar, help).
SLURM_FLAGS = (
    ("--nodes", int, 1, "N", "machines (default 1)"),
    ("--gpus-per-node", int, 0, "G", "GPUs on each machine, one process each (default 0: CPU, see --nproc-per-node)"),
    ("--nproc-per-node", int, None, "K", "processes on each machine (default: --gpus-per-node, else 1)"),
    ("--time", str, "04:00:00", "HH:MM:SS", "the job's time limit (default 04:00:00)"),
    ("--partition", str, None, "NAME", "the partition (queue) to run in"),
    ("--account", str, None, "NAME", "the account to charge"),
    ("--job-name", str, "amp-console", "NAME", "the job's name (default amp-console)"),
    (
        "--runs-dir",
        str,
        "runs",
        "DIR",
        "a folder every node sees (shared): the run goes in DIR/<job name>-<job id> (default runs)",
    ),
    (
        "--cpus-per-task",
        int,
        None,
        "C",
        "CPU cores on each machine for its processes and their data loading (default: one per process)",
    ),
    (
        "--port",
        int,
        None,
        "PORT",
        f"the rendezvous port on the job's first node (default {DEFAULT_PORT} + the job id mod 1000, so jobs "
        "sharing a node differ; $AMP_CONSOLE_RDZV_PORT at submission overrides it)",
    ),
    ("--max-restarts", int, 0, "R", "restart a failed process up to R times within the job (torchrun), resuming"),
    ("--script", str, None, "FILE.sbatch", "write the script here (default: stdout)"),
)


def register(sub) -> None:
    p = sub.add_parser(
        "slurm",
        help="write an sbatch script that trains a config on SLURM nodes, requeued at "
        "its time limit and resumed from its checkpoint",
        description="Print (or write with --script) an sbatch script: srun starts `amp-console "
        "train` on every node with torchrun's rendezvous at the job's first node; "
        "SIGUSR1 90 s before the time limit checkpoints and requeues the job, which "
        "resumes by itself. Arguments after -- go to `train` as they are.",
    )
    p.add_argument("--config", required=True, metavar="FILE.toml", help="the run's settings (see `train --config`)")
    for flag, kind, default, metavar, help_text in SLURM_FLAGS:
        p.add_argument(flag, type=kind, default=default, metavar=metavar, help=help_text)
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then more `train` flags")
    p.set_defaults(handler=cmd_slurm)


def sbatch_script(args: argparse.Namespace) -> str:
    if args.nodes < 1:
        raise ConfigError("nodes", f"{args.nodes} is not a node count: use 1 or more")
    if args.gpus_per_node < 0:
        raise ConfigError("gpus_per_node", f"{args.gpus_per_node} is not a GPU count: use 0 or more")
    per_node = args.nproc_per_node or args.gpus_per_node or 1
    cpus = args.cpus_per_task or per_node
    if cpus < per_node:
        raise ConfigError("cpus_per_task", f"{cpus} cores for {per_node} processes: give at least {per_node}")
    port = args.port or f"$(({DEFAULT_PORT} + SLURM_JOB_ID % 1000))"
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in args.job_name) or "amp-console"
    beside = Path(sys.executable).with_name("amp-console")  # how the nodes run the console, else python -m core.cli
    amp_console = str(beside) if beside.is_file() else f"{sys.executable} -m core.cli"
    lines = [
        "#!/bin/bash",
        f"# {args.nodes} node(s) x {per_node} process(es): written by `amp-console slurm`",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={args.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --cpus-per-task={cpus}",
    ]
    given = {
        "gpus-per-node": args.gpus_per_node,
        "time": args.time,
        "partition": args.partition,
        "account": args.account,
    }
    lines += [f"#SBATCH --{name}={value}" for name, value in given.items() if value]
    lines += [
        "# SIGUSR1 90 s before the time limit: checkpoint, requeue; a requeued job appends to its log",
        f"#SBATCH --signal={WARNING_SIGNAL}@{WARNING_SECONDS}",
        "#SBATCH --requeue",
        "#SBATCH --open-mode=append",
        f"#SBATCH --output={name}-%j.out",
        "",
        "set -eu",
        "# the rendezvous: the first node of the job (every node reaches it)",
        'head_node=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        f'rdzv_port="${{AMP_CONSOLE_RDZV_PORT:-{port}}}"',
        f'run_dir={shlex.quote(args.runs_dir)}/{name}-"$SLURM_JOB_ID"  # the same folder after a requeue',
        "# every node runs this console: its environment, the config and the runs folder must be on storage every",
        "# node sees (or set AMP_CONSOLE when submitting)",
        f'amp_console="${{AMP_CONSOLE:-{amp_console}}}"',
        "# one task per node; each starts torchrun for its processes (--node-rank: $SLURM_NODEID)",
    ]
    extra = [a for a in args.train_args if a != "--"]
    train = [
        f"srun --kill-on-bad-exit=1 --cpus-per-task={cpus} $amp_console train --config {shlex.quote(args.config)}",
        '--out "$run_dir"',
        '--nnodes "$SLURM_JOB_NUM_NODES"',
        f"--nproc-per-node {per_node}",
        '--rdzv-endpoint "$head_node:$rdzv_port"',
        '--rdzv-id "$SLURM_JOB_ID"',
    ]
    if args.max_restarts:
        train.append(f"--max-restarts {args.max_restarts}")
    if extra:
        train.append(" ".join(map(shlex.quote, extra)))
    lines.append(" \\\n    ".join(train))
    return "\n".join(lines) + "\n"


def cmd_slurm(args: argparse.Namespace) -> int:
    text = sbatch_script(args)
    if args.script is None:
        sys.stdout.write(text)
        return 0
    from core.files import atomic_write_bytes

    atomic_write_bytes(Path(args.script), text.encode("utf-8"))
    sys.stderr.write(f"amp-console: wrote {args.script}; submit it with: sbatch {shlex.quote(args.script)}\n")
    return 0


# ----------------------------------------------------------------- inside a job
def job_signals() -> tuple[int, ...]:
    """The signals that stop a run besides the usual ones: SLURM's warning signal inside a job."""
    return (signal.SIGUSR1,) if os.environ.get("SLURM_JOB_ID") and hasattr(signal, "SIGUSR1") else ()


def requeue_if_warned(signum: int | None, code: int) -> int:
    """After a run the warning signal stopped (exit 128 + signum), the job's first task requeues it; returns `code`."""
    job = os.environ.get("SLURM_JOB_ID", "")
    if (
        not job
        or signum is None
        or signum != getattr(signal, "SIGUSR1", None)
        or code != 128 + signum
        or os.environ.get("WORLD_SIZE")
        or os.environ.get("SLURM_PROCID", "0") not in ("", "0")
    ):
        return code
    failed: str | None
    try:
        done = subprocess.run(["scontrol", "requeue", job], check=False, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        failed = str(exc)
    else:
        said = (done.stderr or done.stdout).strip().splitlines()
        failed = (said[0] if said else str(done.returncode)) if done.returncode else None
    if failed is not None:
        sys.stderr.write(
            f"amp-console: could not requeue SLURM job {job} (scontrol: {failed}); resubmit the script: the run "
            "resumes from its checkpoint\n"
        )
    else:
        sys.stderr.write(
            f"amp-console: SLURM job {job} requeued: it resumes from its checkpoint when it starts again\n"
        )
    return code
