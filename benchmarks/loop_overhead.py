"""Engine vs a minimal hand-written loop on the same model, data, batch size and precision.

Both run interleaved in one process, several repeats, and the medians are compared, so machine noise hits
both alike. With the `bench` extra installed, Lightning's Trainer fed by a DataLoader runs the same job too.

    python benchmarks/loop_overhead.py --batch-size 256 [--task tiny] [--precision fp32] [--json]

--json: the last stdout line is {"ratio": ..., "batch_size": ..., "lightning_ratio": ...}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.config import RunConfig  # noqa: E402
from core.data.batching import EpochBatches  # noqa: E402
from core.devices import device_info, torch_device  # noqa: E402
from core.engine.optimizers import build_optimizer  # noqa: E402
from core.engine.precision import matmul_precision, resolve_precision  # noqa: E402
from core.tasks import create_task  # noqa: E402
from core.engine.trainer import Trainer, seed_everything  # noqa: E402


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()
    elif device.type == "xpu":
        torch.xpu.synchronize(device)


def engine_rate(cfg: RunConfig) -> float:
    """Samples/s of the engine's training phase (setup, final eval and checkpoint are not timed)."""
    return Trainer(cfg).run().samples_per_second


def minimal_rate(cfg: RunConfig, steps: int) -> float:
    """The loop a careful user writes by hand: slice, autocast forward+loss, backward, step, zero_grad."""
    info = device_info(cfg.device)
    device = torch_device(info)
    plan = resolve_precision(cfg.precision, info)
    task = create_task(cfg.task, cfg.task_options)
    seed_everything(cfg.seed)
    data = task.load_data(cfg.data, cfg.seed)
    train = {k: v.to(device) for k, v in data.train.items()}
    model = task.build_model(data.info).to(device).train()
    optimizer = build_optimizer(model, cfg, device)
    scaler = torch.amp.GradScaler(device.type, enabled=plan.use_scaler)
    batches = EpochBatches(train, cfg.batch_size, cfg.seed, device)
    dtype = plan.autocast_dtype
    with matmul_precision(plan):
        sync(device)
        start = time.perf_counter()
        done, epoch = 0, 0
        while done < steps:
            order = batches.order(epoch)
            for i in range(min(batches.batches_per_epoch, steps - done)):
                batch = {k: v[order[i]] for k, v in train.items()}
                with torch.autocast(device.type, dtype=dtype or torch.float32, enabled=dtype is not None):
                    loss = task.loss(model, batch)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad(set_to_none=True)
                done += 1
            epoch += 1
        loss.item()  # one sync at the end, so all queued device work is timed
        seconds = time.perf_counter() - start
    return steps * cfg.batch_size / seconds


def lightning_rate(cfg: RunConfig, steps: int) -> float | None:
    """Lightning's Trainer on the same model, fed by a DataLoader over a TensorDataset (its usual set-up)."""
    try:
        import lightning as L
    except ImportError:
        return None
    from torch.utils.data import DataLoader, TensorDataset

    task = create_task(cfg.task, cfg.task_options)
    seed_everything(cfg.seed)
    data = task.load_data(cfg.data, cfg.seed)
    keys = list(data.train)

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = task.build_model(data.info)

        def training_step(self, batch, _):
            return task.loss(self.model, dict(zip(keys, batch, strict=True)))

        def configure_optimizers(self):
            return build_optimizer(self.model, cfg, torch.device("cpu"))

    loader = DataLoader(TensorDataset(*data.train.values()), batch_size=cfg.batch_size, shuffle=True, drop_last=True)
    precision = {"bf16": "bf16-mixed", "fp16": "16-mixed"}.get(cfg.precision, "32-true")
    trainer = L.Trainer(max_steps=steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="auto", devices=1, precision=precision)
    start = time.perf_counter()
    trainer.fit(Module(), loader)
    return steps * cfg.batch_size / (time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="tiny")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--steps", type=int, default=0, help="steps per measurement (default: by batch size)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--option", "-o", action="append", default=[], help="task option KEY=VALUE")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from core.cli.train import parse_option

    steps = args.steps or (3000 if args.batch_size <= 16 else 600)
    # Each run writes beside the last (run-2, run-3, ...: runs never overwrite), all inside one temp folder.
    out = str(Path(tempfile.mkdtemp(prefix="amp-bench-")) / "run")
    cfg = RunConfig.for_task(
        args.task, batch_size=args.batch_size, precision=args.precision, device=args.device, max_steps=steps,
        log_interval=max(10, steps // 10), eval_interval=10**9, out_dir=out,
        task_options=dict(map(parse_option, args.option)),
    )
    engine_rate(cfg.replace(max_steps=min(steps, 50)))  # warm-up: allocator, kernels, caches
    minimal_rate(cfg, min(steps, 50))
    engine, minimal, lightning = [], [], []
    for repeat in range(args.repeats):
        order = [("engine", engine), ("minimal", minimal)]
        for name, bucket in order if repeat % 2 == 0 else order[::-1]:  # alternate who goes first
            bucket.append(engine_rate(cfg) if name == "engine" else minimal_rate(cfg, steps))
    if args.repeats and (rate := lightning_rate(cfg, steps)) is not None:
        lightning.append(rate)
    e, m = statistics.median(engine), statistics.median(minimal)
    ratio = e / m
    lightning_ratio = statistics.median(lightning) / m if lightning else None
    print(f"task {args.task}  batch {args.batch_size}  precision {args.precision}  steps {steps}  repeats {args.repeats}")
    print(f"  minimal loop   {m:>14,.0f} samples/s  (median; runs: {', '.join(f'{x:,.0f}' for x in minimal)})")
    print(f"  engine         {e:>14,.0f} samples/s  (median; runs: {', '.join(f'{x:,.0f}' for x in engine)})")
    print(f"  ratio engine/minimal = {ratio:.3f}")
    if lightning_ratio is not None:
        print(f"  ratio lightning/minimal = {lightning_ratio:.3f}")
    else:
        print("  lightning: not installed (pip install -e '.[bench]')")
    if args.json:
        print(json.dumps({"ratio": ratio, "batch_size": args.batch_size, "lightning_ratio": lightning_ratio,
                          "task": args.task, "precision": args.precision}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
