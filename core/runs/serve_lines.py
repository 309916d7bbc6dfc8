"""serve.py's answers to a file or a stream, line by line: JSON lines (a file, or stdin answered line by line)
and CSV (a header line, then rows). A bad line costs only itself: a JSON line is answered with {"line": N,
"error": "..."}, a CSV line is reported on stderr (the first REPORTED, then a count). Standard library only; it
travels beside serve.py in every export, which loads it for a file or stdin and hands it its rows and parsing
(`kit`: RowError, parse_json, requests, collect, line, NUMBER).
"""

from __future__ import annotations

import json
import re

CHUNK_ROWS = 512  # rows of a file predicted at a time
REPORTED = 20  # bad CSV lines reported one by one on stderr; the rest are counted
_ESCAPED = re.compile("[\udc80-\udcff]")  # a byte that is not UTF-8, as errors="surrogateescape" reads it


def answer_documents(kit, rows, documents):
    """The answer to each (line, JSON document or RowError): its JSON value or a RowError. The rows of all of
    them are predicted together; when the model fails on that, each document is tried on its own, so that only
    the one it fails on is lost."""
    RowError = kit.RowError
    answers, requests = {}, {}
    for n, document in documents:
        try:
            if isinstance(document, RowError):
                raise document
            requests[n] = kit.requests(document)
        except RowError as exc:
            answers[n] = exc
    try:
        results = iter(rows.answer([row for batch, _b in requests.values() for row in batch]))
    except Exception as exc:
        if len(requests) > 1:
            return [answer_documents(kit, rows, [(n, d)])[0] for n, d in documents]
        results, failure = None, RowError(f"the model failed: {kit.line(exc)}")
    for n, (batch, is_batch) in requests.items():
        answers[n] = failure if results is None else kit.collect([next(results) for _ in batch], is_batch)
    return [answers[n] for n, _d in documents]


def _read_lines(kit, stream, limit):
    """(line number, bytes or RowError) of each line of a binary stream; a line over `limit` bytes is skipped
    (read in pieces, never held) and reported."""
    for number, raw in enumerate(iter(lambda: stream.readline(limit + 1), b""), 1):
        if len(raw) > limit and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = stream.readline(1 << 16)
            yield number, kit.RowError(f"more than {limit:,} bytes (--max-request-bytes)")
        else:
            yield number, raw


def _document(kit, number, raw):
    """The JSON document of a line (None for a blank one), or RowError."""
    RowError = kit.RowError
    if isinstance(raw, RowError):
        return raw
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return RowError("not UTF-8 text")
    text = text.lstrip("\ufeff") if number == 1 else text
    if not text.strip():
        return None
    try:
        return kit.parse_json(text)
    except RowError as exc:
        return exc


def serve_json_lines(kit, rows, stream, out, limit, one_at_a_time):
    """Answer each JSON line of the binary `stream` with a JSON line on `out`, an error as {"line": N, "error"};
    `one_at_a_time`: each as soon as its line is read (stdin), else up to CHUNK_ROWS rows predicted together."""
    pending, size = [], 0

    def flush():
        for (n, _d), answer in zip(pending, answer_documents(kit, rows, pending)):
            if isinstance(answer, kit.RowError):
                answer = {"line": n, "error": str(answer)}
            out.write(json.dumps(answer, allow_nan=False) + "\n")
        out.flush()
        pending.clear()

    for number, raw in _read_lines(kit, stream, limit):
        document = _document(kit, number, raw)
        if document is None:
            continue
        pending.append((number, document))
        size += len(document) if isinstance(document, list) else 1
        if one_at_a_time or size >= CHUNK_ROWS:
            flush()
            size = 0
    flush()


def serve_csv(kit, rows, path, out, err, limit):
    """Answer each row of the CSV file `path` (a header line, then rows) with CSV rows on `out`; a bad line is
    reported on `err` (the first REPORTED, then a count). Returns the number of bad lines."""
    import csv

    RowError, _line = kit.RowError, kit.line
    csv.field_size_limit(limit)
    bad = 0

    def report(line, why):
        nonlocal bad
        bad += 1
        if bad <= REPORTED:
            err.write(f"line {line}: {why}\n")

    with open(path, newline="", encoding="utf-8", errors="surrogateescape") as f:
        reader = csv.reader(f)
        try:
            header = next(reader)
        except StopIteration:
            raise RowError(f"{path}: the file is empty (the first line names the columns)") from None
        except csv.Error as exc:
            raise RowError(f"{path}: line 1 cannot be read as CSV: {_line(exc)}") from None
        header[:1] = [header[0].lstrip("\ufeff")] if header else []
        if all(kit.NUMBER.fullmatch(name) for name in header):
            raise RowError(f"{path}: line 1 holds numbers, not column names: add a header line naming the columns")
        columns = rows.csv_columns(header)
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        chunk = []

        def flush():
            for (line, _row), answer in zip(chunk, answer_documents(kit, rows, chunk)):
                if isinstance(answer, RowError):
                    report(line, answer)
                else:
                    writer.writerows(rows.csv_rows(line, answer, columns))
            chunk.clear()

        while True:
            line = reader.line_num + 1
            try:
                values = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                values = RowError(f"cannot be read as CSV: {_line(exc)}")
            if not values:  # a blank line
                continue
            if isinstance(values, RowError):
                chunk.append((line, values))  # reported in order with the rows around it
            elif len(values) != len(header):
                chunk.append((line, RowError(f"{len(values)} values, the header has {len(header)} columns")))
            elif any(_ESCAPED.search(value) for value in values):
                chunk.append((line, RowError("not UTF-8 text")))
            else:
                chunk.append((line, dict(zip(header, values))))
            if len(chunk) >= CHUNK_ROWS:
                flush()
        flush()
    if bad > REPORTED:
        err.write(f"... and {bad - REPORTED:,} more bad lines (skipped)\n")
    return bad
