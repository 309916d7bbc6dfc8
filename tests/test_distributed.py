"""DDP on CPU (gloo, 2 processes): under torchrun (equivalence, resume, a second run into a used folder, a stop
from rank 0, a dying rank), and Trainers in 2 fresh processes (run_ranks: per-rank randomness, RNG states in
checkpoints, shared evaluation, teardown)."""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
import weakref
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
import torch

from tests.waiting import logged, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(600),
]  # generous: two ranks of four tasks at load 3+ took over 150 s

COMMON = ["--task", "tiny", "--device", "cpu", "--log-interval", "5", "--seed", "3", "-o", "samples=4096"]


def cli(*args, **kwargs):
    return subprocess.run(
        [sys.executable, "-m", "core.cli", "train", *COMMON, *args],
        capture_output=True,
        text=True,
        timeout=200,
        **kwargs,
    )


def one_process(capsys, *args) -> subprocess.CompletedProcess:
    """`train` in this process (a single-process run needs no process of its own): code, stdout and stderr as
    cli() gives them."""
    from core.cli.main import main

    capsys.readouterr()
    code = main(["train", *COMMON, *args])
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, code, out.out, out.err)


def losses(out: Path) -> list[float]:
    events = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [e["loss"] for e in events if e["event"] == "StepMetrics"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> SimpleNamespace:
    """One process at batch 64 (in this process) and then 2 processes at batch 32 (torchrun), 40 steps each, the
    2-process run given the first one's folder: the reference of the equivalence test, and a folder holding an
    earlier run for the second-run test. Read-only for the tests. Set up as tests/conftest.py sets up a test: one
    thread, the runs root in a temporary folder."""
    from core.cli.main import main
    from core.engine.run_record import RUNS_DIR_ENV

    root = tmp_path_factory.mktemp("pair")
    threads = torch.get_num_threads()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("OMP_NUM_THREADS", "1")
        env.setenv(RUNS_DIR_ENV, str(tmp_path_factory.mktemp("runs-root")))
        torch.set_num_threads(1)
        try:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
                code = main(["train", *COMMON, "--batch-size", "64", "--max-steps", "40", "--out", str(root / "one")])
        finally:
            torch.set_num_threads(threads)
        assert code == 0, err.getvalue()
        first_checkpoint = (root / "one" / "checkpoint.pt").read_bytes()
        two = cli("--batch-size", "32", "--max-steps", "40", "--nproc", "2", "--out-dir", str(root / "one"), "--json")
    assert two.returncode == 0, two.stderr
    return SimpleNamespace(one=root / "one", two=root / "one-2", run=two, first_checkpoint=first_checkpoint)


def test_two_processes_match_one_process_at_the_same_global_batch(pair, tmp_path, capsys):
    """2 ranks x batch 32 == 1 rank x batch 64: same samples per step, DDP averages the two half-batch grads."""
    a, b = losses(pair.one), losses(pair.two)
    assert len(a) == len(b) == 8
    # Tolerance: only float summation order differs (gradient all-reduce), amplified a little by Adam.
    assert all(abs(x - y) <= 1e-4 * max(1.0, abs(x)) for x, y in zip(a, b, strict=True)), (a, b)
    summary = json.loads(pair.run.stdout.strip().splitlines()[-1])
    assert summary["status"] == "completed" and summary["steps"] == 40

    # The 2-process checkpoint (unwrapped model) resumes in a single process.
    resumed = one_process(
        capsys,
        "--resume",
        str(pair.two / "checkpoint.pt"),
        "--batch-size",
        "64",
        "--max-steps",
        "50",
        "--out",
        str(tmp_path / "resumed"),
        "--json",
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout.strip().splitlines()[-1])["steps"] == 50
    assert (
        "resumed a checkpoint of 2 processes on 1: the random streams (dropout, sampling) of rank 1 are not used"
    ) in resumed.stderr


def test_a_second_ddp_run_into_the_same_folder_keeps_the_first(pair):
    """The launcher claims the next free folder and rank 0 writes there (the launcher reads its events there)."""
    out, second = pair.one, pair.run
    assert "this run writes to" in second.stderr
    assert (out / "checkpoint.pt").read_bytes() == pair.first_checkpoint
    started = [json.loads(x) for x in (pair.two / "metrics.jsonl").read_text().splitlines() if '"RunStarted"' in x][-1]
    assert [note for note in started["notes"] if not note.startswith("threads: ")] == [
        f"{out} holds an earlier run, which is kept: this run writes to {pair.two}"
    ]
    assert json.loads(second.stdout.strip().splitlines()[-1])["checkpoint"] == str(pair.two / "checkpoint.pt")


def start_long_run(out: Path, *extra: str) -> subprocess.Popen:
    command = [
        sys.executable,
        "-m",
        "core.cli",
        "train",
        *COMMON,
        "--batch-size",
        "16",
        "--max-steps",
        "1000000",
        "--nproc",
        "2",
        "--out",
        str(out),
        *extra,
    ]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def worker(process: subprocess.Popen, rank: int) -> psutil.Process:
    for child in psutil.Process(process.pid).children(recursive=True):
        try:
            if child.environ().get("RANK") == str(rank) and "core.cli" in " ".join(child.cmdline()):
                return child
        except psutil.Error:
            continue
    raise AssertionError(f"rank {rank} not found")


def test_a_stop_lands_soon_even_when_logs_are_far_apart(tmp_path):
    """SIGINT to rank 0 alone: the stop reaches every rank, which agree on it about twice a second, not only at
    log boundaries (here 10^6 steps apart), and rank 0 writes the checkpoint. A stop signal to the launcher:
    tests/reliability/test_rel_torchrun_launcher.py."""
    out = tmp_path / "run"
    process = start_long_run(out, "--log-interval", "1000000", "--checkpoint-interval", "50")
    try:
        # A checkpoint shows the run has taken steps (there are no logs to show it), far from a log boundary.
        wait_until(lambda: logged(out, "CheckpointSaved"), "a checkpoint", process)
        asked_at = time.monotonic()
        os.kill(worker(process, 0).pid, signal.SIGINT)
        _, stderr = process.communicate(timeout=90)
        took = time.monotonic() - asked_at
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    ended = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if '"RunEnded"' in x][-1]
    assert ended["status"] == "stopped" and 0 < ended["step"] < 1_000_000
    from core.engine.checkpoints import load_checkpoint

    assert load_checkpoint(out / "checkpoint.pt")["step"] == ended["step"]
    print(f"stopped {took:.1f} s after the request, at step {ended['step']}")


