"""A table of thousands of rows (`runs list`) laid out as format.table(show_edge=False) would lay it out (the same text
down to 60 columns: tests/test_cli_tables.py) at a fraction of rich's cost per row. Beyond rich: a column may be
`whole` (never wrapped or cut: a run's name) and may give way (`drop`, lowest first): left out of a table too wide
before any word is broken; `left_out(width)` names them.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.cells import cell_len

from core.text import printable


@dataclass
class _Column:
    name: str
    justify: str = "left"
    no_wrap: bool = False
    min_width: int = 1
    whole: bool = False  # never wrapped, folded or cut
    drop: int | None = None  # the order it gives way in when the table is too wide (lowest first; None: never)


class LongTable:
    """add_column and add_row as on a rich Table (plus `whole` and `drop`); print(console) writes it."""

    def __init__(self) -> None:
        self.columns: list[_Column] = []
        self.rows: list[tuple[str, ...]] = []

    def add_column(
        self,
        name: str,
        justify: str = "left",
        no_wrap: bool = False,
        min_width: int | None = None,
        overflow: str = "fold",
        whole: bool = False,
        drop: int | None = None,
    ) -> None:
        self.columns.append(_Column(printable(name), justify, no_wrap or whole, max(1, min_width or 1), whole, drop))

    def add_row(self, *texts: str) -> None:
        try:  # text from run files: never control sequences (one check for a row of plain text)
            plain = "".join(texts).isprintable()
        except TypeError:
            plain = False
        self.rows.append(texts if plain else tuple(printable(text) for text in texts))

    def _by_column(self) -> list[tuple[str, ...]]:
        return list(zip(*self.rows)) if self.rows else [() for _ in self.columns]

    def _natural(self) -> list[int]:
        """Each column's width unwrapped: its widest cell (or header, or min_width)."""
        return [max(cell_len(c.name), _widest(texts), c.min_width) for c, texts in zip(self.columns, self._by_column())]

    def _narrowest(self, natural: list[int]) -> list[int]:
        """Each column's width wrapped at spaces, no word broken: as wide as its longest word (no_wrap: natural)."""
        return [
            n if c.no_wrap else max(cell_len(c.name), _longest_word(texts), c.min_width)
            for c, texts, n in zip(self.columns, self._by_column(), natural)
        ]

    def kept(self, width: int) -> list[int]:
        """The columns shown at `width`: all when they fit with the wrappable ones wrapped at spaces, else
        without the columns that give way (lowest `drop` first), as few left out as fit."""
        kept = list(range(len(self.columns)))
        droppable = sorted((c.drop, i) for i, c in enumerate(self.columns) if c.drop is not None)
        if not droppable or sum(natural := self._natural()) + 2 * (len(kept) - 1) <= width:
            return kept  # the common case: no word counted
        words = self._narrowest(natural)
        while droppable and sum(words[i] for i in kept) + 2 * (len(kept) - 1) > width:
            kept.remove(droppable.pop(0)[1])
        return kept

    def left_out(self, width: int) -> list[str]:
        """The names of the columns not shown at `width`."""
        kept = set(self.kept(width))
        return [c.name for i, c in enumerate(self.columns) if i not in kept]

    def widths(self, width: int) -> list[int]:
        """Each column's width as rich lays it out: its natural width; when that is wider than `width`, the widest
        wrappable columns give way first, down to the next widest (rich's Table._collapse_widths), then, as a last
        resort, every column evenly (none below its min_width). A table with `whole` or `drop` columns is wrapped
        at spaces where that fits, no word broken; one with a `whole` column may stay wider than `width`."""
        natural = self._natural()
        pads = [1] * (len(natural) - 1) + [0]  # each cell's right padding; none at the table's edge
        padded = [n + p for n, p in zip(natural, pads)]
        room = width - (len(padded) - 1)  # the column separators
        if sum(padded) <= room:
            return natural
        from rich._ratio import ratio_reduce

        padded = _collapse(padded, [not c.no_wrap for c in self.columns], room)
        if any(c.whole or c.drop is not None for c in self.columns):
            words = [w + p for w, p in zip(self._narrowest(natural), pads)]
            if sum(words) <= room:
                padded = _settle([max(w, f) for w, f in zip(padded, words)], words, room)
        if sum(padded) > room and not any(c.whole for c in self.columns):
            padded = ratio_reduce(sum(padded) - room, [1] * len(padded), padded, padded)
        return [max(w - p, c.min_width) for w, p, c in zip(padded, pads, self.columns)]

    def lines(self, width: int) -> list[str]:
        """The header, rule and body lines of the columns kept at `width`; cut there unless a `whole` column is kept."""
        kept = self.kept(width)
        if len(kept) < len(self.columns):
            shown = LongTable()
            shown.columns = [self.columns[i] for i in kept]
            shown.rows = [tuple(row[i] for i in kept) for row in self.rows]
            return shown.lines(width)
        widths = self.widths(width)
        rights = [c.justify == "right" for c in self.columns]
        # one %-format per line of plain ASCII; a line with other text is laid out cell by cell
        template = "  ".join(f"%{'' if r else '-'}{w}s" for w, r in zip(widths, rights))

        def line(texts) -> str:
            if "".join(texts).isascii():
                return template % tuple(texts)
            pads = (" " * max(0, w - cell_len(text)) for text, w in zip(texts, widths))
            return "  ".join(pad + t if r else t + pad for t, pad, r in zip(texts, pads, rights))

        lines = [line([c.name for c in self.columns]), "─" * (sum(widths) + 2 * (len(widths) - 1))]
        columns = self._by_column()
        # each cell's lines in the columns with a cell wider than the column (texts repeat: a cache per column)
        wrapped = {
            c: _pieces(column, w, self.columns[c].no_wrap)
            for c, (column, w) in enumerate(zip(columns, widths))
            if _widest(column) > w
        }
        if not wrapped and all("".join(column).isascii() for column in columns):
            lines += [template % row for row in self.rows]
        else:  # every row's first line, then the further lines of the rows that wrap: only their wrapped cells
            firsts = [[p[0] for p in wrapped[c]] if c in wrapped else column for c, column in enumerate(columns)]
            heights = [max(h) for h in zip(*[map(len, pieces) for pieces in wrapped.values()])] or [1] * len(self.rows)
            for i, first in enumerate(zip(*firsts)):
                lines.append(line(first))
                for k in range(1, heights[i]):
                    texts = [""] * len(widths)
                    for c, pieces in wrapped.items():
                        texts[c] = pieces[i][k] if k < len(pieces[i]) else ""
                    lines.append(line(texts))
        if len(lines[1]) <= width or any(c.whole for c in self.columns):
            return lines
        return [_crop(line, width) for line in lines]  # wider than the console: cut, as rich does

    def print(self, console) -> None:
        header, *rest = self.lines(console.width)
        console.print(
            header, style="table.header", markup=False, highlight=False, no_wrap=True, overflow="ignore", crop=False
        )
        console.file.write("".join(line + "\n" for line in rest))
        console.file.flush()


