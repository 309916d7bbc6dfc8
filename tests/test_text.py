"""core.text: one convention for bytes, counts, times and an error's first line, used by every layer."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import text


def test_bytes_are_binary_units_with_three_figures():
    assert text.size(512) == "512 B" and text.size(1536) == "1.5 KiB" and text.size(12.3 * 2**20) == "12.3 MiB"
    assert text.size(312 * 2**20) == "312 MiB" and text.size(1.25 * 2**30) == "1.25 GiB"
    assert text.size(2 * 2**30) == "2 GiB" and text.size(3.9 * 2**40) == "3.9 TiB" and text.size(2**60) == "1,024 PiB"
    assert text.size(None) == "-" and text.size(0) == "-"


def test_a_size_just_short_of_the_next_unit_reads_in_it():
    """Three figures at most: '0.986 MiB', never '1,010 KiB' (nor 1.01e+03 KiB)."""
    assert text.size(1010 * 2**10) == "0.986 MiB" and text.size(1034 * 2**10) == "1.01 MiB"
    assert text.size(2**20 - 512) == "1 MiB" and text.size(999) == "999 B" and text.size(1000) == "0.977 KiB"
    assert text.size(1020 * 2**30) == "0.996 TiB"


def test_counts_and_wall_times():
    assert text.count(1_048_576) == "1.05 M" and text.count(12_345) == "12,345" and text.count(2.5e9) == "2.5 G"
    assert text.count(None) == "-" and text.count(float("inf")) == "-"
    assert text.duration(0.14) == "0.1 s" and text.duration(725) == "12:05" and text.duration(3723) == "1:02:03"
    assert text.duration(None) == "-" and text.duration("soon") == "-" and text.duration(float("nan")) == "-"


def test_elapsed_times_are_short():
    assert text.elapsed(3725) == "1h02m" and text.elapsed(59.6) == "1m00s" and text.elapsed(7) == "7s"
    assert text.elapsed(-3) == "0s"


def test_an_error_reads_as_its_first_non_blank_line():
    assert text.first_line(ValueError("\n  bad value  \nsecond line")) == "bad value"
    assert text.first_line(KeyError()) == "KeyError"  # no message: the type's name
    assert text.first_line("\n\nCUDA out of memory\nTried to allocate") == "CUDA out of memory"
    assert text.first_line("") == "" and text.first_line(None) == ""


def test_the_engine_the_lab_and_the_cli_write_bytes_alike():
    from core.cli import format as fmt
    from core.devices import DeviceInfo
    from core.lab.batch_finder import FakeProbe
    from core.runs.export import ExportResult

    value = 7 * 2**30 + 2**29  # 7.5 GiB
    assert fmt.size(value) == text.size(value) == "7.5 GiB"
    assert "a fake device of 7.5 GiB" in FakeProbe(value, 1000).source
    assert DeviceInfo("cuda:0", "cuda", "GPU", memory_total=value).summary() == "GPU, 7.5 GiB"
    result = ExportResult(
        "program", Path("out"), [], "tiny", 10, "fp16", value, 0.0, 1e-5, 4, fp32_size_bytes=2 * value, dtype_diff=0.0
    )
    assert "7.5 GiB vs 15 GiB" in result.summary()


def test_a_task_too_large_for_the_host_names_its_sizes_in_the_same_units(monkeypatch):
    import core.tasks.base as base
    from core.errors import ConfigError
    from core.tasks import create_task

    monkeypatch.setattr(base, "free_bytes", lambda device: 2 * 2**30)
    with pytest.raises(ConfigError, match=r"but cpu has 2 GiB free"):
        create_task("recommender", {"interactions": 1_000_000_000}).load_data("", 0)
