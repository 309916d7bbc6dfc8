"""How the CLI writes numbers and tables: readable units, and tables that fit the terminal (or 100 columns).

Numbers: counts as '1.05 M', exact integers with thousands separators, bytes as '12.3 MiB'; never
'1.04858e+06'. Tables: rich tables sized to the terminal (COLUMNS is respected); piped or redirected output
is laid out for 100 columns, so logs and files read well. Sentences (reasons, notes) go under a table, not
into a narrow cell.
"""

from __future__ import annotations

import math
import os
import sys

PIPED_WIDTH = 100  # the layout width when stdout is not a terminal and COLUMNS is not set


def count(value: float | None) -> str:
    """1234 -> '1,234'; 1048576 -> '1.05 M'; 2.5e9 -> '2.50 G'; '-' when unknown."""
    if value is None or not math.isfinite(value):
        return "-"
    magnitude = abs(value)
    for unit, scale in (("G", 1e9), ("M", 1e6)):
        if magnitude >= scale:
            return f"{value / scale:.3g} {unit}" if magnitude < 100 * scale else f"{value / scale:,.0f} {unit}"
    if float(value).is_integer() or magnitude >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def exact(value: int | None) -> str:
    """An exact integer with thousands separators: 1048576 -> '1,048,576'."""
    return "-" if value is None else f"{value:,}"


def size(value: float | None) -> str:
    """Bytes in binary units: '512 B', '12.3 KiB', '312 MiB', '1.25 GiB'; '-' when unknown or zero."""
    if not value:
        return "-"
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale:
            scaled = value / scale
            return f"{scaled:.3g} {unit}" if scaled < 100 else f"{scaled:,.0f} {unit}"
    return f"{value:.0f} B"


def number(value: float | None, spec: str = ".4g", suffix: str = "") -> str:
    """A float in `spec`, '-' when missing or not finite (a NaN loss prints as 'nan')."""
    if value is None:
        return "-"
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    return f"{value:{spec}}{suffix}"


def setting(value) -> str:
    """A default or limit as a user types it: 65536 -> '65,536', 0.003 -> '0.003', 'full' -> 'full'."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:g}" if abs(value) < 1e6 else f"{value:,.0f}"


def console(stderr: bool = False):
    """A rich Console for stdout (or stderr) that fits the terminal, COLUMNS, or 100 columns when piped."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None
    if not stream.isatty() and not os.environ.get("COLUMNS", "").isdigit():
        width = PIPED_WIDTH
    return Console(file=stream, width=width, highlight=False, soft_wrap=False)


def table(title: str | None = None, **kwargs):
    """A compact rich table: a header line, no boxes between cells (readable when copied into a log)."""
    from rich import box
    from rich.table import Table

    kwargs.setdefault("box", box.SIMPLE_HEAD)
    kwargs.setdefault("pad_edge", False)
    kwargs.setdefault("title_justify", "left")
    return Table(title=title, **kwargs)


def duration(seconds) -> str:
    """'0.1 s', '12:05' or '1:02:03' for a wall time; '-' when unknown."""
    if not isinstance(seconds, (int, float)):
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
