"""Oversized models are refused before anything is allocated, naming the options that make them large; a
misspelt task option is named with a suggestion."""

from __future__ import annotations

import re

import pytest

from core.errors import ConfigError
from core.tasks import TASKS, create_task
from core.tasks.base import MARGIN_BYTES

pytestmark = pytest.mark.reliability

GIB = 2**30


@pytest.mark.parametrize("name", sorted(TASKS))
def test_defaults_fit_on_this_machine(name):
    task = create_task(name)
    need = task.check_fits({}, "cpu", "adamw")  # the host's real available memory
    assert need == task.parameter_count() * 16 + MARGIN_BYTES


@pytest.mark.parametrize(
    "name,options,culprits",
    [
        ("sentiment", {"buckets": 1 << 26, "dim": 4096}, ("dim (4,096)", "buckets (67,108,864)")),
        ("ranking", {"hidden": 65536, "layers": 32}, ("hidden (65,536)", "layers (32)")),
        ("recommender", {"items": 10_000_000, "d_model": 4096, "heads": 64}, ("d_model (4,096)", "items (10,000,000)")),
    ],
)
def test_a_model_within_the_option_ranges_but_too_large_is_refused_unbuilt(name, options, culprits):
    task = create_task(name, options)
    with pytest.raises(ConfigError) as err:
        task.check_fits({}, "cpu", "adamw", available=21 * GIB)
    message = str(err.value)
    params = task.parameter_count()
    assert params > 10**10
    expected = (
        f"the model would have {params:,} parameters (~{{size}} to train) but cpu has 21 GiB free: "
        f"lower task option {culprits[0]} or {culprits[1]}"
    )
    assert re.fullmatch(re.escape(expected).replace(r"\{size\}", r"[\d.]+ [GTP]iB"), message.split(": ", 1)[1])
    assert err.value.field == f"task_options.{culprits[0].split()[0]}"


def test_the_optimizer_state_and_the_device_decide():
    task = create_task("recommender", {"d_model": 1024, "layers": 8, "heads": 8})
    params = task.parameter_count()  # about 101M: 1.6 GB with AdamW, 1.2 GB with SGD
    between = params * 14 + MARGIN_BYTES
    with pytest.raises(ConfigError, match=r"but cpu has 1\.\d+ GiB free: lower task option d_model \(1,024\)"):
        task.check_fits({}, "cpu", "adamw", available=between)
    assert task.check_fits({}, "cpu", "sgd", available=between) == params * 12 + MARGIN_BYTES
    with pytest.raises(ConfigError, match=r"to train\) but cuda:0 has 1\.\d+ GiB free"):
        task.check_fits({}, "cuda:0", "adam", available=between)


def test_bf16_pure_and_an_8_bit_optimizer_fit_what_fp32_adamw_does_not():
    task = create_task("recommender", {"d_model": 1024, "layers": 8, "heads": 8})
    params = task.parameter_count()
    between = params * 10 + MARGIN_BYTES  # fp32 AdamW keeps 16 bytes a parameter
    with pytest.raises(ConfigError, match="to train"):
        task.check_fits({}, "cpu", "adamw", available=between)
    assert task.check_fits({}, "cpu", "adamw", available=between, mode="bf16-pure") == params * 8 + MARGIN_BYTES
    assert task.check_fits({}, "cpu", "adamw8bit", available=between, mode="bf16") == params * 10 + MARGIN_BYTES


def test_a_large_catalogue_from_the_data_names_the_width_to_lower():
    task = create_task("recommender", {"d_model": 2048, "heads": 8})
    with pytest.raises(ConfigError, match=r"lower task option d_model \(2,048\)"):
        task.check_fits({"n_items": 50_000_000}, "cpu", "adamw", available=64 * GIB)


def test_a_misspelt_option_names_the_closest_and_lists_the_options():
    with pytest.raises(ConfigError) as err:
        create_task("tiny", {"hiden": 32})
    assert err.value.field == "task_options.hiden"
    assert str(err.value).endswith(
        "tiny has no option 'hiden' (did you mean 'hidden'?); its options: hidden, samples, label_noise"
    )
    with pytest.raises(ConfigError, match=r"ranking has no option 'Hidden' \(did you mean 'hidden'\?\)"):
        create_task("ranking", {"Hidden": 32})
    with pytest.raises(ConfigError, match=r"tiny has no option 'zzz'; its options: hidden, samples, label_noise$"):
        create_task("tiny", {"zzz": 1})


def test_the_cli_names_a_misspelt_option_in_one_line(tmp_path, capsys):
    from core.cli.main import main

    code = main(["train", "--task", "tiny", "-o", "hiden=32", "--device", "cpu", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0
    assert "tiny has no option 'hiden' (did you mean 'hidden'?); its options: hidden, samples, label_noise" in err
    assert err.startswith("amp-console: error: --option hiden: ")  # the flag the user typed, not an internal field


def test_synthetic_data_too_large_for_the_host_is_refused_ungenerated(monkeypatch):
    with pytest.raises(
        ConfigError,
        match=r"^task_options\.queries: the synthetic data would take over [\d.]+ [TP]iB "
        r"but cpu has .* free: lower task option queries \(100,000,000\) or "
        r"docs \(10,000\)$",
    ):
        create_task("ranking", {"queries": 100_000_000, "docs": 10_000}).load_data("", 0)
    import core.tasks.base as base

    monkeypatch.setattr(base, "free_bytes", lambda device: 2 * GIB)
    with pytest.raises(
        ConfigError,
        match=r"but cpu has 2 GiB free: lower task option interactions "
        r"\(1,000,000,000\)$",
    ):
        create_task("recommender", {"interactions": 1_000_000_000}).load_data("", 0)
    with pytest.raises(ConfigError, match=r"lower task option reviews \(100,000,000\)$"):
        create_task("sentiment", {"reviews": 100_000_000}).load_data("", 0)
    with pytest.raises(ConfigError, match=r"lower task option samples \(100,000,000\)$"):
        create_task("tiny", {"samples": 100_000_000}).load_data("", 0)


def test_the_trainer_refuses_an_oversized_model_before_building_it(tmp_path, capsys, monkeypatch):
    """End to end: `train` checks the model against free memory before any allocation, exit 2 in one line."""
    import core.tasks.base
    from core.cli.main import main

    monkeypatch.setattr(core.tasks.base, "free_bytes", lambda device: 16 * 2**30)  # as on a 16 GiB machine

    code = main(
        [
            "train",
            "--task",
            "recommender",
            "-o",
            "d_model=4096",
            "-o",
            "layers=32",
            "--device",
            "cpu",
            "--max-steps",
            "1",
            "--threads",
            "1",
            "--out",
            str(tmp_path / "run"),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.count("\n") == 0, err
    assert "the model would have" in err and "lower task option d_model (4,096) or layers (32)" in err
    assert not (tmp_path / "run" / "checkpoint.pt").exists()
