"""A batch's columns read for scoring, one bad value costing its row, never the batch: `Checks` holds each
row's first problem; `numbers`, `ids` and `as_text` read a column and mark what is empty or not a number.
"""

from __future__ import annotations

from core.errors import DataError
from core.text import printable

SHOWN = 40  # characters of a bad value shown


def shown_value(value) -> str:
    """A value as a message shows it: quoted (repr escapes control characters), cut to SHOWN characters."""
    text = str(value)
    return repr(text if len(text) <= SHOWN else text[:SHOWN] + "...")


def shown_names(names: list[str]) -> str:
    """Column names as a message shows them: the first 12, then a count, at most 160 characters."""
    text = ", ".join(printable(n) for n in names[:12]) + (f" (+{len(names) - 12} more)" if len(names) > 12 else "")
    return text if len(text) <= 160 else text[:157] + "..."


class Checks:
    """A batch's per-column problems: (column, bad mask, how to describe row i), the first per row wins."""

    def __init__(self, n: int):
        import numpy as np

        self.n = n
        self.items: list = []
        self.bad = np.zeros(n, dtype=bool)

    def add(self, mask, describe) -> None:
        if mask is not None and mask.any():
            self.items.append((mask, describe))
            self.bad |= mask

    def message(self, i: int) -> str:
        for mask, describe in self.items:
            if mask[i]:
                return describe(i)
        return ""


def numbers(values, name: str, checks: Checks, dtype="float32", dates: bool = False):
    """A column as numbers (`dtype`), marking empty and non-numeric values in `checks`; with `dates`, an ISO
    8601 date-time reads as its seconds since 1970 (UTC when it names no zone)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    from core.data import formats

    t = values.type
    text = pa.types.is_string(t) or pa.types.is_large_string(t)
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        out = pc.cast(pc.cast(values, pa.timestamp("s")), pa.int64()).to_numpy(zero_copy_only=False)
        out = np.asarray(out, dtype=np.float64)
        checks.add(values.is_null().to_numpy(zero_copy_only=False), lambda i: f"{name} is empty")
    elif text or pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t) or pa.types.is_decimal(t):
        try:  # numbers (and text holding only numbers): one cast (a NaN or inf is caught as not finite below)
            out = pc.cast(values, pa.float64()).to_numpy(zero_copy_only=False)
            if values.null_count:  # a Parquet null
                missing = values.is_null().to_numpy(zero_copy_only=False)
                out = np.where(missing, 0.0, out)
                checks.add(missing, lambda i: f"{name} is empty")
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # some text is not a number: find which
            if not text:
                raise
            empty = pc.fill_null(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(values)), 0), True)
            empty = empty.to_numpy(zero_copy_only=False)
            ok = np.array(
                pc.fill_null(pc.match_substring_regex(values, formats.NUMBER), False).to_numpy(zero_copy_only=False)
            )
            cleaned = pc.if_else(pa.array(ok), pc.utf8_trim_whitespace(values), "0")
            out = np.array(pc.cast(cleaned, pa.float64()).to_numpy(zero_copy_only=False))  # writable
            if dates:
                rest = np.flatnonzero(~ok & ~empty)
                seconds, parsed = _date_times(values.take(pa.array(rest)))
                out[rest[parsed]] = seconds[parsed]
                ok[rest[parsed]] = True
            checks.add(empty, lambda i: f"{name} is empty")
            checks.add(
                ~ok & ~empty,
                lambda i: (
                    f"{name} {shown_value(values[i].as_py())} is not a number" + (" or a date-time" if dates else "")
                ),
            )
    else:
        raise DataError(f"column {name!r} holds {t} values, not numbers")
    with np.errstate(all="ignore"):
        cast = out.astype(dtype)
    if np.issubdtype(np.dtype(dtype), np.floating):
        checks.add(
            ~np.isfinite(cast) & ~checks.bad,
            lambda i: f"{name} {shown_value(values[i].as_py())} is not a finite {dtype} number",
        )
    return cast


def feature_matrix(batch, columns: list[str], checks: Checks):
    """(rows, len(columns)) float32 of a batch's feature columns, each read by `numbers`."""
    import numpy as np

    return np.stack([numbers(batch.column(c), printable(c), checks) for c in columns], axis=1)


def _date_times(values):
    """(seconds since 1970, parsed) of strings holding ISO 8601 date-times (UTC unless they say)."""
    import datetime as dt

    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    text = pc.utf8_trim_whitespace(values)
    try:
        stamps = pc.cast(pc.cast(text, pa.timestamp("us")), pa.int64()).to_numpy(zero_copy_only=False)
        return stamps.astype(np.float64) / 1e6, np.ones(len(values), dtype=bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    seconds, parsed = np.zeros(len(values)), np.zeros(len(values), dtype=bool)
    for i, value in enumerate(text.to_pylist()):
        try:
            when = dt.datetime.fromisoformat(value)
        except (TypeError, ValueError):
            continue
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        seconds[i], parsed[i] = when.timestamp(), True
    return seconds, parsed


def ids(values, name: str, checks: Checks):
    """An id column as it is, marking empty values in `checks`."""
    import pyarrow as pa
    import pyarrow.compute as pc

    missing = values.is_null().to_numpy(zero_copy_only=False)
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        # a null (Parquet) compares as null: filled, or numpy's | meets None
        blank = pc.fill_null(pc.equal(pc.utf8_length(pc.utf8_trim_whitespace(values)), 0), True)
        missing = missing | blank.to_numpy(zero_copy_only=False)
    checks.add(missing, lambda i: f"{name} is empty")
    return values


def as_text(values, name: str, path):
    """A column of another type (a Parquet number, date...) as strings; DataError without a text form."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        return pc.cast(values, pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise DataError(f"{path}: column {name!r} holds {values.type} values, not text") from None
