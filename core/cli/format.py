"""How the CLI writes numbers and tables: readable units, and tables that fit the terminal (or 100 columns).

Numbers: counts as '1.05 M', exact integers with thousands separators, bytes as '12.3 MiB' (core.text, shared
with the engine's messages and the window); never '1.04858e+06'. Tables: rich tables sized to the terminal
(COLUMNS is respected); piped or redirected output is laid out for 100 columns, so logs and files read well.
Sentences (reasons, notes) go under a table, not into a narrow cell.
"""

from __future__ import annotations

import os
import sys

from core.text import count, duration, exact, number, printable, setting, size  # core.text's, as fmt.count etc.

__all__ = ["PIPED_WIDTH", "console", "count", "duration", "exact", "number", "plain_width", "setting", "size", "table"]

PIPED_WIDTH = 100  # the layout width when stdout is not a terminal and COLUMNS is not set


def plain_width(stream=None) -> int | None:
    """The width a console on `stream` (stdout) would lay text out for when it would show no styles: not a
    terminal, and neither FORCE_COLOR nor TTY_COMPATIBLE=1 asks rich for them (COLUMNS, else PIPED_WIDTH).
    None when it would: then only a console writes it right. Plain output needs no rich (~50 ms to import)."""
    stream = sys.stdout if stream is None else stream
    if os.name == "nt" or os.environ.get("FORCE_COLOR") or os.environ.get("TTY_COMPATIBLE") == "1":
        return None
    try:
        if stream.isatty():
            return None
    except (AttributeError, ValueError):  # no isatty, or closed: rich calls that no terminal too
        pass
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() else PIPED_WIDTH


def console(stderr: bool = False):
    """A rich Console for stdout (or stderr) that fits the terminal, COLUMNS, or 100 columns when piped."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None
    if not stream.isatty() and not os.environ.get("COLUMNS", "").isdigit():
        width = PIPED_WIDTH
    # No markup or emoji codes: a run's task or note read from its files prints as written ("[/]" is no tag).
    return Console(file=stream, width=width, highlight=False, soft_wrap=False, markup=False, emoji=False)


def table(title: str | None = None, **kwargs):
    """A compact rich table: a header line, no boxes between cells (readable when copied into a log). Text
    cells and headers pass through core.text.printable (they often come from a run's files): an escape
    sequence in them shows as `\\x1b`, never reaches the terminal."""
    from rich import box
    from rich.table import Table

    class PrintableTable(Table):
        def add_column(self, header="", *args, **kw):
            super().add_column(
                printable(header, keep_newlines=True) if isinstance(header, str) else header, *args, **kw
            )

        def add_row(self, *cells, **kw):
            super().add_row(*(printable(c, keep_newlines=True) if isinstance(c, str) else c for c in cells), **kw)

    kwargs.setdefault("box", box.SIMPLE_HEAD)
    kwargs.setdefault("pad_edge", False)
    kwargs.setdefault("title_justify", "left")
    return PrintableTable(title=printable(title) if isinstance(title, str) else title, **kwargs)
