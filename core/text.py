"""Quantities and errors as text, one convention for the CLI, messages and the window: bytes ('12.3 MiB'),
counts ('1.05 M'), figures, clock times, durations ('3m48s'), an exception's first line, and the one
self-rewriting progress line (LiveLine). Imports only the standard library.
"""

from __future__ import annotations

import math
import numbers
import shutil
import sys
from typing import TypeGuard


def _is_number(value) -> TypeGuard[float]:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)  # numpy scalars too


def count(value: float | None) -> str:
    """1234 -> '1,234'; 1048576 -> '1.05 M'; 2.5e9 -> '2.5 G'; '-' when unknown (or not a number)."""
    if not _is_number(value) or not math.isfinite(value):
        return "-"
    magnitude = abs(value)
    for unit, scale in (("G", 1e9), ("M", 1e6)):
        if magnitude >= scale:
            return f"{value / scale:.3g} {unit}" if magnitude < 100 * scale else f"{value / scale:,.0f} {unit}"
    return f"{value:,.0f}" if float(value).is_integer() or magnitude >= 100 else f"{value:.3g}"


def size(value: float | None) -> str:
    """Bytes in binary units, three digits at most ('0.986 MiB', not '1,010 KiB'); '-' when unknown or zero."""
    if not _is_number(value) or not value or not math.isfinite(value):
        return "-"
    for unit, scale in (("PiB", 2**50), ("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if value >= scale * 999.5 / 1024:
            scaled = value / scale
            return f"{scaled:.3g} {unit}" if scaled < 100 else f"{scaled:,.0f} {unit}"
    return f"{value:.0f} B"


def duration(seconds) -> str:
    """A wall time: '0.1 s', '12:05' or '1:02:03'; '-' when unknown."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds):
        return "-"
    if seconds < 60:
        return f"{seconds:.1f} s"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def elapsed(seconds: float) -> str:
    """An elapsed time or an ETA in a progress line: '7s', '3m48s', '1h02m' (whole seconds, never negative)."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def first_line(error: BaseException | str | None) -> str:
    """The first non-blank line of an exception's message (or of a text), stripped: what a one-line report
    shows. An exception with no message reads as its type's name; an empty text as ''."""
    for line in str(error if error is not None else "").splitlines():
        if line.strip():
            return line.strip()
    return type(error).__name__ if isinstance(error, BaseException) else ""


_BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def printable(text, keep_newlines: bool = False) -> str:
    """`text` safe to print: control characters and bidirectional overrides as escapes (`\\x1b`, `\\u202e`);
    line breaks kept with `keep_newlines`, else shown as `\\n`."""
    text = str(text)
    if text.isprintable():
        return text
    out = []
    for ch in text:
        code = ord(ch)
        if keep_newlines and ch == "\n":
            out.append(ch)
        elif code < 0x20 or 0x7F <= code < 0xA0:
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r"}.get(ch, f"\\x{code:02x}"))
        elif ch in _BIDI_CONTROLS:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def exact(value: int | None) -> str:
    """An exact integer with thousands separators: 1048576 -> '1,048,576'."""
    return "-" if value is None else f"{value:,}"


def number(value: float | None, spec: str = ".4g", suffix: str = "") -> str:
    """A float in `spec`, '-' when missing or not finite (a NaN loss prints as 'nan'). Text (run.json keeps
    a NaN as "nan") prints as itself, made printable."""
    if value is None:
        return "-"
    if not isinstance(value, numbers.Real):
        return printable(value)
    return "nan" if isinstance(value, float) and math.isnan(value) else f"{value:{spec}}{suffix}"


def setting(value) -> str:
    """A default or limit as a user types it: 65536 -> '65,536', 0.003 -> '0.003', 'full' -> 'full'."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:g}" if abs(value) < 1e6 else f"{value:,.0f}"


class LiveLine:
    """One progress line on stderr (or `stream`): on a terminal each call rewrites it in place (cut to the
    terminal's width), a `keep` call leaving it as a line; in a log only `keep` calls write, a line each."""

    def __init__(self, stream=None, live: bool | None = None):
        self.stream = stream  # None: sys.stderr at the time of writing
        self.live = (stream or sys.stderr).isatty() if live is None else live
        self._open = False  # a rewritten line waits for its newline

    def __call__(self, text: str, keep: bool = False) -> None:
        if keep or self.live:
            stream = self.stream or sys.stderr
            width = None if keep else shutil.get_terminal_size().columns - 1  # a wrapped line would not be rewritten
            stream.write(("\r\x1b[2K" if self.live else "") + printable(text)[:width] + ("\n" if keep else ""))
            stream.flush()
            self._open = not keep

    def close(self) -> None:
        """End a line left open (on a terminal)."""
        if self._open:
            (self.stream or sys.stderr).write("\n")
            self._open = False
