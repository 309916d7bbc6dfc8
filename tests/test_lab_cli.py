"""`amp-console bench` and `inspect`: headless forms exit 0 and end with one JSON line."""

from __future__ import annotations

import json

from core.cli.main import main


def test_bench_json_lists_every_mode(capsys):
    assert (
        main(
            [
                "bench",
                "--task",
                "tiny",
                "--device",
                "cpu",
                "--precisions",
                "fp32,bf16,fp16",
                "--steps",
                "3",
                "--repeats",
                "1",
                "--no-isolate",
                "--json",
            ]
        )
        == 0
    )
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [r["mode"] for r in data["rows"]] == ["fp32", "bf16", "fp16"]
    assert data["rows"][1]["status"] == "ok" and data["rows"][2]["status"] == "skipped"
    assert "peak RSS" in data["memory_source"] and "fresh process" not in data["memory_source"]  # --no-isolate


def test_bench_table(capsys):
    assert (
        main(
            [
                "bench",
                "--task",
                "tiny",
                "--device",
                "cpu",
                "--precisions",
                "bf16",
                "--steps",
                "3",
                "--repeats",
                "1",
                "--no-isolate",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "samples/s" in out and "bf16" in out and "recommended:" in out and "tf32" not in out


def test_inspect_json_and_table(capsys):
    assert main(["inspect", "--task", "tiny", "--device", "cpu", "--precision", "bf16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert data["loss_dtype"] == "float32"
    assert {r["name"]: r["output_dtypes"] for r in data["rows"]}["fc1"] == ["bfloat16"]
    assert main(["inspect", "--task", "tiny", "--device", "cpu", "--precision", "bf16"]) == 0
    assert "kept in float32 by autocast: task.loss" in capsys.readouterr().out


def test_bad_input_is_one_line_and_exit_2(capsys):
    assert main(["bench", "--device", "cpu", "--precisions", "fp9"]) == 2
    assert "--precisions" in capsys.readouterr().err
    assert main(["bench", "--device", "cpu", "--optimizers", "adamw,adamw9bit"]) == 2
    assert "--optimizers" in capsys.readouterr().err
    assert main(["inspect", "--device", "cpu", "--precision", "fp16"]) == 2  # fp16 is a GPU mode
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "fp16" in err


def test_bench_rows_of_the_new_modes_and_optimizers(capsys, monkeypatch):
    import pytest

    pytest.importorskip("torchao")
    pytest.importorskip("bitsandbytes")
    monkeypatch.setenv("AMP_FP8_EMULATE", "1")
    flags = ["--task", "recommender", "-o", "d_model=32", "-o", "layers=1", "-o", "heads=2", "--device", "cpu"]
    flags += ["--precisions", "fp8,bf16-pure", "--optimizers", "adamw,adamw8bit", "--fp8-recipe", "rowwise"]
    assert main(["bench", *flags, "--steps", "2", "--repeats", "1", "--no-isolate", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["rows"]
    assert [(r["mode"], r["optimizer"] or "adamw") for r in rows] == [
        (mode, optimizer) for mode in ("fp32", "fp8", "bf16-pure") for optimizer in ("adamw", "adamw8bit")
    ]
    assert all(r["status"] == "ok" and r["why"] for r in rows)
    assert "rowwise" in rows[2]["compute_dtype"] and "emulated: speed not meaningful" in rows[2]["why"]
