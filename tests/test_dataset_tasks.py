"""A user's task whose data is a torch.utils.data Dataset (tests/fixtures/user_tasks/dataset_task.py): trained
through a DataLoader from the CLI (in-process), with and without worker processes, evaluated and resumed; a
resumed epoch goes on with exactly the batches it would have had; under DDP each rank trains on its own shard;
a stream that does not shard itself is warned about, and its resume restarts it, saying so."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from cli_in_process import cli

from core.config import RunConfig
from core.data.loaders import DatasetSplit, LoaderBatches, LoaderSettings
from core.errors import ConfigError
from core.tasks.base import iter_slices

ROOT = Path(__file__).resolve().parents[1]
TASK_FILE = ROOT / "tests" / "fixtures" / "user_tasks" / "dataset_task.py"
sys.path.insert(0, str(TASK_FILE.parent))  # its Dataset classes, for the tests of the parts
MAP_STYLE = f"{TASK_FILE}:RegressionDatasetTask"
STREAM = f"{TASK_FILE}:RegressionStreamTask"


def summary(out: str) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def weights(run: Path) -> dict:
    return torch.load(run / "checkpoint.pt", weights_only=True)["model"]


class Numbered(torch.utils.data.Dataset):
    def __len__(self):
        return 40

    def __getitem__(self, i):
        return {"i": torch.tensor(i), "x": torch.full((2,), float(i))}


# ----------------------------------------------------------------------------------------------- the parts
def test_a_resumed_epoch_goes_on_with_the_batches_it_would_have_had():
    def batches(start: int, epoch: int = 1, workers: int = 0) -> list[list[int]]:
        loader = LoaderBatches(
            Numbered(), 4, seed=7, device=torch.device("cpu"), settings=LoaderSettings(num_workers=workers)
        )
        order = loader.order(epoch)
        try:
            return [loader.batch(order, index)["i"].tolist() for index in range(start, loader.batches_per_epoch)]
        finally:
            loader.close()

    whole = batches(0)
    assert len(whole) == 10 and sorted(sum(whole, [])) == list(range(40))  # shuffled, each row once
    assert whole != [list(range(k, k + 4)) for k in range(0, 40, 4)]
    assert batches(6) == whole[6:]  # skipped by the sampler, not loaded
    assert batches(6, workers=2) == whole[6:]  # workers load what the sampler in this process picks
    assert batches(0, epoch=2) != whole  # set_epoch: another order each epoch


def test_ranks_get_disjoint_shards_and_evaluation_shares_cover_the_split():
    shards = [LoaderBatches(Numbered(), 4, seed=0, device=torch.device("cpu"), rank=r, world_size=2) for r in range(2)]
    seen = [
        {i for k in range(s.batches_per_epoch) for i in s.batch(order, k)["i"].tolist()}
        for s in shards
        for order in [s.order(0)]
    ]
    assert len(seen[0]) == len(seen[1]) == 20 and not seen[0] & seen[1]
    split = DatasetSplit(Numbered(), 8, torch.device("cpu"))
    rows = [b["i"] for rank in range(3) for b in iter_slices(split.share(rank, 3), 5)]
    assert torch.cat(rows).tolist() == list(range(40))  # in order, each once
    assert [len(split.share(rank, 3)) for rank in range(3)] == [13, 13, 14]


def test_the_loader_settings_are_run_settings_with_ranges():
    cfg = RunConfig()
    assert (cfg.num_workers, cfg.pin_memory, cfg.persistent_workers, cfg.prefetch_factor) == (2, "auto", True, 2)
    assert LoaderSettings.from_config(cfg, torch.device("cpu")).pin_memory is False  # auto: on for CUDA only
    assert LoaderSettings.from_config(cfg, torch.device("cuda")).pin_memory is True
    zero = LoaderSettings.from_config(cfg.replace(num_workers=0), torch.device("cpu"))
    assert zero.kwargs() == {"num_workers": 0, "pin_memory": False}  # no worker options without workers
    with pytest.raises(ConfigError, match="num_workers: -1 is out of range"):
        cfg.replace(num_workers=-1).validate()
    with pytest.raises(ConfigError, match="pin_memory: 'yes' is not one of auto, on, off"):
        cfg.replace(pin_memory="yes").validate()


# ----------------------------------------------------------------------------------------------- through the CLI
@pytest.mark.parametrize("workers", [0, 2])
def test_a_map_style_dataset_trains_evaluates_and_resumes(tmp_path, capsys, workers):
    run = tmp_path / "run"
    code, out, err = cli(
        capsys,
        "train",
        "--task",
        MAP_STYLE,
        "--max-steps",
        "100",
        "--eval-interval",
        "50",
        "-o",
        "samples=1024",
        "--num-workers",
        workers,
        "--out",
        run,
        "--json",
    )
    assert code == 0, err
    trained = summary(out)
    assert trained["status"] == "completed" and trained["metrics"]["rmse"] < 1.5  # untrained: about 2.8
    code, out, err = cli(capsys, "evaluate", run, "--task", MAP_STYLE, "--json")
    assert code == 0, err
    assert summary(out)["metrics"]["rmse"] == pytest.approx(trained["test_metrics"]["rmse"], rel=1e-5)
    code, out, err = cli(
        capsys, "train", "--resume", run / "checkpoint.pt", "--task", MAP_STYLE, "--max-steps", "130", "--json"
    )
    assert code == 0, err
    assert summary(out)["steps"] == 130 and "restarts" not in err


def test_a_run_resumed_mid_epoch_ends_with_the_weights_of_one_not_interrupted(tmp_path, capsys):
    common = ["--task", MAP_STYLE, "-o", "samples=1024", "--keep-best", "0", "--seed", "5"]
    code, _, err = cli(
        capsys, "train", *common, "--max-steps", "40", "--num-workers", "0", "--out", tmp_path / "straight"
    )
    assert code == 0, err
    code, _, err = cli(
        capsys,
        "train",
        *common,
        "--max-steps",
        "30",
        "--num-workers",
        "2",  # 12 steps an epoch
        "--out",
        tmp_path / "stopped",
    )
    assert code == 0, err
    code, _, err = cli(
        capsys, "train", "--resume", tmp_path / "stopped" / "checkpoint.pt", "--task", MAP_STYLE, "--max-steps", "40"
    )
    assert code == 0, err
    straight, resumed = weights(tmp_path / "straight"), weights(tmp_path / "stopped")
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)


def test_an_iterable_dataset_trains_and_a_resume_restarts_its_stream(tmp_path, capsys):
    run = tmp_path / "run"
    code, out, err = cli(
        capsys,
        "train",
        "--task",
        STREAM,
        "-o",
        "samples=1024",
        "-o",
        "shards=1",
        "--num-workers",
        2,
        "--max-steps",
        "100",
        "--out",
        run,
        "--json",
    )
    assert code == 0, err
    assert summary(out)["metrics"]["rmse"] < 1.5 and "warning" not in err  # it shards itself
    code, out, err = cli(capsys, "evaluate", run, "--task", STREAM, "--json")
    assert code == 0, err
    assert summary(out)["metrics"]["rmse"] < 1.5
    code, out, err = cli(
        capsys, "train", "--resume", run / "checkpoint.pt", "--task", STREAM, "--max-steps", "110", "--json"
    )
    assert code == 0, err
    assert summary(out)["steps"] == 110
    # 819 training rows, 2 workers of 410 and 409: 6 full batches each, so 12 steps an epoch; step 100 is in the 9th
    assert (
        "resuming at step 100: task regression_stream's train split is an IterableDataset, which cannot be "
        "positioned, so it restarts: the rest of epoch 9"
    ) in err


def test_a_stream_that_does_not_shard_itself_is_warned_about(tmp_path, capsys):
    args = ["train", "--task", STREAM, "-o", "samples=512", "-o", "shards=0", "--max-steps", "10", "--json"]
    code, out, err = cli(capsys, *args, "--num-workers", 2, "--out", tmp_path / "two")
    assert code == 0, err
    assert (
        "warning: task regression_stream's train split, an IterableDataset (RowStream), does not say it shards "
        "itself (shards = True): with 2 DataLoader workers each of them reads the whole stream, so every sample "
        "is trained on 2 times an epoch"
    ) in err
    code, out, err = cli(capsys, *args, "--num-workers", 0, "--out", tmp_path / "none")
    assert code == 0, err
    assert "warning" not in err  # one reader: nothing is read twice


def test_a_stream_that_does_not_shard_itself_is_evaluated_without_workers():
    from dataset_task import RowStream

    x, y = torch.arange(30.0).view(15, 2), torch.arange(15.0)
    for shards, rows in ((False, 15), (True, 15)):
        split = DatasetSplit(RowStream(x, y, shards), 4, torch.device("cpu"), LoaderSettings(num_workers=2))
        seen = torch.cat([batch["y"] for batch in split]).tolist()
        assert sorted(seen) == list(range(rows)), shards  # each row once: with or without workers


def test_a_dataset_whose_items_are_not_dicts_is_one_line(tmp_path, capsys):
    path = tmp_path / "tuples.py"
    path.write_text(
        textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(TASK_FILE.parent)!r})
        import torch
        from torch.utils.data import TensorDataset
        from dataset_task import RegressionDatasetTask

        class TupleTask(RegressionDatasetTask):
            name = "tuples"

            def load_data(self, data_path, seed):
                data = super().load_data(data_path, seed)
                data.train = TensorDataset(data.train.x, data.train.y)
                return data
        """)
    )
    code, _, err = cli(capsys, "train", "--task", f"{path}:TupleTask", "--max-steps", "5", "--out", tmp_path / "r")
    assert code != 0
    assert (
        "task tuples's train split: an item is a tuple, not a dict of tensors; return {'x': ..., 'y': ...} "
        "from __getitem__"
    ) in err
    assert len([line for line in err.splitlines() if "tuple" in line]) == 1


