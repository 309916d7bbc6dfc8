"""A delimited file as pyarrow's streaming CSV reader should see it: one bad record costs its row, not the file.

pyarrow's reader gives up on the whole file at a record longer than its block ("straddles two block
boundaries"), and reads a NUL byte into a value as if it were text. RowGuard streams the file to the reader
and finds its records as pyarrow does (a quote opens a quoted value only at the value's start, "" inside it is
a quote, after the closing quote the value goes on unquoted; outside quotes \\n, \\r\\n and a lone \\r end a
record). Each record passes unchanged, except one of more than `limit` bytes or holding a NUL byte: that one
becomes a marked record with the same line breaks and another number of values than the header, so the
reader's invalid-row handler meets it in its place and `reason(row.text)` says what it was. The bytes of a
record over the limit are dropped as they stream by, never held: memory stays about limit + one chunk.

Line 1 (the header) passes as it is; a NUL byte in it (binary data, UTF-16 text) or a line 1 over the limit
is a DataError. Records are found with numpy a chunk at a time: quotes paired by parity where every quote
sits where parity and pyarrow agree (at a value's start, before a separator, or doubled), else one regular
expression match per quoted value.
"""

from __future__ import annotations

import io
import os
import re
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from core.data import formats
from core.errors import DataError
from core.files import open_regular
from core.text import size

CHUNK = 1 << 20  # bytes read from the file at a time
MARK = b"\0"  # starts a marked record: the one NUL the reader can meet (records holding a NUL are marked)
_BOM = b"\xef\xbb\xbf"
_QUOTE, _LF, _CR = 34, 10, 13
_QUOTED_REST = re.compile(rb'[^"]*(?:""[^"]*)*')  # a quoted value after its opening quote, up to its closing one
_MARKED = re.compile(r'^"?\x00(?:N|L(\d+):(\d+))')


def reason(text: str) -> str | None:
    """What a marked record's text (an invalid row's row.text) stood for; None for any other record."""
    found = _MARKED.match(text or "")
    if not found:
        return None
    if found.group(1) is None:
        return "a NUL byte: binary data, not text"
    return f"the row is {size(int(found.group(1)))}, more than a row may be ({size(int(found.group(2)))})"


@contextmanager
def guarded_source(file: Path, delimiter: str, limit: int, opener=None):
    """(RowGuard, ParseOptions arguments) for pyarrow's CSV reader of `file` separated by `delimiter` (any
    length, as formats.delimited_source does it): the file opened by `opener` (default: open_regular, which
    refuses a FIFO or a device) through a RowGuard of `limit` bytes a row."""
    with formats.delimited_source(file, delimiter) as (source, separation):
        raw = (opener or open_regular)(source) if isinstance(source, (str, os.PathLike)) else source
        guard = RowGuard(
            raw,
            separation["delimiter"],
            quoting=separation.get("quote_char", '"') is not False,
            limit=limit,
            name=str(file),
        )
        try:
            yield guard, separation
        finally:
            guard.close()


