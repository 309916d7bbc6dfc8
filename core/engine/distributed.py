"""Multi-process runs under torchrun: the process group, rank facts and the few collectives the trainer needs
(PyTorch's own launcher and DistributedDataParallel; nothing here re-implements communication)."""

from __future__ import annotations

import contextlib
import datetime
import inspect
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

STOP_AGREE_SECONDS = 0.5  # DDP ranks agree on a stop request about this often (see StopAgreement)
TEST_EXIT_ENV = "AMP_CONSOLE_TEST_EXIT"  # tests: "RANK:STEP" makes that rank exit at that step, first attempt only


def test_exit_step(rank: int) -> int | None:
    """The step at which this rank exits at once to test restarts (TEST_EXIT_ENV), before any restart only."""
    wanted = os.environ.get(TEST_EXIT_ENV, "")
    if not wanted or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") not in ("", "0"):
        return None
    which, _, step = wanted.partition(":")
    return int(step) if which.strip() == str(rank) and step.strip().isdigit() else None


@dataclass(frozen=True)
class DistContext:
    """Where this process stands in a run: rank 0 of 1 for a plain single-process run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls) -> DistContext:
        """Read torchrun's RANK / WORLD_SIZE / LOCAL_RANK; a single process when they are absent."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return cls()
        return cls(int(os.environ["RANK"]), world, int(os.environ.get("LOCAL_RANK", "0")))


def init_process_group(ctx: DistContext, device: torch.device) -> None:
    """NCCL for CUDA ranks, gloo otherwise, with torch's timeouts for the backend."""
    if ctx.enabled and not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo", **_attempt_store(ctx))


def _attempt_store(ctx: DistContext) -> dict:
    """Under torchrun's shared agent store, a store of this attempt's own keys: torchrun keeps one store for every
    restart, and without a prefix a restarted rank would connect to the previous attempt's peers."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True":
        return {}
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    client = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        ctx.world_size,
        is_master=False,
        timeout=datetime.timedelta(minutes=30),
    )
    return {
        "store": dist.PrefixStore(f"/amp-console/attempt_{attempt}", client),
        "rank": ctx.rank,
        "world_size": ctx.world_size,
    }


def destroy_process_group(agree: bool = False, timeout_seconds: float = 30.0) -> None:
    """Leave the process group. `agree` (a run that ended normally on every rank): wait for the other ranks first,
    so none tears down its connections while a peer still has collectives in flight (gloo then aborts the peer
    at exit). Not after a failure: a dead peer would hold the survivors for the whole timeout."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    if agree:
        with contextlib.suppress(Exception):
            if dist.get_backend() == "gloo":
                dist.monitored_barrier(timeout=datetime.timedelta(seconds=timeout_seconds))
            else:
                dist.barrier()
    dist.destroy_process_group()