def _crop(line: str, width: int) -> str:
    """The first `width` cells of `line`, as rich's crop cuts it."""
    if line.isascii():
        return line[:width]
    return line[: _cut(line, width)] if cell_len(line) > width else line


def _cells(text: str) -> int:
    return len(text) if text.isascii() else cell_len(text)


def _widest(texts) -> int:
    """The widest of `texts` in cells (plain ASCII: its length)."""
    if not texts:
        return 0
    return max(map(len if "".join(texts).isascii() else cell_len, texts))


def _longest_word(texts) -> int:
    """The widest word (split at spaces) of `texts`, in cells."""
    return max((_cells(word) for text in texts for word in text.split(" ")), default=0)


def _pieces(column: tuple[str, ...], width: int, no_wrap: bool) -> list[tuple[str, ...]]:
    """Each cell's lines in a column `width` cells wide: wrapped (cut when `no_wrap`)."""
    cache: dict[str, tuple[str, ...]] = {}
    for text in column:
        if text not in cache:
            fits = _cells(text) <= width
            cache[text] = (text,) if fits else (text[: _cut(text, width)],) if no_wrap else tuple(_wrap(text, width))
    return [cache[text] for text in column]


def _wrap(text: str, width: int) -> list[str]:
    """`text` in lines of at most `width` cells: broken at spaces, a longer word folded."""
    cells = len if text.isascii() else cell_len
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        while cells(word) > width:
            if line:
                lines.append(line)
                line = ""
            cut = _cut(word, width)
            lines.append(word[:cut])
            word = word[cut:]
        if not line:
            line = word
        elif cells(line) + 1 + cells(word) <= width:
            line = f"{line} {word}"
        else:
            lines.append(line)
            line = word
    if line or not lines:
        lines.append(line)
    return lines


def _cut(word: str, width: int) -> int:
    """How many characters of `word` fit in `width` cells (at least one)."""
    if word.isascii():
        return max(1, min(width, len(word)))
    used = 0
    for i, char in enumerate(word):
        used += cell_len(char)
        if used > width:
            return max(1, i)
    return len(word)


def _settle(widths: list[int], floors: list[int], room: int) -> list[int]:
    """`widths` narrowed towards `floors`, the widest above its floor first, until they fit `room`."""
    for _ in range(sum(widths) - room):
        above = [i for i, (w, f) in enumerate(zip(widths, floors)) if w > f]
        if not above:
            break
        widths[max(above, key=lambda k: widths[k])] -= 1
    return widths


def _collapse(widths: list[int], wrappable: list[bool], room: int) -> list[int]:
    """rich's Table._collapse_widths: the widest wrappable columns narrowed together, down to the next
    widest, until the widths fit `room` (or the wrappable ones are all as wide)."""
    from rich._ratio import ratio_reduce

    while any(wrappable) and (excess := sum(widths) - room) > 0:
        widest = max(w for w, ok in zip(widths, wrappable) if ok)
        second = max(w if ok and w != widest else 0 for w, ok in zip(widths, wrappable))
        if widest == second:
            break
        ratios = [1 if ok and w == widest else 0 for w, ok in zip(widths, wrappable)]
        widths = ratio_reduce(excess, ratios, [min(excess, widest - second)] * len(widths), widths)
    return widths
