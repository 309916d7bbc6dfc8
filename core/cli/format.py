"""How the CLI writes numbers and tables: readable units (core.text's helpers), and rich tables that fit the terminal,
or 100 columns when output is piped.
"""

from __future__ import annotations

import os
import sys

from core.text import LiveLine, count, duration, exact, number, printable, setting, size  # as fmt.count etc.

__all__ = ["PIPED_WIDTH", "LiveLine", "console", "count", "duration", "exact", "number", "setting", "size", "table"]

PIPED_WIDTH = 100  # the layout width when stdout is not a terminal and COLUMNS is not set


def console(stderr: bool = False):
    """A rich Console for stdout (or stderr) that fits the terminal, COLUMNS, or 100 columns when piped."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = PIPED_WIDTH if not stream.isatty() and not os.environ.get("COLUMNS", "").isdigit() else None
    # No markup or emoji codes: a run's task or note read from its files prints as written ("[/]" is no tag).
    return Console(file=stream, width=width, highlight=False, soft_wrap=False, markup=False, emoji=False)


def table(title: str | None = None, **kwargs):
    """A compact rich table (a header line, no boxes); text cells and headers pass through core.text.printable."""
    from rich import box
    from rich.table import Table

    class PrintableTable(Table):
        def add_column(self, header="", *args, **kw):
            super().add_column(
                printable(header, keep_newlines=True) if isinstance(header, str) else header, *args, **kw
            )

        def add_row(self, *cells, **kw):
            super().add_row(*(printable(c, keep_newlines=True) if isinstance(c, str) else c for c in cells), **kw)

    kwargs = {"box": box.SIMPLE_HEAD, "pad_edge": False, "title_justify": "left", **kwargs}
    return PrintableTable(title=printable(title) if isinstance(title, str) else title, **kwargs)