def all_reduce_mean(values: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """Average a tensor over ranks (used for reported metrics only: DDP averages gradients itself)."""
    if ctx.enabled:
        values = values.clone()
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
        values /= ctx.world_size
    return values


def broadcast_ints(values: list[int], ctx: DistContext, device: torch.device) -> list[int]:
    """Rank 0's `values` on every rank: one small collective and one host read."""
    if not ctx.enabled:
        return list(values)
    tensor = torch.tensor(values, dtype=torch.int64, device=device)
    dist.broadcast(tensor, src=0)
    return [int(v) for v in tensor.tolist()]


class StopAgreement:
    """Whether the run stops before this step. Under DDP every rank must stop (and save) at the same step, so rank
    0 broadcasts its stop flag, its clocks (`save_due`, `time_up`) and the steps until the next agreement, so
    agreements come about every STOP_AGREE_SECONDS. After each call `save` says whether the ranks agreed to
    write a checkpoint before this step, `out_of_time` whether the time limit is reached."""

    def __init__(
        self, control, ctx: DistContext, device: torch.device, log_interval: int, first_step: int, save_due, time_up
    ):
        self.control = control  # the run's RunControl
        self.dist = ctx
        self.device = device
        self.log_interval = log_interval
        self.save_due = save_due  # rank 0's checkpoint clock (the others' is not read)
        self.time_up = time_up  # rank 0's time-limit clock, carried the same way
        self.save = False
        self.out_of_time = False  # the ranks agreed that the time limit is reached: end the run as done
        self._next = first_step  # the step of the next agreement
        self._last: tuple[float, int] | None = None  # (when, step) of the last one
        self._exit_at = test_exit_step(ctx.rank)

    def __call__(self, step: int) -> bool:
        if step == self._exit_at:
            os._exit(1)
        if not self.dist.enabled:
            self.save = self.save_due()
            self.out_of_time = self.time_up()
            return self.control.stop_requested
        self.save = False
        if step < self._next:
            return False
        now = time.perf_counter()
        every, save = 1, 0
        if self.dist.is_main:
            save = int(self.save_due()) | (2 * int(self.time_up()))
            if self._last is not None:
                at, last_step = self._last
                if step > last_step:
                    seconds_per_step = max((now - at) / (step - last_step), 1e-9)
                    every = int(min(self.log_interval, max(1.0, STOP_AGREE_SECONDS / seconds_per_step)))
        stop, every, save = broadcast_ints([int(self.control.stop_requested), every, save], self.dist, self.device)
        self._last = (now, step)
        self._next = step + max(1, every)
        self.out_of_time = bool(save & 2) and not stop
        self.save = bool(save & 1) and not stop and not self.out_of_time  # a stop (or the end) writes its own
        return bool(stop)


def all_reduce_sums(sums: dict[str, torch.Tensor], ctx: DistContext) -> dict[str, torch.Tensor]:
    """Each scalar summed over ranks (float64), in one collective; every rank passes the same names."""
    if not ctx.enabled or not sums:
        return sums
    names = sorted(sums)
    packed = torch.stack([sums[name].reshape(()).double() for name in names])
    dist.all_reduce(packed, op=dist.ReduceOp.SUM)
    return dict(zip(names, packed.unbind(), strict=True))


def all_gather_rows(values: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """Every rank's rows of `values` concatenated in rank order, on every rank."""
    return torch.cat(_gather_ragged(values, ctx)) if ctx.enabled else values


def all_gather_bytes(payload: bytes, ctx: DistContext, device: torch.device) -> list[bytes]:
    """Every rank's `payload`, in rank order (small things, like each rank's RNG states)."""
    if not ctx.enabled:
        return [payload]
    local = torch.frombuffer(bytearray(payload), dtype=torch.uint8).to(device)  # no per-byte Python list
    host = torch.device("cpu")  # bytes are read from host memory, whatever the run's device
    return [bytes(part.to(host).numpy()) for part in _gather_ragged(local, ctx)]


def _gather_ragged(values: torch.Tensor, ctx: DistContext) -> list[torch.Tensor]:
    """Each rank's `values`; ranks may hold different numbers of rows (none, too), of one dtype and row shape."""
    count = torch.tensor([values.shape[0]], dtype=torch.int64, device=values.device)
    counts = [torch.zeros_like(count) for _ in range(ctx.world_size)]
    dist.all_gather(counts, count)
    sizes = torch.cat(counts).tolist()
    if not max(sizes):
        return [values] * ctx.world_size
    padded = values.new_zeros((max(sizes), *values.shape[1:]))
    padded[: values.shape[0]] = values
    gathered = [torch.empty_like(padded) for _ in range(ctx.world_size)]
    dist.all_gather(gathered, padded)
    return [rows[:size] for rows, size in zip(gathered, sizes, strict=True)]


def gather_peers(ctx: DistContext, device: torch.device | None = None) -> list[tuple[str, int]]:
    """(host, process id) of every rank, in rank order, so that a rank that dies later can be named."""
    if not ctx.enabled:
        return []
    own = f"{socket.gethostname()}\n{os.getpid()}".encode()
    payloads = all_gather_bytes(own, ctx, device or torch.device("cpu"))
    return [(host, int(pid)) for host, pid in (payload.decode().split("\n") for payload in payloads)]


def dead_peers(peers: list[tuple[str, int]], own_rank: int, wait: float = 2.0) -> list[int]:
    """The other ranks on this host whose process has ended, looked for during up to `wait` seconds (a killed
    peer's sockets close a moment before its process is gone)."""
    here, dead, waited_from = socket.gethostname(), [], time.perf_counter()
    while peers:
        dead = [r for r, (host, pid) in enumerate(peers) if host == here and r != own_rank and not _process_alive(pid)]
        if dead or time.perf_counter() - waited_from > wait:
            break
        time.sleep(0.05)
    return dead


def wrap_ddp(model: torch.nn.Module, context: DistContext, device: torch.device) -> torch.nn.Module:
    """`model` in DistributedDataParallel when the run is distributed, else itself."""
    if not context.enabled:
        return model
    ids = [device.index] if device.type == "cuda" else None
    # Buffers are re-sent from rank 0 before every forward only when training changes them (batch-norm
    # statistics): the tasks' buffers (feature normalisation, term weights: megabytes) are fixed at setup and
    # identical on every rank, so sending them each step would only cost bandwidth.
    changing = any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules())
    ddp = torch.nn.parallel.DistributedDataParallel
    # torch ≥ 2.13 names it forward_sync_buffers (and warns on the old name); buffers still sync once at init
    name = (
        "forward_sync_buffers" if "forward_sync_buffers" in inspect.signature(ddp).parameters else "broadcast_buffers"
    )
    options: dict[str, Any] = {name: changing}
    return ddp(model, device_ids=ids, **options)


def task_loss(model: torch.nn.Module, loss):
    """`loss(module, batch)` as a function of the batch, handed the user's own module even under DDP: there the
    whole loss runs inside DDP's forward (the module's `forward` redirected to it for that call, as Lightning's
    _DDPForwardRedirection does), so DDP prepares its gradient all-reduce; bypassing it would not sync them."""
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return lambda batch: loss(model, batch)
    inner = model.module  # the user's module, or torch.compile's wrapper of it (which forwards attributes)
    own = inner.__dict__.get("forward")  # torch.compile's wrapper keeps its compiled forward here

    def restore() -> None:
        if own is None:
            inner.__dict__.pop("forward", None)
        else:
            inner.__dict__["forward"] = own

    def redirected(batch):
        restore()
        return loss(inner, batch)

    held = [model]  # emptied by release(): a traceback that keeps this function (its frame) keeps no DDP then

    def through_ddp(batch):
        inner.__dict__["forward"] = lambda: redirected(batch)
        try:
            return held[0]()
        finally:
            restore()

    through_ddp.release = held.clear  # type: ignore[attr-defined]
    return through_ddp


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # someone else's process: it exists
        return True
    try:  # a killed process its parent has not reaped yet is a zombie: ended all the same
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


PEER_LOST = "died or lost its connection"  # in the message of a rank that ended because another rank went away
_PEER_FAILURE_TEXT = ("Connection reset", "Connection closed", "Broken pipe", "Connection refused")


def is_peer_failure(exc: BaseException) -> bool:
    """Whether a collective failed because another rank died or its connection went (not a bug of this rank)."""
    backend_error = getattr(dist, "DistBackendError", ())
    text = str(exc)
    return isinstance(exc, backend_error) or (
        isinstance(exc, RuntimeError) and any(part in text for part in _PEER_FAILURE_TEXT)
    )