class RowGuard(io.RawIOBase):
    """`raw` (a binary stream at the file's start) with each record longer than `limit` bytes or holding a NUL
    byte replaced by a marked one (`reason` reads it). `delimiter`: one character; `quoting`: whether '"' quotes
    values (pyarrow's default); `name`: how messages name the file."""

    def __init__(self, raw, delimiter: str, quoting: bool, limit: int, name: str = "the file"):
        super().__init__()
        self._raw, self._quoting, self.limit, self._name = raw, quoting, limit, name
        self._delim = delimiter.encode("utf-8")
        assert len(self._delim) == 1, delimiter
        self._carry = b""  # the start of a record still to complete (after the state prefix of a skipped one)
        self._prefix = 0  # bytes at the carry's start that stand for a skipped record's state, not its text
        self._skipped: list | None = None  # [bytes, line breaks, NUL seen] of a record over the limit
        self._columns: int | None = None  # the header's number of values, once line 1 is complete
        self._started = False
        self._eof = False
        self._out = memoryview(b"")
        self._at = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        """Fills `buffer` whole unless the file ends (pyarrow takes each read as one block)."""
        view = memoryview(buffer).cast("B")
        got = 0
        while got < len(view):
            if self._at >= len(self._out):
                if self._eof:
                    break
                self._fill()
                continue
            take = min(len(view) - got, len(self._out) - self._at)
            view[got : got + take] = self._out[self._at : self._at + take]
            self._at += take
            got += take
        return got

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()

    # ---- one chunk

    def _fill(self) -> None:
        chunk = self._raw.read(CHUNK)
        final = not chunk
        if not self._started:
            self._started = True
            chunk = chunk.removeprefix(_BOM)  # pyarrow drops it too: line 1 starts after it
        buf = self._carry + chunk if self._carry else chunk
        self._carry = b""
        if final:
            self._eof = True
        self._out, self._at = memoryview(self._cut(buf, final) if buf else b""), 0

    def _cut(self, buf: bytes, final: bool) -> bytes:
        """The complete records of `buf` (which starts at a record's start) as the reader gets them; the rest
        is carried to the next chunk, or, once over the limit, skipped."""
        arr = np.frombuffer(buf, dtype=np.uint8)
        n = len(buf)
        inside, state = self._quotes(buf, arr)
        terms, ends = self._ends(buf, arr, inside, final)
        if final and (not len(ends) or ends[-1] < n):  # the last record, without a line end
            terms, ends = np.append(terms, n), np.append(ends, n)
        if not len(ends):
            self._hold(buf, state, whole=True)
            return b""
        starts = np.concatenate([[0], ends[:-1]])
        lengths = terms - starts
        nul = np.zeros(len(ends), dtype=bool)
        if MARK in buf:
            at = np.searchsorted(ends, np.flatnonzero(arr == 0), side="right")
            nul[at[at < len(ends)]] = True
        first = 0
        if self._columns is None:  # line 1: the header, passed as it is
            self._header(buf, arr, int(terms[0]), bool(nul[0]), inside)
            first = 1
        skipped = self._skipped
        if skipped is not None:  # the first record ends a skipped one
            lengths[0] += skipped[0] - self._prefix
            nul[0] |= skipped[2]
        bad = np.flatnonzero((lengths > self.limit) | nul)
        bad = bad[bad >= first]
        if skipped is not None and (not len(bad) or bad[0] != 0):
            bad = np.concatenate([[0], bad])
        self._skipped, self._prefix = None, 0
        pieces, at = [], 0
        for i in bad.tolist():
            s, t, e = int(starts[i]), int(terms[i]), int(ends[i])
            breaks = buf.count(b"\n", s, t) + (skipped[1] if i == 0 and skipped is not None else 0)
            pieces += [buf[at:s], self._marked(int(lengths[i]), breaks, bool(nul[i])), buf[t:e]]
            at = e
        last = int(ends[-1])
        pieces.append(buf[at:last])
        if last < n:
            self._hold(buf[last:], state, whole=False)
        return b"".join(pieces)

    def _hold(self, tail: bytes, state: bytes, whole: bool) -> None:
        """Carry the incomplete record `tail` to the next chunk; once it is over the limit, keep only the state
        it ends in (`state`, a few bytes that put a reader in it) and count what was skipped. `whole`: the
        tail is the whole chunk (a skipped record goes on, or its state prefix starts it)."""
        prefix = self._prefix if whole else 0
        keep = b"\r" if tail.endswith(b"\r") and state == b"x" else b""  # a line end whose \n may come next
        if self._skipped is None and len(tail) - prefix - len(keep) <= self.limit:
            self._carry = tail
            return
        if self._columns is None:  # line 1 over the limit
            self._header_fails(tail.find(MARK, prefix) >= 0, len(tail))
        skipped = self._skipped if self._skipped is not None and whole else [0, 0, False]
        skipped[0] += len(tail) - prefix - len(keep)
        skipped[1] += tail.count(b"\n", prefix)
        skipped[2] |= tail.find(MARK, prefix) >= 0
        self._skipped = skipped
        self._carry, self._prefix = state + keep, len(state)

    # ---- what the bytes are

    def _quotes(self, buf: bytes, arr):
        """(inside, state): inside(positions) -> whether each is inside a quoted value (None: nothing is), and
        the bytes that put a reader at a record's start in the state `buf` ends in."""
        n = len(buf)
        last = arr[-1] if n else _LF
        outside = b"x" + self._delim if n and last == self._delim[0] else b"x"  # at a value's start, else in one
        if not self._quoting or b'"' not in buf:
            return None, outside
        q = np.flatnonzero(arr == _QUOTE)
        before = arr[np.maximum(q - 1, 0)]
        before[q == 0] = _LF
        after = arr[np.minimum(q + 1, n - 1)]
        after[q == n - 1] = _LF
        d = self._delim[0]
        starts = (before == d) | (before == _LF) | (before == _CR)
        ends = (after == d) | (after == _LF) | (after == _CR)
        if (starts[0::2] | (before[0::2] == _QUOTE)).all() and (ends[1::2] | (after[1::2] == _QUOTE)).all():
            # every quote where parity pairs it as pyarrow does: inside = an odd number of quotes before
            if len(q) % 2:
                state = b'"'
            elif q[-1] == n - 1:
                state = b'""'  # a closing quote as the last byte: the next byte may make it a doubled one
            else:
                state = outside
            return (lambda pos: (np.searchsorted(q, pos) % 2).astype(bool)), state
        first, last_end = [], []
        candidates = q[starts]
        i = 0
        while i < len(candidates):
            c = int(candidates[i])
            e = _QUOTED_REST.match(buf, c + 1).end()  # its closing quote, or the chunk's end
            first.append(c)
            last_end.append(e)
            if e >= n - 1:
                break
            i = int(np.searchsorted(candidates, e + 1))
        if not first:
            return None, outside
        opened, closed = np.array(first), np.array(last_end)
        state = b'"' if closed[-1] >= n else b'""' if closed[-1] == n - 1 else outside

        def inside(pos):
            k = np.searchsorted(opened, pos, side="right") - 1
            return (k >= 0) & (pos < closed[np.maximum(k, 0)])

        return inside, state

    def _ends(self, buf: bytes, arr, inside, final: bool):
        """(terminator starts, record ends) of the records `buf` completes: line ends outside quotes."""
        n = len(buf)
        lf = np.flatnonzero(arr == _LF)
        if b"\r" in buf:
            cr = np.flatnonzero(arr == _CR)
            follow = arr[np.minimum(cr + 1, n - 1)]
            lone = cr[((cr + 1 < n) & (follow != _LF)) | ((cr == n - 1) & final)]
            crlf = (lf > 0) & (arr[np.maximum(lf - 1, 0)] == _CR)
            terms = np.concatenate([lf - crlf, lone])
            ends = np.concatenate([lf, lone]) + 1
            order = np.argsort(ends, kind="stable")
            terms, ends = terms[order], ends[order]
        else:
            terms, ends = lf, lf + 1
        if inside is not None and len(terms):
            keep = ~inside(terms)
            terms, ends = terms[keep], ends[keep]
        return terms.astype(np.int64), ends.astype(np.int64)

    def _header(self, buf: bytes, arr, term: int, nul: bool, inside) -> None:
        if nul:
            self._header_fails(True, term)
        if term > self.limit:
            self._header_fails(False, term)
        seps = np.flatnonzero(arr[:term] == self._delim[0])
        if inside is not None and len(seps):
            seps = seps[~inside(seps)]
        self._columns = 1 + len(seps)

    def _header_fails(self, nul: bool, length: int):
        if nul:
            raise DataError(
                f"{self._name}: line 1 holds a NUL byte; this is binary data or UTF-16 text, not a UTF-8 CSV file"
            )
        raise DataError(
            f"{self._name}: line 1 is more than {size(self.limit)} (at least {size(length)}), too long "
            f"for a header of column names; is this a CSV file?"
        )

    def _marked(self, length: int, breaks: int, nul: bool) -> bytes:
        """A record standing for a bad one: MARK and what it was, its line breaks, another number of values."""
        body = MARK + (b"N" if nul else b"L%d:%d" % (length, self.limit))
        if self._quoting:
            body = b'"' + body + b"\n" * breaks + b'"'
        if self._columns == 1:
            body += self._delim + MARK
        return body