def test_a_killed_rank_ends_the_run_with_an_error_in_bounded_time(tmp_path, capsys):
    out = tmp_path / "run"
    process = start_long_run(out)
    try:
        wait_until(lambda: logged(out, "StepMetrics", 2), "two steps", process)
        killed_at = time.monotonic()
        worker(process, 1).kill()
        _, stderr = process.communicate(timeout=90)
        took = time.monotonic() - killed_at
    finally:
        process.kill()
    assert process.returncode == 1
    # The launcher's last line: torchelastic's root cause, the rank that died (not rank 0, which reported it)
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("amp-console: the 2-process run failed (torchrun exit code 1"), last
    assert f"rank 1 (local rank 1) on node {socket.gethostname()} failed first: was killed by SIGKILL" in last, last
    assert f"each rank's log: {out / 'ranks'}" in last
    events = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    ended = [e for e in events if e["event"] == "RunEnded"][-1]
    step = ended["step"]
    assert ended["status"] == "failed"
    # Rank 0 names the rank that died and saves its own state, which every replica shared after the last step.
    assert ended["message"] == (
        f"rank 1 of this 2-process run died or lost its connection at step {step}; the run "
        f"ended. Its state at step {step} is saved: resume from {out / 'checkpoint.pt'}"
    )
    # With checkpoint_interval 0 the only last checkpoint is the one saved at the failure (a best checkpoint may
    # come before it, when the kill lands after the first epoch's evaluation: step 102 here).
    last = [e["step"] for e in events if e["event"] == "CheckpointSaved" and e.get("kind", "last") == "last"]
    assert last == [step]
    from core.engine.checkpoints import load_checkpoint

    assert load_checkpoint(out / "checkpoint.pt")["step"] == step > 0
    resumed = one_process(
        capsys, "--resume", str(out / "checkpoint.pt"), "--batch-size", "16", "--max-steps", str(step + 5), "--json"
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout.strip().splitlines()[-1])["steps"] == step + 5
    print(f"run ended {took:.1f} s after rank 1 was killed, with a checkpoint at step {step} that resumed")


