"""A table of thousands of rows (`runs list`) laid out as format.table(show_edge=False) would lay it out, at a fraction
of rich's cost per row (the same text down to 60 columns: tests/test_cli_tables.py).

Beyond rich: a column may be `whole` (never wrapped or cut: a run's name) and may give way (`drop`, lowest first):
when the table is too wide, such columns are left out before any word would be broken; `left_out(width)` names them.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    """add_column(name, justify=, no_wrap=, min_width=, overflow=) and add_row(*texts) as on a rich Table;
    print(console) writes it."""

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

    def kept(self, width: int) -> list[int]:
        """The columns shown at `width`: all when they fit with the wrappable ones wrapped at spaces, else
        without the columns that give way (lowest `drop` first), as few left out as fit."""
        kept = list(range(len(self.columns)))
        droppable = sorted((c.drop, i) for i, c in enumerate(self.columns) if c.drop is not None)
        if not droppable:
            return kept
        natural, words = self._stats()
        if sum(natural) + 2 * (len(kept) - 1) <= width:  # the common case: no word counted
            return kept
        words = words()
        while droppable and sum(words[i] for i in kept) + 2 * (len(kept) - 1) > width:
            kept.remove(droppable.pop(0)[1])
        return kept

    def left_out(self, width: int) -> list[str]:
        """The names of the columns not shown at `width`."""
        kept = set(self.kept(width))
        return [c.name for i, c in enumerate(self.columns) if i not in kept]

    def _stats(self):
        """(each column's natural width, a function giving each one's narrowest: a wrappable column as wide as
        its longest word), header and min_width counted; for this table's rows."""
        by_column = self._by_column()
        natural = [max(cell_len(c.name), _widest(texts), c.min_width) for c, texts in zip(self.columns, by_column)]

        def words() -> list[int]:
            return [
                n if c.no_wrap else max(cell_len(c.name), _longest_word(texts), c.min_width)
                for c, texts, n in zip(self.columns, by_column, natural)
            ]

        return natural, words

    def widths(self, width: int) -> list[int]:
        """Each column's width as rich lays it out: its widest cell (or min_width); when that is wider than
        `width`, the widest wrappable columns give way first, down to the next widest (rich's
        Table._collapse_widths), then, as a last resort, every column evenly (none below its min_width)."""
        pads = [1] * (len(self.columns) - 1) + [0]  # each cell's right padding; none at the table's edge
        widths = [max(cell_len(c.name), _widest(column)) for c, column in zip(self.columns, self._by_column())]
        floors = [c.min_width + p for c, p in zip(self.columns, pads)]
        padded = [max(w + p, f) for w, p, f in zip(widths, pads, floors)]
        room = width - (len(padded) - 1)  # the column separators
        if sum(padded) > room:
            words = [
                max(cell_len(c.name), _longest_word(texts)) + p if not c.no_wrap else w
                for c, texts, p, w in zip(self.columns, self._by_column(), pads, padded)
            ]
            collapsed = _collapse(padded, [not c.no_wrap for c in self.columns], room)
            if any(c.whole or c.drop is not None for c in self.columns) and sum(words) <= room:
                collapsed = [max(w, f) for w, f in zip(collapsed, words)]  # wrapped at spaces, no word broken
                if sum(collapsed) > room:  # the floors took back room: narrow the others again, to their floors
                    collapsed = _settle(collapsed, words, room)
            padded = collapsed
            if sum(padded) > room and not any(c.whole for c in self.columns):  # else wider than the console
                padded = _ratio_reduce(sum(padded) - room, [1] * len(padded), padded, padded)
            padded = [max(w, f) for w, f in zip(padded, floors)]
        return [max(0, w - p) for w, p in zip(padded, pads)]

    def _by_column(self) -> list[tuple[str, ...]]:
        return list(zip(*self.rows)) if self.rows else [() for _ in self.columns]

    def lines(self, width: int) -> tuple[str, str, list[str], list[int]]:
        """(the header, the rule, the body's lines, the column widths) of the columns kept at `width`."""
        kept = self.kept(width)
        if len(kept) < len(self.columns):
            shown = LongTable()
            shown.columns = [self.columns[i] for i in kept]
            shown.rows = [tuple(row[i] for i in kept) for row in self.rows]
            return shown.lines(width)
        widths = self.widths(width)
        rights = [c.justify == "right" for c in self.columns]
        # one %-format per line of plain text; a column with a cell too wide is wrapped a column at a time, a row
        # with text that is not plain ASCII laid out cell by cell
        template = "  ".join(f"%{'' if r else '-'}{w}s" for w, r in zip(widths, rights))
        header = self._line([c.name for c in self.columns], widths, rights, template)
        rule = "─" * (sum(widths) + 2 * (len(widths) - 1))
        columns = self._by_column()
        wide: set[int] = set()  # the rows with a character wider than one cell, or no ASCII
        too_wide = []  # the columns with a cell wider than the column
        for c, (column, w) in enumerate(zip(columns, widths)):
            if not "".join(column).isascii():
                wide.update(i for i, t in enumerate(column) if not t.isascii())
            if _widest(column) > w:
                too_wide.append(c)
        line = template.__mod__
        if not too_wide and not wide:
            return header, rule, list(map(line, self.rows)), widths
        # a column at a time: each cell's lines (texts repeat: a cache per column); then every row's first line
        # in one pass, and the further lines of the rows that wrap, only their wrapped columns filled in
        pieces_of = [self._pieces(columns[c], widths[c], self.columns[c].no_wrap) for c in too_wide]
        firsts: list[Sequence[str]] = list(columns)
        for c, pieces in zip(too_wide, pieces_of):
            firsts[c] = [p[0] for p in pieces]
        heights = [max(h) for h in zip(*[map(len, pieces) for pieces in pieces_of])] if too_wide else []
        more = "  ".join(
            f"%{'' if rights[c] else '-'}{widths[c]}s" if c in too_wide else " " * widths[c] for c in range(len(widths))
        ).__mod__
        body: list[str] = []
        for i, first in enumerate(map(line, zip(*firsts))):
            height = heights[i] if too_wide else 1
            if i in wide:
                texts = [column[i] for column in firsts]
                body.append(self._line(texts, widths, rights, template))
                for k in range(1, height):
                    for c, pieces in zip(too_wide, pieces_of):
                        texts[c] = pieces[i][k] if k < len(pieces[i]) else ""
                    body.append(
                        self._line([t if c in too_wide else "" for c, t in enumerate(texts)], widths, rights, template)
                    )
                continue
            body.append(first)
            for k in range(1, height):
                body.append(more(tuple([p[i][k] if k < len(p[i]) else "" for p in pieces_of])))
        return header, rule, body, widths

    @staticmethod
    def _pieces(column: tuple[str, ...], width: int, no_wrap: bool) -> list[tuple[str, ...]]:
        """Each cell's lines in a column `width` cells wide: wrapped (cut when `no_wrap`)."""
        cache: dict[str, tuple[str, ...]] = {}
        out = []
        for text in column:
            pieces = cache.get(text)
            if pieces is None:
                pieces = cache[text] = (
                    (text,)
                    if _cells(text) <= width
                    else (text[: _cut(text, width)],)
                    if no_wrap
                    else tuple(_wrap(text, width))
                )
            out.append(pieces)
        return out

    @staticmethod
    def _line(texts, widths, rights, template) -> str:
        if "".join(texts).isascii():
            return template % tuple(texts)
        parts = []
        for text, w, right in zip(texts, widths, rights):
            pad = " " * max(0, w - cell_len(text))
            parts.append(pad + text if right else text + pad)
        return "  ".join(parts)

    def print(self, console) -> None:
        width = console.width
        header, rule, body, widths = self.lines(width)
        whole = any(self.columns[i].whole for i in self.kept(width))  # a line is never cut through such a column
        console.print(
            header,
            style="table.header",
            markup=False,
            highlight=False,
            no_wrap=True,
            overflow="ignore" if whole else "crop",
        )
        console.print(rule, markup=False, highlight=False, no_wrap=True, overflow="ignore" if whole else "crop")
        if not whole and sum(widths) + 2 * (len(widths) - 1) > width:  # wider than the console: cut, as rich does
            body = [_crop(line, width) for line in body]
        console.file.write("".join(line + "\n" for line in body))
        console.file.flush()

    def text(self, width: int) -> str:
        """What print() writes to a console of `width` columns that shows no styles (format.plain_width),
        without one."""
        header, rule, body, widths = self.lines(width)
        lines = [header, rule, *body]
        whole = any(self.columns[i].whole for i in self.kept(width))
        if not whole and sum(widths) + 2 * (len(widths) - 1) > width:
            lines = (
                [line[:width] for line in lines]
                if "".join(body).isascii() and header.isascii()
                else [_crop(line, width) for line in lines]
            )
            lines[1] = _crop(rule, width)
        return "\n".join(lines) + "\n"


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
    if "".join(texts).isascii():
        return max(map(len, texts))
    return max(map(cell_len, texts))


