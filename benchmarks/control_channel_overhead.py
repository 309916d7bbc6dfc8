"""What the run folder's control channel (core.engine.folder_control: a thread polling `<run>/control/`
POLL_SECONDS apart) costs the training loop: the same tiny run trained in this process with the channel on and
with it off, in alternating windows (ABBA, so a drift of the machine's load falls on both), the same steps, the
same thread count. Prints steps/s of each side per window and the ratio on/off with its spread.

    OMP_NUM_THREADS=1 python benchmarks/control_channel_overhead.py --steps 3000 --rounds 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def window(steps: int, channel: bool, folder: Path, batch_size: int, log_interval: int) -> tuple[float, float]:
    """(steps per wall second, steps per CPU second of this process: the channel's thread included)."""
    from core.config import RunConfig
    from core.engine import folder_control
    from core.engine.control import RunControl
    from core.engine.trainer import train

    real_start = folder_control.FolderControl.start
    if not channel:
        folder_control.FolderControl.start = lambda self: self  # constructed, never polling
    try:
        config = RunConfig.for_task(
            "tiny",
            device="cpu",
            precision="fp32",
            threads=1,
            batch_size=batch_size,
            log_interval=log_interval,
            max_steps=steps,
            min_steps=0,
            eval_interval=10**9,
            checkpoint_interval=10**9,
            keep_best=0,
            out_dir=str(folder),
        )
        started, cpu = time.perf_counter(), time.process_time()
        ended = train(config, sink=lambda event: None, control=RunControl())
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    finally:
        folder_control.FolderControl.start = real_start
    assert ended.status == "completed", ended.message
    return steps / elapsed, steps / cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000, help="optimizer steps per window")
    parser.add_argument("--rounds", type=int, default=4, help="ABBA rounds (each: on, off, off, on)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--log-interval", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    rates: dict[bool, list[float]] = {True: [], False: []}
    cpu_rates: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="amp-channel-") as tmp:
        window(200, True, Path(tmp) / "warm", args.batch_size, args.log_interval)  # imports, allocator, caches
        n = 0
        for _ in range(args.rounds):
            for channel in (True, False, False, True):
                n += 1
                rate, cpu_rate = window(args.steps, channel, Path(tmp) / f"w{n}", args.batch_size, args.log_interval)
                rates[channel].append(rate)
                cpu_rates[channel].append(cpu_rate)
                print(
                    f"window {n:2d}  channel {'on ' if channel else 'off'}  {rate:9.1f} steps/s  "
                    f"{cpu_rate:9.1f} steps per CPU second",
                    flush=True,
                )
    pairs = [on / off for on, off in zip(rates[True], rates[False])]
    cpu_pairs = [on / off for on, off in zip(cpu_rates[True], cpu_rates[False])]
    result = {
        "steps": args.steps,
        "rounds": args.rounds,
        "batch_size": args.batch_size,
        "log_interval": args.log_interval,
        "on": statistics.median(rates[True]),
        "off": statistics.median(rates[False]),
        "ratio": statistics.median(pairs),
        "ratio_low": min(pairs),
        "ratio_high": max(pairs),
        "spread_off": (max(rates[False]) - min(rates[False])) / statistics.median(rates[False]),
        "cpu_ratio": statistics.median(cpu_pairs),
        "cpu_ratio_low": min(cpu_pairs),
        "cpu_ratio_high": max(cpu_pairs),
        "cpu_spread_off": (max(cpu_rates[False]) - min(cpu_rates[False])) / statistics.median(cpu_rates[False]),
    }
    print(
        f"on/off steps/s: median ratio {result['ratio']:.3f} (pairs {result['ratio_low']:.3f}-"
        f"{result['ratio_high']:.3f}); the channel-off windows alone vary by {result['spread_off']:.1%}"
    )
    print(
        f"per CPU second (less sensitive to other processes): median ratio {result['cpu_ratio']:.3f} (pairs "
        f"{result['cpu_ratio_low']:.3f}-{result['cpu_ratio_high']:.3f}); channel-off windows vary by "
        f"{result['cpu_spread_off']:.1%}"
    )
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
