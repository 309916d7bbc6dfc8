"""threads = 0 means auto: one thread for light steps or a busy machine, else this process's free cores; the
choice and its reason are a RunStarted note. Explicit counts are used as given."""

from __future__ import annotations

import torch

from core.engine.events import RunStarted
from core.engine.threads import LIGHT_STEP_WORK, choose_threads

BIG = 5 * LIGHT_STEP_WORK  # parameters: heavy steps even at one batch value


def test_explicit_threads_are_used_as_given_without_a_note():
    choice = choose_threads(3, 1000, cores=2, load=7.0)
    assert (choice.threads, choice.note) == (3, "")


def test_light_steps_get_one_thread():
    choice = choose_threads(0, 12_345, cores=2, load=0.0, batch_values=640)
    assert choice.threads == 1
    assert choice.note == (
        "threads: 1 of 2 cores (auto: light steps, 12,345 parameters x 640 batch values; set --threads to choose)"
    )


def test_a_small_model_on_big_batches_gets_the_cores():
    """The work of a step decides, not the parameter count: measured on 2 idle cores, the recommender (167k
    parameters, batches of 128 x 50) ran 1.4x faster on two threads, the tiny task (834 x 64 x 10) slower."""
    assert choose_threads(0, 167_360, cores=2, load=0.0, batch_values=128 * 50).threads == 2
    assert choose_threads(0, 834, cores=2, load=0.0, batch_values=64 * 10).threads == 1


def test_a_big_model_on_an_idle_machine_gets_every_core():
    choice = choose_threads(0, BIG, cores=8, load=0.2)
    assert choice.threads == 8
    assert choice.note == (
        "threads: 8 of 8 cores (auto: 250,000,000 parameters x 1 batch values; set --threads to choose)"
    )


def test_a_busy_machine_leaves_the_busy_cores_alone():
    assert choose_threads(0, BIG, cores=8, load=5.6).threads == 2
    choice = choose_threads(0, BIG, cores=2, load=1.9)
    assert choice.threads == 1
    assert choice.note == "threads: 1 of 2 cores (auto: the machine is busy, load 1.9; set --threads to choose)"
    assert choose_threads(0, BIG, cores=2, load=40.0).threads == 1  # never below one
    assert choose_threads(0, BIG, cores=4, load=None).threads == 4  # no load average: assume idle


def test_ranks_on_one_machine_share_its_cores():
    choice = choose_threads(0, BIG, cores=8, load=0.0, processes=4)
    assert choice.threads == 2 and "of 8 cores, 4 processes" in choice.note


def test_omp_num_threads_is_kept():
    choice = choose_threads(0, BIG, cores=8, load=0.0, env_threads="3")
    assert choice.threads == 3 and "OMP_NUM_THREADS=3" in choice.note
    assert choose_threads(0, BIG, cores=8, load=0.0, env_threads="junk").threads == 8


def test_a_run_with_auto_threads_reports_its_choice_and_uses_it(tiny_config, recorder, monkeypatch):
    import os

    from core.engine.trainer import train

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = len(os.sched_getaffinity(0))
    before = torch.get_num_threads()
    try:
        train(tiny_config(max_steps=2, threads=0), sink=recorder)
        notes = recorder.of(RunStarted)[0].notes
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert [n for n in notes if n.startswith("threads: ")] == [
        f"threads: 1 of {cores} core{'s' if cores > 1 else ''} (auto: light steps, "
        f"{recorder.of(RunStarted)[0].param_count:,} parameters x {tiny_config().batch_size * 10:,} batch values; "
        f"set --threads to choose)"
    ]


def test_a_lagging_load_average_is_not_taken_for_other_work(monkeypatch):
    """Right after an earlier run the 1-minute load average still reads ~1 on an idle machine: what is
    runnable now decides when it is lower, so the next run isn't cut to one thread for nothing."""
    from core.engine import threads

    monkeypatch.setattr(threads.os, "getloadavg", lambda: (1.2, 0.8, 0.5))
    monkeypatch.setattr(threads, "_running_now", lambda: 0)
    assert threads.machine_facts()[1] == 0.0
    monkeypatch.setattr(threads, "_running_now", lambda: 3)  # really busy: the average (lower) stands
    assert threads.machine_facts()[1] == 1.2