def _longest_word(texts) -> int:
    """The widest word (split at spaces) of `texts`, in cells."""
    return max((_cells(word) for text in texts for word in text.split(" ")), default=0)


def _settle(widths: list[int], floors: list[int], room: int) -> list[int]:
    """`widths` narrowed towards `floors`, the widest above its floor first, until they fit `room`."""
    widths = list(widths)
    excess = sum(widths) - room
    while excess > 0:
        above = [i for i, (w, f) in enumerate(zip(widths, floors)) if w > f]
        if not above:
            break
        i = max(above, key=lambda k: widths[k])
        widths[i] -= 1
        excess -= 1
    return widths


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


def _collapse(widths: list[int], wrappable: list[bool], room: int) -> list[int]:
    """rich's Table._collapse_widths: the widest wrappable columns narrowed together, down to the next
    widest, until the widths fit `room` (or the wrappable ones are all as wide)."""
    excess = sum(widths) - room
    while any(wrappable) and excess > 0:
        widest = max(w for w, ok in zip(widths, wrappable) if ok)
        second = max(w if ok and w != widest else 0 for w, ok in zip(widths, wrappable))
        ratios = [1 if ok and w == widest else 0 for w, ok in zip(widths, wrappable)]
        if not any(ratios) or widest == second:
            break
        widths = _ratio_reduce(excess, ratios, [min(excess, widest - second)] * len(widths), widths)
        excess = sum(widths) - room
    return widths


def _ratio_reduce(total: int, ratios: list[int], maximums: list[int], values: list[int]) -> list[int]:
    """rich's ratio_reduce: `total` taken from `values` in proportion to `ratios`, each at most its maximum."""
    ratios = [r if m else 0 for r, m in zip(ratios, maximums)]
    left, weight = total, sum(ratios)
    out = []
    for ratio, maximum, value in zip(ratios, maximums, values):
        if ratio and weight > 0:
            taken = min(maximum, round(ratio * left / weight))
            out.append(value - taken)
            left -= taken
            weight -= ratio
        else:
            out.append(value)
    return out
