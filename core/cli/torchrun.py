"""`amp-console train --nproc N`: the same config on N local processes under PyTorch's own launcher (torchrun).

Each process runs `python -m core.cli train ...` with torchrun's RANK/WORLD_SIZE/LOCAL_RANK; the trainer
wraps the model in DDP, rank 0 reports and writes checkpoints. torchrun ends every process when one dies.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from core.engine.checkpoints import METRICS_FILE, run_dir_for
from core.config import RunConfig
from core.devices import list_devices
from core.engine.distributed import RUN_NOTE_ENV
from core.errors import ConfigError


def strip_nproc(argv: list[str]) -> list[str]:
    """The train arguments without --nproc N / --nproc=N (the children must not launch again)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            out.append(arg)
    return out


def torchrun_command(nproc: int, train_argv: list[str]) -> list[str]:
    """The torchrun command line for a single-node standalone run of `train_argv`."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            "--max-restarts=0", "-m", "core.cli", *train_argv]


def check_nproc(nproc: int, config: RunConfig) -> None:
    """Refuse process counts the chosen device can't serve (one GPU per process on CUDA)."""
    if nproc < 1:
        raise ConfigError("nproc", f"{nproc} is not a process count: use 1 or more")
    gpus = sum(1 for d in list_devices() if d.type == "cuda")
    wants_gpu = config.device.startswith("cuda") or (config.device == "auto" and gpus > 0)
    if wants_gpu and nproc > gpus:
        raise ConfigError("nproc", f"{nproc} processes need {nproc} CUDA GPUs, this machine has {gpus}; "
                                   f"use --nproc {gpus} or --device cpu")


def launch_torchrun(nproc: int, argv: list[str], config: RunConfig, resume_from: str | None = None) -> int:
    """Run torchrun in the foreground and return the run's exit code (0 completed, 1 failed, 130 stopped)."""
    check_nproc(nproc, config)
    train_argv = strip_nproc(argv)
    out_dir = run_dir_for(config.out_dir, resume_from)
    env = dict(os.environ)
    if out_dir != Path(config.out_dir):  # decided here, so rank 0 writes where this launcher reads
        note = f"{config.out_dir} holds an earlier run, which is kept: this run writes to {out_dir}"
        sys.stderr.write(f"amp-console: {note}\n")
        env[RUN_NOTE_ENV] = note  # rank 0 reports it with RunStarted, e.g. to the window's log
        train_argv += ["--out-dir", str(out_dir)]
    events = out_dir / METRICS_FILE
    offset = events.stat().st_size if events.exists() else 0
    # torchrun gets its own session, so a terminal's Ctrl+C reaches only us and we forward it exactly once:
    # torchrun then signals every worker, which stops at the ranks' next stop agreement (about
    # twice a second) and rank 0 writes a checkpoint.
    process = subprocess.Popen(torchrun_command(nproc, train_argv), start_new_session=True, env=env)
    forwarded = []

    def forward(signum, frame):
        if not forwarded and process.poll() is None:
            forwarded.append(signum)
            process.send_signal(signal.SIGINT)

    previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        code = process.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    status = last_run_status(events, offset)
    if status == "stopped":
        return 130
    if code != 0 or status != "completed":
        sys.stderr.write(f"amp-console: the {nproc}-process run failed (torchrun exit code {code}"
                         f"{', run status ' + status if status else ', a process died'}); see the messages above\n")
        return 1
    return 0


def last_run_status(events: Path, offset: int) -> str | None:
    """Status of the RunEnded event rank 0 appended to metrics.jsonl after `offset`, if any."""
    if not events.exists():
        return None
    with open(events, encoding="utf-8") as f:
        f.seek(offset)
        status = None
        for line in f:
            if '"RunEnded"' in line:
                status = json.loads(line).get("status")
    return status
