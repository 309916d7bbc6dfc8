"""What checking a checkpoint costs: `load_checkpoint` (CRC of every zip member, structure, finite weights)
against a bare `torch.load(weights_only=True)` of the same ~100 MB file, measured side by side, interleaved.

    python benchmarks/checkpoint_load.py            # 100 MB of fp32 weights; --mb N for another size

Prints best and median milliseconds of each part and the ratio of the medians.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import tempfile
import time
from pathlib import Path

import torch

from core.config import RunConfig
from core.engine import checkpoints as ckpt


def big_checkpoint(path: Path, megabytes: int) -> Path:
    tensors = max(1, megabytes // 4)  # 1024 x 1024 fp32 = 4 MiB each
    model = {f"layer{i}.weight": torch.randn(1024, 1024) for i in range(tensors)}
    state = {
        "format_version": ckpt.FORMAT_VERSION,
        "task": "tiny",
        "model": model,
        "optimizer": {"state": {}, "param_groups": [{"params": list(range(tensors)), "lr": 0.1}]},
        "scheduler": None,
        "scaler": {},
        "step": 1,
        "epoch": 0,
        "rng": ckpt.capture_rng(),
        "config": RunConfig.for_task("tiny").to_dict(),
        "metrics": {},
        "versions": ckpt.library_versions(),
    }
    return ckpt.save_checkpoint(path, state)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = big_checkpoint(Path(folder) / "checkpoint.pt", args.mb)
        print(f"{path.stat().st_size / 2**20:.0f} MiB, torch {torch.__version__}, {torch.get_num_threads()} threads")
        loaded = ckpt.load_checkpoint(path)  # warm the page cache and the imports
        times: dict[str, list[float]] = {"torch.load": [], "CRC check": [], "finite check": [], "load_checkpoint": []}
        for _ in range(args.repeat):
            del loaded
            gc.collect()
            start = time.perf_counter()
            loaded = torch.load(path, map_location="cpu", weights_only=True)
            times["torch.load"].append(time.perf_counter() - start)
            start = time.perf_counter()
            ckpt.check_integrity(path)
            times["CRC check"].append(time.perf_counter() - start)
            start = time.perf_counter()
            ckpt.check_finite(loaded, str(path))
            times["finite check"].append(time.perf_counter() - start)
            del loaded
            gc.collect()
            start = time.perf_counter()
            ckpt.load_checkpoint(path)
            times["load_checkpoint"].append(time.perf_counter() - start)
        for name, values in times.items():
            print(f"{name:16s} best {min(values) * 1000:6.0f} ms   median {statistics.median(values) * 1000:6.0f} ms")
        ratio = statistics.median(times["load_checkpoint"]) / statistics.median(times["torch.load"])
        print(f"load_checkpoint / torch.load (medians): {ratio:.2f}x")


if __name__ == "__main__":
    main()
