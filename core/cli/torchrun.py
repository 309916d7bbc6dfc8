"""`amp-console train --nproc N` (or the multi-node flags of core.cli.nodes): the same config on many processes under
torchrun. Global rank 0 reports and writes the run folder; each rank's stderr goes to `<run>/ranks/rank-<R>.log`.

torchrun runs in its own session; a stop signal to this launcher (or, with `--end-with-parent`, the end of its
stdin) becomes a stop request in the run folder (core.engine.folder_control), which rank 0 applies, and the launcher
waits for the checkpoint before it exits (128 + the signal). Should the launcher die first, rank 0 stops as well.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from core.cli.common import stop_at_end_of_input
from core.cli.nodes import AUTO_RESUME_ENV, NodePlan, network_env, strip_node_flags
from core.engine.threads import usable_cpu_cores
from core.errors import ConfigError
from core.files import read_jsonl

if TYPE_CHECKING:
    from core.cli.common import StopSignals
    from core.config import RunConfig

LOCALHOST = "127.0.0.1"


def free_local_port() -> int:
    """A TCP port free on 127.0.0.1 right now (for the rendezvous store)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCALHOST, 0))
        return s.getsockname()[1]


def torchrun_command(plan: NodePlan, train_argv: list[str], port: int | None = None) -> list[str]:
    """The torchrun command line of `plan` for `train_argv`, through core.cli.loopback_torchrun: on one machine every
    store it hosts listens on 127.0.0.1 only (`port`: the rendezvous's, default a free one); over several, c10d's
    rendezvous at the endpoint, this node listening on its address."""
    if plan.multi_node:
        where = [
            f"--rdzv-endpoint={plan.endpoint}",
            f"--rdzv-id={plan.rdzv_id}",
            # read_timeout: the store's, so a silent listener at the endpoint fails in time too
            f"--rdzv-conf=join_timeout={plan.rdzv_timeout:g},read_timeout={max(1, min(60, int(plan.rdzv_timeout)))}",
            f"--local-addr={plan.local_addr}",  # (no --node-rank: c10d's rendezvous ignores it, with a warning)
        ]
    else:
        where = [
            f"--rdzv-endpoint={LOCALHOST}:{port or free_local_port()}",
            f"--rdzv-id=amp-{uuid.uuid4().hex[:12]}",
            f"--local-addr={LOCALHOST}",
            f"--master-addr={LOCALHOST}",
        ]
    return [
        sys.executable,
        "-m",
        "core.cli.loopback_torchrun",
        f"--nnodes={plan.nnodes}",
        f"--nproc-per-node={plan.nproc_per_node}",
        "--rdzv-backend=c10d",
        *where,
        f"--max-restarts={plan.max_restarts}",
        "-m",
        "core.cli.elastic",  # core.cli's commands, torch's deprecation warnings filtered
        *train_argv,
    ]


def check_nproc(nproc: int, config: RunConfig) -> None:
    """Refuse process counts the device can't serve: one GPU per process on CUDA, one core per process on the CPU."""
    if nproc < 1:
        raise ConfigError("nproc", f"{nproc} is not a process count: use 1 or more")
    gpus = 0
    if config.device.startswith("cuda") or config.device == "auto":  # only then import torch to count them
        from core.devices import list_devices

        gpus = sum(1 for d in list_devices() if d.type == "cuda")
    wants_gpu = config.device.startswith("cuda") or (config.device == "auto" and gpus > 0)
    if wants_gpu and nproc > gpus:
        raise ConfigError(
            "nproc",
            f"{nproc} processes need {nproc} CUDA GPUs, this machine has {gpus}; use --nproc {gpus} or --device cpu",
        )
    cores = usable_cpu_cores()
    if not wants_gpu and nproc > cores:
        raise ConfigError(
            "nproc",
            f"{nproc} CPU processes need at least {nproc} cores, this process may use "
            f"{cores}; use --nproc {cores} or fewer",
        )


