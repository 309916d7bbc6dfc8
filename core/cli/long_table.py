"""A table of thousands of rows (`runs list`), laid out as format.table lays out a compact rich table with no
edges: the columns two spaces apart, each as wide as its widest cell, a bold header and a rule under it; when
that is wider than the console, the widest wrappable columns give way first and their cells wrap onto more
lines (at spaces, long words folded). rich takes ~2 ms a row for this; here a row costs a few microseconds, so
10,000 runs print in a fraction of a second.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.cells import cell_len


@dataclass
class _Column:
    name: str
    justify: str = "left"
    no_wrap: bool = False
    min_width: int = 1


class LongTable:
    """add_column(name, justify=, no_wrap=, min_width=, overflow=) and add_row(*texts) as on a rich Table;
    print(console) writes it."""

    def __init__(self):
        self.columns: list[_Column] = []
        self.rows: list[tuple[str, ...]] = []

    def add_column(self, name: str, justify: str = "left", no_wrap: bool = False, min_width: int | None = None,
                   overflow: str = "fold") -> None:
        self.columns.append(_Column(name, justify, no_wrap, max(1, min_width or 1)))

    def add_row(self, *texts: str) -> None:
        self.rows.append(tuple(texts))

    def widths(self, width: int) -> list[int]:
        """Each column's width: its widest cell, then the widest wrappable ones narrowed until the table fits
        `width` (or none can give more)."""
        widths = [cell_len(c.name) for c in self.columns]
        for row in self.rows:
            for i, text in enumerate(row):
                widths[i] = max(widths[i], len(text) if text.isascii() else cell_len(text))
        excess = sum(widths) + 2 * (len(widths) - 1) - width
        while excess > 0:
            shrinkable = [i for i, c in enumerate(self.columns) if not c.no_wrap and widths[i] > c.min_width]
            if not shrinkable:
                break
            widest = max(shrinkable, key=lambda i: widths[i])
            widths[widest] -= 1
            excess -= 1
        return widths

    def lines(self, width: int) -> tuple[str, str, list[str]]:
        """(the header, the rule, the body's lines)."""
        widths = self.widths(width)
        rights = [c.justify == "right" for c in self.columns]
        # one str.format per line of plain text (the common case); other lines padded by their cell width
        template = "  ".join(f"{{:{'>' if r else '<'}{w}}}" for w, r in zip(widths, rights))
        header = self._line([c.name for c in self.columns], widths, rights, template)
        rule = "─" * (sum(widths) + 2 * (len(widths) - 1))
        body: list[str] = []
        for row in self.rows:
            ascii_row = "".join(row).isascii()
            lengths = [len(t) for t in row] if ascii_row else [cell_len(t) for t in row]
            if all(n <= w for n, w in zip(lengths, widths)):
                body.append(template.format(*row) if ascii_row else self._line(row, widths, rights, template))
                continue
            cells = [_wrap(t, w) if n > w else [t] for t, n, w in zip(row, lengths, widths)]
            for k in range(max(map(len, cells))):
                body.append(self._line([c[k] if k < len(c) else "" for c in cells], widths, rights, template))
        return header, rule, body

    @staticmethod
    def _line(texts, widths, rights, template) -> str:
        if "".join(texts).isascii():
            return template.format(*texts)
        parts = []
        for text, w, right in zip(texts, widths, rights):
            pad = " " * max(0, w - cell_len(text))
            parts.append(pad + text if right else text + pad)
        return "  ".join(parts)

    def print(self, console) -> None:
        header, rule, body = self.lines(console.width)
        console.print(header, style="table.header", markup=False, highlight=False)
        console.print(rule, markup=False, highlight=False)
        console.file.write("".join(line + "\n" for line in body))
        console.file.flush()


def _wrap(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` cells: broken at spaces, a longer word folded."""
    if text.isascii():
        return _wrap_ascii(text, width)
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        while cell_len(word) > width:
            if line:
                lines.append(line)
                line = ""
            cut = _cut(word, width)
            lines.append(word[:cut])
            word = word[cut:]
        candidate = f"{line} {word}" if line else word
        if cell_len(candidate) <= width:
            line = candidate
        else:
            lines.append(line)
            line = word
    if line or not lines:
        lines.append(line)
    return lines


def _wrap_ascii(text: str, width: int) -> list[str]:
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        while len(word) > width:
            if line:
                lines.append(line)
                line = ""
            lines.append(word[:width])
            word = word[width:]
        if not line:
            line = word
        elif len(line) + 1 + len(word) <= width:
            line = f"{line} {word}"
        else:
            lines.append(line)
            line = word
    if line or not lines:
        lines.append(line)
    return lines


def _cut(word: str, width: int) -> int:
    """How many characters of `word` fit in `width` cells (at least one)."""
    used = 0
    for i, char in enumerate(word):
        used += cell_len(char)
        if used > width:
            return max(1, i)
    return len(word)