# ----------------------------------------------------------------------------------------------- DDP
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_under_ddp_each_rank_trains_on_its_own_shard(tmp_path, capfd, monkeypatch):
    seen = tmp_path / "seen"
    seen.mkdir()
    monkeypatch.setenv("DATASET_TASK_SEEN", str(seen))
    # 819 training rows over 2 ranks at batch 32: 12 steps an epoch, 384 rows per rank; one epoch here
    code, out, err = cli(
        capfd,
        "train",
        "--task",
        MAP_STYLE,
        "-o",
        "samples=1024",
        "--batch-size",
        32,
        "--max-steps",
        12,
        "--num-workers",
        1,
        "--nproc",
        2,
        "--device",
        "cpu",
        "--out",
        tmp_path / "run",
        "--json",
    )
    assert code == 0, err
    assert summary(out)["status"] == "completed"
    rows = {
        rank: [int(line) for f in seen.glob(f"rank{rank}-*.txt") for line in f.read_text().split()] for rank in (0, 1)
    }
    for rank in (0, 1):
        assert len(rows[rank]) == len(set(rows[rank])) == 384, rank  # each of its rows once
    assert not set(rows[0]) & set(rows[1])  # and none of the other rank's


def _stream_on_each_rank(rank: int, out: str) -> dict:
    from core.engine.distributed import DistContext
    from core.engine.trainer import Trainer
    from core.tasks import add_task

    cfg = RunConfig.for_task(
        add_task(STREAM).name,
        task_options={"samples": 1024, "shards": 0},
        device="cpu",
        precision="fp32",
        batch_size=32,
        max_steps=6,
        num_workers=0,
        threads=1,
        out_dir=out,
    )
    trainer = Trainer(cfg, dist_ctx=DistContext.from_env())
    ended = trainer.run()
    return {"status": ended.status, "notes": list(trainer.notes)}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_under_ddp_a_stream_that_does_not_shard_itself_is_warned_about(tmp_path):
    """Two Trainers in one gloo group (tests/test_distributed.run_ranks): each rank reads the whole stream."""
    from tests.test_distributed import run_ranks

    zero, one = run_ranks(_stream_on_each_rank, str(tmp_path / "stream"))
    assert zero["status"] == one["status"] == "completed"
    warned = [note for note in zero["notes"] if note.startswith("warning: ")]
    assert (
        len(warned) == 1
        and ("with 2 processes each of them reads the whole stream, so every sample is trained on 2 times") in warned[0]
    ), zero["notes"]


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_workers_start_while_another_thread_reads_stdin(tmp_path):
    """--end-with-parent (how the window and the sweep drive a run) reads stdin on a thread; a worker forked then
    must not wait on that stream's lock (core.data.loaders.start)."""
    import subprocess

    out, err = tmp_path / "out.txt", tmp_path / "err.txt"
    with out.open("w") as stdout, err.open("w") as stderr:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "core.cli",
                "train",
                "--task",
                MAP_STYLE,
                "-o",
                "samples=512",
                "--max-steps",
                "20",
                "--num-workers",
                "2",
                "--end-with-parent",
                str(os.getpid()),
                "--out",
                str(tmp_path / "run"),
                "--json",
            ],
            stdin=subprocess.PIPE,
            stdout=stdout,
            stderr=stderr,
            cwd=ROOT,
        )
        try:
            process.wait(timeout=150)  # its stdin stays open (its end would stop the run)
        finally:
            process.kill()
            process.stdin.close()
    assert process.returncode == 0, err.read_text()
    assert summary(out.read_text())["steps"] == 20