class FolderStop:
    """The launcher's stop: one stop request in the run folder."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.sent = False

    def stop(self) -> None:
        from core.engine.folder_control import ControlError, write_request

        if not self.sent:
            self.sent = True
            with contextlib.suppress(ControlError):  # no folder here (another node's rank 0 writes it)
                write_request(self.folder, "stop")


def launch_torchrun(
    plan: NodePlan,
    argv: list[str],
    config: RunConfig,
    resume_from: str | None = None,
    signals: StopSignals | None = None,
    end_with_parent: bool = False,
) -> int:
    """Run torchrun in the foreground; the run's exit code (0 completed, 1 failed, 128 + signal number when a signal
    stopped it, 130 when the end of stdin did: `end_with_parent`). A multi-node run's folder is claimed by global
    rank 0, not here."""
    from core.cli.elastic import RANK0_CLAIMS_ENV, RANK_LOGS_DIR, RANK_LOGS_ENV
    from core.cli.loopback_torchrun import DID_NOT_MEET, FAILURE_FILE_ENV, RDZV_HINT_ENV
    from core.engine.run_folder import HELD_ENV, METRICS_FILE, RUN_NOTE_ENV, claim_run_folder, holds_a_run
    from core.files import new_temp_file

    check_nproc(plan.nproc_per_node, config)
    train_argv = strip_node_flags(argv)
    env = dict(os.environ)
    threads = config.threads or max(1, usable_cpu_cores() // plan.nproc_per_node)  # else an even share of the cores
    env.setdefault("OMP_NUM_THREADS", str(threads))
    env[AUTO_RESUME_ENV] = "1"  # a worker torchrun restarts resumes from the run folder's checkpoint
    env.update(network_env(plan))
    if plan.multi_node:
        sys.stderr.write(f"amp-console: {plan.describe()}\n")
        env[RDZV_HINT_ENV] = (
            f"{plan.nnodes} nodes were expected at {plan.endpoint} within {plan.rdzv_timeout:g} s "
            f"(--rdzv-timeout): start the same command on every node, with the same "
            f"--rdzv-endpoint and --rdzv-id {plan.rdzv_id}"
        )
        out = Path(config.out_dir)
        if holds_a_run(out) and not (resume_from and Path(resume_from).parent.resolve() == out.resolve()):
            raise ConfigError(
                "out_dir",
                f"{out} holds an earlier run: a multi-node run needs a new folder (every "
                f"node is given the same one), or --resume {out / 'checkpoint.pt'}",
            )
        # global rank 0 claims it once the nodes have met
        folder: contextlib.AbstractContextManager = contextlib.nullcontext(SimpleNamespace(path=out, note=None))
        env[RANK0_CLAIMS_ENV] = str(out)
    else:
        folder = claim_run_folder(config.out_dir, resume_from)  # held here for the whole run
    failure_fd, failure_name = new_temp_file(tempfile.gettempdir(), prefix="amp-console-failure-")
    os.close(failure_fd)
    failure_file = Path(failure_name)
    env[FAILURE_FILE_ENV] = str(failure_file)
    try:  # the failure file goes whatever happens (only a SIGKILL leaves it in the temporary folder)
        with folder as held:
            out_dir = held.path
            env[HELD_ENV] = str(out_dir)
            env[RANK_LOGS_ENV] = str(out_dir / RANK_LOGS_DIR)
            if held.note:  # decided here, so rank 0 writes where this launcher reads
                sys.stderr.write(f"amp-console: {held.note}\n")
                env[RUN_NOTE_ENV] = held.note  # rank 0 reports it with RunStarted, e.g. to the window's log
            train_argv += ["--out-dir", str(out_dir)]
            events = out_dir / METRICS_FILE
            offset = events.stat().st_size if events.exists() else 0
            command = torchrun_command(plan, train_argv)
            process = subprocess.Popen(command, start_new_session=True, env=env, stdin=subprocess.DEVNULL)
            control = FolderStop(out_dir)
            if signals is not None:
                signals.started(control)  # from now on a signal is a stop request in the run folder
            if end_with_parent:
                stop_at_end_of_input(sys.stdin, control)
            code = process.wait()
    finally:
        root_cause = _read_and_remove(failure_file)
    status = last_run_status(events, offset)
    if status == "stopped" or (status is None and code == 0 and signals is not None and signals.signum):
        return signals.exit_code if signals is not None else 130
    if code == 0 and (status == "completed" or (status is None and plan.multi_node)):
        return 0  # a node without rank 0 (and no shared run folder) has no events to read: torchrun's word
    if root_cause.startswith(DID_NOT_MEET):  # no process started: the rendezvous's line alone
        sys.stderr.write(f"amp-console: {root_cause}\n")
        return 1
    why = f"torchrun exit code {code}{', run status ' + status if status else ', a process died'}"
    detail = f": {root_cause}" if root_cause else "; see the messages above"
    sys.stderr.write(
        f"amp-console: the {plan.world_size}-process run failed ({why}){detail}; each rank's log: "
        f"{out_dir / RANK_LOGS_DIR}\n"
    )
    return 1


def _read_and_remove(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    with contextlib.suppress(OSError):
        path.unlink()
    return text


def last_run_status(events: Path, offset: int) -> str | None:
    """Status of the RunEnded event rank 0 appended to metrics.jsonl after `offset`, if any."""
    ended = [record.get("status") for record in read_jsonl(events, offset) if record.get("event") == "RunEnded"]
    return ended[-1] if ended else None