# ----------------------------------------------------------------- Trainers in 2 spawned processes
# Modules the server of the rank processes imports once (see run_ranks): torch's import is most of a process's
# start-up, and the first optimizer imports torch._dynamo. Nothing of this project: a fresh process imports it.
PRELOADED = ["torch", "torch.distributed", "torch._dynamo"]


def run_ranks(fn, *args, world_size: int = 2, timeout: float = 450) -> list:
    """`fn(rank, *args)` in `world_size` fresh processes that share one gloo group (env://); results by rank.
    Results must pickle without shared memory: plain values, lists, numpy arrays. The processes are forked from
    multiprocessing's fork server, which has imported PRELOADED once for this test process (no thread runs in it
    when it forks), and they get this process's environment, as spawned ones would."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOADED)  # read when the server starts: the first call in this process
    queue = context.Queue()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    environ = dict(os.environ)
    processes = [
        context.Process(target=_rank_main, args=(fn, rank, world_size, port, queue, args, environ), daemon=True)
        for rank in range(world_size)
    ]
    for process in processes:
        process.start()
    results = {}
    try:
        for _ in processes:
            rank, ok, value = queue.get(timeout=timeout)
            assert ok, f"rank {rank} failed:\n{value}"
            results[rank] = value
    finally:
        for process in processes:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    return [results[rank] for rank in range(world_size)]


def _rank_main(fn, rank: int, world_size: int, port: int, queue, args, environ: dict) -> None:
    os.environ.clear()
    os.environ.update(environ)  # the test's, not the fork server's (it started in an earlier test)
    os.environ.update(
        {
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "WORLD_SIZE": str(world_size),
            "LOCAL_RANK": str(rank),
        }
    )
    import faulthandler

    import torch

    faulthandler.dump_traceback_later(400)  # a rank still working then says where (run_ranks waits 450 s)
    torch.set_num_threads(1)
    try:
        queue.put((rank, True, fn(rank, *args)))
    except BaseException:
        queue.put((rank, False, traceback.format_exc()))


REC = {
    "items": 100,
    "track_len": 10,
    "interactions": 4000,
    "mean_len": 20,
    "max_len": 16,
    "d_model": 16,
    "heads": 2,
    "layers": 1,
    "dropout": 0.5,
    "loss": "sampled",
    "sampled_negatives": 32,
}


def rec_config(out: str, max_steps: int, **overrides):
    from core.config import RunConfig

    return RunConfig.for_task(
        "recommender",
        task_options=REC,
        device="cpu",
        precision="fp32",
        batch_size=16,
        max_steps=max_steps,
        log_interval=2,
        eval_interval=0,
        threads=1,
        out_dir=out,
        **overrides,
    )


def _randomness_of_each_rank(rank: int, out: str) -> dict:
    from core.engine.distributed import DistContext
    from core.engine.trainer import Trainer

    trainer = Trainer(rec_config(out, max_steps=2), dist_ctx=DistContext.from_env())
    trainer.setup()
    negatives, randint = [], torch.randint

    def recording(*args, **kwargs):  # the recommender's sampled negatives are its only randint
        drawn = randint(*args, **kwargs)
        negatives.append(drawn.tolist())
        return drawn

    wrapper = weakref.ref(trainer.model)  # DDP's
    try:
        params = torch.cat([p.detach().flatten() for p in trainer.raw_model.parameters()]).numpy().copy()
        mask = (trainer.raw_model.drop(torch.ones(512)) == 0).numpy().copy()  # the same input on every rank
        order = trainer.batches.order(0).flatten().tolist()
        torch.randint = recording
        ended = trainer._train_and_finish()
    finally:
        torch.randint = randint
        trainer.cleanup(ended_normally=True)
    gc.collect()
    released = wrapper() is None  # held past the group's end, DDP's last reference can hang the process
    return {
        "params": params,
        "mask": mask,
        "negatives": negatives,
        "order": order,
        "status": ended.status,
        "released": released,
    }


def _interrupted_in_a_step(rank: int, out: str) -> dict:
    from core.engine.distributed import DistContext
    from core.engine.trainer import Trainer

    trainer = Trainer(rec_config(out, max_steps=1000), dist_ctx=DistContext.from_env())
    real_setup = trainer.setup
    wrapper = None

    def setup():
        nonlocal wrapper
        real_setup()
        wrapper = weakref.ref(trainer.model)  # DDP's
        calls = []

        def interrupted(module, args):  # Ctrl+C in the third step's forward, under DDP's forward
            calls.append(1)
            if len(calls) == 3:
                raise KeyboardInterrupt

        trainer.raw_model.register_forward_pre_hook(interrupted)

    trainer.setup = setup
    try:
        trainer.run()
    except KeyboardInterrupt as exc:
        held = exc  # a caller keeps the exception past the group's end (as the interpreter does to print it)
        # gone already, not at a later collection: freed by the reference count when the trainer let go of it
        return {"released": wrapper is not None and wrapper() is None, "traceback": held.__traceback__ is not None}
    return {"released": None, "traceback": None}  # not interrupted


def test_an_interrupted_step_lets_go_of_ddp_before_the_group_ends(tmp_path):
    """The interrupted step's frames held DDP's wrapper past destroy_process_group: freed later, its reducer drops
    the group's last reference with the GIL held (the hang release_ddp avoids)."""
    zero, one = run_ranks(_interrupted_in_a_step, str(tmp_path / "run"))
    assert zero == one == {"released": True, "traceback": True}


