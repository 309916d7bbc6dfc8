"""How many CPU threads torch uses inside an op when a run leaves `threads` at 0 (auto).

Auto weighs the step's work (parameters x the values in one batch): one thread below LIGHT_STEP_WORK or when
the machine has no free core, else the free cores (this process's share of them under DDP). The choice and its
reason are reported with RunStarted; a `threads` above 0 is used as given.
"""

from __future__ import annotations

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
    """The intra-op thread count for a run (pure: every fact is an argument, see machine_facts).

    requested: the config's `threads` (0 = auto); parameters: the model's trainable parameter count; cores: the
    CPUs this process may run on; load: the 1-minute load average (None if unknown); processes: ranks sharing
    this machine; env_threads: OMP_NUM_THREADS if set (the user's or the launcher's choice, kept); batch_values:
    the values one micro-batch feeds the model (samples x values per sample)."""
    if requested > 0:
        return ThreadChoice(requested, "")
    cores = max(1, cores)
    share = max(1, cores // max(1, processes))
    of = f"of {cores} core{'s' if cores != 1 else ''}" + (f", {processes} processes" if processes > 1 else "")
    hint = "set --threads to choose"
    if env_threads and env_threads.strip().isdigit() and int(env_threads) > 0:
        threads = min(int(env_threads), cores)
        return ThreadChoice(threads, f"threads: {threads} {of} (auto: OMP_NUM_THREADS={env_threads.strip()}; {hint})")
    work = parameters * max(1, batch_values)
    if work < LIGHT_STEP_WORK:
        return ThreadChoice(
            1, f"threads: 1 {of} (auto: light steps, {parameters:,} parameters x {batch_values:,} batch values; {hint})"
        )
    busy = 0 if load is None else int(load + 0.5)  # cores other work keeps busy (rounded)
    free = max(1, min(share, cores - busy))
    if free < share:
        return ThreadChoice(free, f"threads: {free} {of} (auto: the machine is busy, load {load:.1f}; {hint})")
    return ThreadChoice(
        share, f"threads: {share} {of} (auto: {parameters:,} parameters x {batch_values:,} batch values; {hint})"
    )


def machine_facts() -> tuple[int, float | None]:
    """(CPUs this process may run on, 1-minute load average or None)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
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
    """torch.set_num_threads, and the inter-op pool to match once per process (torch allows setting it only
    once, before any inter-op work; afterwards it is left as it is)."""
    import torch

    global _interop_set
    torch.set_num_threads(threads)
    if not _interop_set:
        _interop_set = True
        try:
            torch.set_num_interop_threads(max(1, min(threads, 4)))
        except RuntimeError:  # already set, or inter-op work has started: keep torch's
            pass
