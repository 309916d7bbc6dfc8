"""threads = 0 means auto: one thread for small models or a busy machine, else this process's free cores; the
choice and its reason are a RunStarted note. Explicit counts are used as given."""

from __future__ import annotations

import torch

from core.engine.threads import SMALL_MODEL_PARAMETERS, choose_threads

BIG = 5 * SMALL_MODEL_PARAMETERS


def test_explicit_threads_are_used_as_given_without_a_note():
    choice = choose_threads(3, 1000, cores=2, load=7.0)
    assert (choice.threads, choice.note) == (3, "")


def test_a_small_model_gets_one_thread():
    choice = choose_threads(0, 12_345, cores=2, load=0.0)
    assert choice.threads == 1
    assert choice.note == "threads: 1 of 2 cores (auto: small model, 12,345 parameters; set --threads to choose)"


def test_a_big_model_on_an_idle_machine_gets_every_core():
    choice = choose_threads(0, BIG, cores=8, load=0.2)
    assert choice.threads == 8
    assert choice.note == "threads: 8 of 8 cores (auto: 5,000,000 parameters; set --threads to choose)"


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
        notes = recorder.of("RunStarted")[0].notes
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
    assert [n for n in notes if n.startswith("threads: ")] == [
        f"threads: 1 of {cores} core{'s' if cores > 1 else ''} (auto: small model, "
        f"{recorder.of('RunStarted')[0].param_count:,} parameters; set --threads to choose)"]