def test_ranks_start_from_one_model_but_draw_their_own_dropout_and_negatives(tmp_path):
    zero, one = run_ranks(_randomness_of_each_rank, str(tmp_path / "run"))
    assert zero["status"] == one["status"] == "completed"
    assert zero["released"] and one["released"]  # the trainer let go of DDP's wrapper before the group ended
    assert (zero["params"] == one["params"]).all()  # one initial model (DDP would broadcast rank 0's anyway)
    assert (zero["mask"] != one["mask"]).any()  # dropout: seed + rank
    assert len(zero["negatives"]) == len(one["negatives"]) == 2  # one draw per step
    assert all(a != b for a, b in zip(zero["negatives"], one["negatives"], strict=True))
    # The batch order is still one permutation of (seed, epoch) that the ranks slice: no sample twice.
    assert len(zero["order"]) == len(one["order"]) and not set(zero["order"]) & set(one["order"])


def _train_and_report_rng(rank: int, out: str, max_steps: int, resume: str | None) -> dict:
    import random

    from core.engine.distributed import DistContext
    from core.engine.trainer import Trainer

    trainer = Trainer(rec_config(out, max_steps), dist_ctx=DistContext.from_env(), resume_from=resume)
    trainer.setup()
    after_setup = (torch.get_rng_state().numpy().copy(), random.getstate()[1][:8])
    try:
        ended = trainer._train_and_finish()
    finally:
        trainer.cleanup(ended_normally=True)
    at_end = (torch.get_rng_state().numpy().copy(), random.getstate()[1][:8])
    return {
        "after_setup": after_setup,
        "at_end": at_end,
        "status": ended.status,
        "step": ended.step,
        "checkpoint": ended.checkpoint,
        "notes": list(trainer.notes),
    }


