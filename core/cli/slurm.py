"""`amp-console slurm`: an sbatch script for a config, and what `train` does inside a SLURM job. Torch-free.

The script starts one `amp-console train` per node with `srun`, meeting at the job's first node, and asks for SIGUSR1
before the time limit plus a requeue. Inside a job SIGUSR1 checkpoints and stops the run; the job's first task then
runs `scontrol requeue`, and the requeued job resumes from the run folder's checkpoint.
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
    p.add_argument("--nodes", type=int, default=1, metavar="N", help="machines (default 1)")
    p.add_argument(
        "--gpus-per-node",
        type=int,
        default=0,
        metavar="G",
        help="GPUs on each machine, one process each (default 0: CPU, see --nproc-per-node)",
    )
    p.add_argument(
        "--nproc-per-node",
        type=int,
        default=None,
        metavar="K",
        help="processes on each machine (default: --gpus-per-node, else 1)",
    )
    p.add_argument("--time", default="04:00:00", metavar="HH:MM:SS", help="the job's time limit (default 04:00:00)")
    p.add_argument("--partition", default=None, metavar="NAME", help="the partition (queue) to run in")
    p.add_argument("--account", default=None, metavar="NAME", help="the account to charge")
    p.add_argument("--job-name", default="amp-console", metavar="NAME", help="the job's name (default amp-console)")
    p.add_argument(
        "--runs-dir",
        default="runs",
        metavar="DIR",
        help="a folder every node sees (shared): the run goes in DIR/<job name>-<job id> (default runs)",
    )
    p.add_argument(
        "--cpus-per-task",
        type=int,
        default=None,
        metavar="C",
        help="CPU cores on each machine for its processes and their data loading (default: one per process)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=None,
        metavar="PORT",
        help=f"the rendezvous port on the job's first node (default {DEFAULT_PORT} + the job id mod 1000, so jobs "
        "sharing a node differ; $AMP_CONSOLE_RDZV_PORT at submission overrides it)",
    )
    p.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        metavar="R",
        help="restart a failed process up to R times within the job (torchrun), resuming",
    )
    p.add_argument("--script", default=None, metavar="FILE.sbatch", help="write the script here (default: stdout)")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then more `train` flags")
    p.set_defaults(handler=cmd_slurm)


def _amp_console() -> str:
    """How the nodes run the console: the amp-console beside this Python, else this Python with -m core.cli."""
    beside = Path(sys.executable).with_name("amp-console")
    return str(beside) if beside.is_file() else f"{sys.executable} -m core.cli"


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
    lines = [
        "#!/bin/bash",
        f"# {args.nodes} node(s) x {per_node} process(es): written by `amp-console slurm`",
        f"#SBATCH --job-name={name}",
        f"#SBATCH --nodes={args.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --cpus-per-task={cpus}",
    ]
    if args.gpus_per_node:
        lines.append(f"#SBATCH --gpus-per-node={args.gpus_per_node}")
    lines.append(f"#SBATCH --time={args.time}")
    lines += [f"#SBATCH --partition={args.partition}"] if args.partition else []
    lines += [f"#SBATCH --account={args.account}"] if args.account else []
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
        f'amp_console="${{AMP_CONSOLE:-{_amp_console()}}}"',
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
    """After a run the warning signal stopped (exit 128 + signum), the job's first task requeues the job; returns `code`
    as it is."""
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
    try:
        done = subprocess.run(["scontrol", "requeue", job], check=False, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        sys.stderr.write(
            f"amp-console: could not requeue SLURM job {job} (scontrol: {exc}); resubmit the "
            f"script: the run resumes from its checkpoint\n"
        )
        return code
    if done.returncode != 0:
        why = (done.stderr or done.stdout).strip().splitlines()
        sys.stderr.write(
            f"amp-console: scontrol requeue {job} failed ({why[0] if why else done.returncode}); "
            f"resubmit the script: the run resumes from its checkpoint\n"
        )
        return code
    sys.stderr.write(f"amp-console: SLURM job {job} requeued: it resumes from its checkpoint when it starts again\n")
    return code
