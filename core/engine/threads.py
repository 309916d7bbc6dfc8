"""How many CPU threads torch uses inside an op when a run leaves `threads` at 0 (auto).

Auto weighs the step's work (parameters x the values in one batch): one thread below LIGHT_STEP_WORK or when
the machine has no free core, else the free cores (this process's share of them under DDP). The choice and its
reason are reported with RunStarted; a `threads` above 0 is used as given.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

LIGHT_STEP_WORK = 50_000_000  # parameters x batch values below this: one thread, intra-op splitting doesn't pay


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    note: str  # reported with RunStarted; empty when the run set `threads` itself


def choose_threads(
    requested: int,
    parameters: int,
    cores: int,
    load: float | None = None,
    processes: int = 1,
    env_threads: str | None = None,
    batch_values: int = 1,
) -> ThreadChoice:
    """The intra-op thread count for a run (pure: every fact is an argument, see machine_facts). `cores`: the CPUs
    this process may run on; `load`: the 1-minute load average; `processes`: ranks sharing this machine;
    `env_threads`: OMP_NUM_THREADS if set (kept); `batch_values`: samples x values per sample of a micro-batch."""
    if requested > 0:
        return ThreadChoice(requested, "")
    cores = max(1, cores)
    share = max(1, cores // max(1, processes))
    of = f"of {cores} core{'s' if cores != 1 else ''}" + (f", {processes} processes" if processes > 1 else "")
    sized = f"{parameters:,} parameters x {batch_values:,} batch values"
    busy = 0 if load is None else int(load + 0.5)  # cores other work keeps busy (rounded)
    if env_threads and env_threads.strip().isdigit() and int(env_threads) > 0:
        threads, why = min(int(env_threads), cores), f"OMP_NUM_THREADS={env_threads.strip()}"
    elif parameters * max(1, batch_values) < LIGHT_STEP_WORK:
        threads, why = 1, f"light steps, {sized}"
    elif (free := max(1, min(share, cores - busy))) < share:
        threads, why = free, f"the machine is busy, load {load:.1f}"
    else:
        threads, why = share, sized
    return ThreadChoice(threads, f"threads: {threads} {of} (auto: {why}; set --threads to choose)")


def usable_cpu_cores() -> int:
    """The cores this process may run on (its affinity mask, e.g. a container's or a batch job's share)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def machine_facts() -> tuple[int, float | None]:
    """(CPUs this process may run on, 1-minute load average or None)."""
    cores = usable_cpu_cores()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        load = None
    running = _running_now()
    if load is not None and running is not None:
        # The 1-minute average lags: right after an earlier run (or this process's own start-up) it still reads
        # ~1 on an idle machine. Other work that is really there is runnable now as well, so take the smaller.
        load = min(load, float(running))
    return cores, load


def _running_now() -> int | None:
    """Runnable tasks on the machine right now, this one not counted (Linux's /proc/loadavg), or None."""
    try:
        with open("/proc/loadavg") as f:
            return max(0, int(f.read().split()[3].split("/")[0]) - 1)
    except (OSError, ValueError, IndexError):
        return None


_interop_set = False


def apply_threads(threads: int) -> None:
    """torch.set_num_threads, and the inter-op pool to match once per process (torch allows setting that once)."""
    import torch

    global _interop_set
    torch.set_num_threads(threads)
    if not _interop_set:
        _interop_set = True
        with contextlib.suppress(RuntimeError):  # already set, or inter-op work has started: keep torch's
            torch.set_num_interop_threads(max(1, min(threads, 4)))