def same_rng(a, b) -> bool:
    return (a[0] == b[0]).all() and a[1] == b[1]


def _three_runs_of_each_rank(rank: int, root: str, ports: list[int]) -> dict:
    """3 steps, their resume to 6, and 6 steps straight, one after the other in the same two processes (a new
    process group for each, on a port of its own): what the test compares, read by rank 0 between the runs
    (the resume overwrites the first run's checkpoint)."""
    from core.engine.checkpoints import load_checkpoint

    def phase(port: int, *args) -> dict:
        os.environ["MASTER_PORT"] = str(port)
        return _train_and_report_rng(rank, *args)

    part = phase(ports[0], f"{root}/part", 3, None)
    saved = load_checkpoint(f"{root}/part/checkpoint.pt") if rank == 0 else None
    if saved is not None:
        part["saved"] = {
            "ranks": len(saved["rng_per_rank"]),
            "differ": not torch.equal(saved["rng_per_rank"][0]["torch"], saved["rng_per_rank"][1]["torch"]),
        }
    rest = phase(ports[1], f"{root}/part", 6, f"{root}/part/checkpoint.pt")
    straight = phase(ports[2], f"{root}/straight", 6, None)
    if rank == 0:
        a, b = load_checkpoint(straight["checkpoint"])["model"], load_checkpoint(rest["checkpoint"])["model"]
        straight["same_model"] = all(torch.equal(a[k], b[k]) for k in a)
    return {"part": part, "rest": rest, "straight": straight}


def test_every_ranks_rng_state_round_trips_and_a_ddp_resume_is_exact(tmp_path):
    ports = []
    for _ in range(3):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            ports.append(probe.getsockname()[1])
    runs = run_ranks(_three_runs_of_each_rank, str(tmp_path), ports)
    part, rest = [r["part"] for r in runs], [r["rest"] for r in runs]
    assert [r["status"] for r in part] == ["completed"] * 2
    assert part[0]["saved"] == {"ranks": 2, "differ": True}
    for saved, resumed in zip(part, rest, strict=True):  # each rank continues its own streams
        assert same_rng(saved["at_end"], resumed["after_setup"])
    assert rest[0]["notes"] == [] and rest[0]["step"] == 6
    assert runs[0]["straight"]["step"] == 6
    assert runs[0]["straight"]["same_model"]  # bitwise: dropout and negatives replayed on both ranks


def test_a_checkpoint_of_one_process_resumes_on_two(tmp_path):
    """Rank 0 continues the single process's streams; rank 1 starts fresh ones from seed + 1, and a note says so."""
    from core.engine.checkpoints import load_checkpoint
    from core.engine.trainer import train

    one = train(rec_config(str(tmp_path / "one"), max_steps=3))
    saved = load_checkpoint(one.checkpoint)
    assert "rng_per_rank" not in saved
    zero, first = run_ranks(_train_and_report_rng, str(tmp_path / "one"), 5, one.checkpoint)
    assert (zero["after_setup"][0] == saved["rng"]["torch"].numpy()).all()
    fresh = torch.Generator().manual_seed(saved["config"]["seed"] + 1).get_state()
    assert (first["after_setup"][0] == fresh.numpy()).all()
    assert zero["step"] == 5
    assert zero["notes"] == [
        (
            "resumed a checkpoint of 1 process on 2: fresh random streams (dropout, sampling) "
            "are seeded for rank 1 from seed + rank; the global batch is 32 rows a step (was 16; --batch-size is "
            "per process), so the steps take other rows: not an exact resume"
        )
    ]


EVAL_CASES = {
    "tiny": {"samples": 1001},
    "sentiment": {"reviews": 1010, "buckets": 4096},
    "ranking": {"queries": 215, "docs": 8, "features": 4},
    "recommender": {k: v for k, v in REC.items() if k not in ("loss", "dropout")},
}


