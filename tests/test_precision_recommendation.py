"""The recommendation of `bench` and the Compare dialog (one rule, core.lab.precision_sweep): a lower precision
is recommended only when its speedup holds up beyond timing noise, and against the device's own note (bf16
emulated on this CPU) only from a measurement that is not noisy."""

from __future__ import annotations

from core.lab.precision_results import SweepRow, compare_to_fp32, holds_up, noise_note, recommended_row

BATCH = 64


def row(mode: str, windows: list[float], loss: float = 1.0) -> SweepRow:
    step_ms = sorted(windows)[len(windows) // 2]
    return SweepRow(
        mode=mode,
        status="ok",
        step_ms=step_ms,
        step_ms_windows=list(windows),
        samples_per_second=BATCH * 1000 / step_ms,
        loss=loss,
    )


def sweep(*rows: SweepRow) -> list[SweepRow]:
    compare_to_fp32(list(rows))
    return list(rows)


def test_a_speedup_measured_on_a_busy_device_is_not_recommended():
    # fp32 had one window slowed 20x by another process; bf16 then "measures" 12.98x
    fp32, bf16 = row("fp32", [2.6, 33.75, 36.0]), row("bf16", [2.5, 2.6, 2.7])
    best, why = recommended_row(sweep(fp32, bf16))
    assert best is fp32
    assert "bf16 measured 12.98x fp32's samples/s" in why and "noisy" in why and "idle device" in why
    assert noise_note(fp32).startswith("noisy, windows took 2.60-36.00 ms/step")
    assert noise_note(bf16) == ""


def test_a_speedup_that_holds_up_is_recommended():
    fp32, bf16 = row("fp32", [10.0, 10.2, 10.4]), row("bf16", [5.0, 5.1, 5.2], loss=1.01)
    best, why = recommended_row(sweep(fp32, bf16))
    assert best is bf16 and why.startswith("bf16: 2.00x fp32's samples/s")
    assert holds_up(bf16, fp32)


def test_overlapping_windows_do_not_hold_up_even_with_a_faster_median():
    fp32, bf16 = row("fp32", [10.0, 10.5, 11.0]), row("bf16", [8.0, 8.5, 10.5])
    assert not holds_up(bf16, fp32)
    best, why = recommended_row(sweep(fp32, bf16))
    assert best is fp32 and "overlap" in why


def test_the_devices_own_note_needs_a_quiet_measurement():
    note = "bf16 emulated (no AMX or avx512_bf16): expect it slower than fp32"
    quiet = sweep(row("fp32", [10.0, 10.1, 10.2]), row("bf16", [5.0, 5.1, 5.2]))
    assert recommended_row(quiet, {"bf16": note})[0].mode == "bf16"  # measured quietly: the measurement wins
    # bf16's own windows spread 1.8x: on a device that expects it slower, not enough to recommend it
    noisy = sweep(row("fp32", [10.0, 10.1, 10.2]), row("bf16", [3.0, 4.0, 5.4]))
    best, why = recommended_row(noisy, {"bf16": note})
    assert best.mode == "fp32" and "the device says: bf16 emulated" in why and why.count("slower") == 1
    assert recommended_row(noisy)[0].mode == "bf16"  # without the note, holding up is enough


def test_a_mode_whose_loss_drifts_is_never_recommended():
    fp32, fp16 = row("fp32", [10.0, 10.1, 10.2]), row("fp16", [3.0, 3.1, 3.2], loss=2.0)
    best, why = recommended_row(sweep(fp32, fp16))
    assert best is fp32 and why.startswith("no lower-precision mode was faster")