def _evaluate_each_task(rank: int, out: str) -> dict:
    import torch.distributed as dist

    from core.config import RunConfig
    from core.engine.distributed import DistContext, destroy_process_group
    from core.engine.trainer import Trainer

    results = {}
    for task, options in EVAL_CASES.items():
        trainer = Trainer(
            RunConfig.for_task(
                task,
                task_options=options,
                device="cpu",
                precision="fp32",
                batch_size=8,
                threads=1,
                out_dir=f"{out}/{task}",
            ),
            dist_ctx=DistContext.from_env(),
        )
        trainer.setup()  # the process group stays up across tasks: no cleanup until the end
        rows, evaluate_parts = [], trainer.task.evaluate_parts

        def recording(model, split, batch_size, _parts=evaluate_parts, rows=rows):
            rows.append(next(iter(split.values())).shape[0])
            return _parts(model, split, batch_size)

        trainer.task.evaluate_parts = recording
        results[task] = {
            "val": trainer.evaluate(),
            "test": trainer.evaluate("test") if trainer.test else None,
            "rows": rows,
        }
        trainer.release_ddp()  # the group lives on for the next task
    timeout = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu")).options._timeout
    destroy_process_group(agree=True)
    return {"tasks": results, "timeout_seconds": timeout.total_seconds()}


def test_evaluation_is_shared_out_and_matches_one_process(tmp_path):
    from torch.distributed.constants import default_pg_timeout

    from core.config import RunConfig
    from core.engine.trainer import Trainer

    zero, one = run_ranks(_evaluate_each_task, str(tmp_path / "ddp"))
    # The process group waits at least as long as torch's default (not a shorter, hand-set timeout).
    assert zero["timeout_seconds"] >= default_pg_timeout.total_seconds()
    for task, options in EVAL_CASES.items():
        single = Trainer(
            RunConfig.for_task(
                task,
                task_options=options,
                device="cpu",
                precision="fp32",
                batch_size=8,
                threads=1,
                out_dir=str(tmp_path / task),
            )
        )
        single.setup()
        expected = {"val": single.evaluate(), "test": single.evaluate("test") if single.test else None}
        rows = [len(split) for split in (single.val, single.test) if split]
        for split in ("val", "test"):
            if expected[split] is None:
                continue
            for rank in (zero, one):  # every rank ends with the whole split's metrics
                assert rank["tasks"][task][split] == pytest.approx(expected[split], rel=1e-5, abs=1e-7), task
        # Each rank evaluated its half of each split (the halves differ by at most one row).
        total = [next(iter(split.values())).shape[0] for split in (single.val, single.test) if split]
        assert len(rows) == len(total)
        for index, size in enumerate(total):
            halves = [zero["tasks"][task]["rows"][index], one["tasks"][task]["rows"][index]]
            assert sum(halves) == size and max(halves) - min(halves) <= 1, (task, halves, size)


def _fail_in_load_data(rank: int, out: str) -> dict:
    import torch.distributed as dist

    from core.config import RunConfig
    from core.engine.distributed import DistContext
    from core.engine.trainer import Trainer
    from core.errors import DataError
    from core.tasks.tiny.task import TinyClassifierTask

    seen = {}

    def failing(self, data_path, seed):
        seen["group_was_up"] = dist.is_initialized()
        raise DataError("the data went away")

    TinyClassifierTask.load_data = failing
    try:
        Trainer(
            RunConfig.for_task("tiny", device="cpu", precision="fp32", max_steps=2, out_dir=out),
            dist_ctx=DistContext.from_env(),
        ).run()
    except DataError as exc:
        seen["error"] = str(exc)
    seen["group_is_up"] = dist.is_initialized()
    return seen


def test_a_failed_setup_leaves_the_process_group(tmp_path):
    for rank in run_ranks(_fail_in_load_data, str(tmp_path / "run")):
        assert rank == {"group_was_up": True, "error": "the data went away", "group_is_up": False}
