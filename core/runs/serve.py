"""Serve an AMP Console export with the standard library and torch (onnxruntime and numpy for model.onnx); it
imports nothing of the project. `serve.load(folder).predict(inputs, k=10)` in Python, or rows (docs/runs.md):

    python serve.py rows.csv                  # predictions as CSV on stdout (rows.jsonl: as JSON lines)
    python serve.py - < rows.jsonl            # JSON lines on stdin until EOF, one answer line per line
    python serve.py --http 127.0.0.1:8000     # POST /predict (JSON in, JSON out), GET /health

The task's part is the serving module its manifest names (`serving_module`, a .py beside this file); a model.pt2
is checked before torch loads it (serve_program.py).
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import stat
import sys
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent  # serve_http.py, serve_lines.py and serve_program.py lie beside this file


def load(folder):
    """The export in `folder`, ready to predict; UnsafeExport or IncompleteExport (one line) when it cannot be."""
    return Served(folder)


class Served:
    def __init__(self, folder):
        self.folder = Path(folder)
        with open_regular(self.folder / "manifest.json") as f:
            self.manifest = json.loads(f.read().decode("utf-8"))
        self.task = self.manifest["task"]
        self.serving = self.manifest.get("serving", {})
        part = serving_module(self.folder, self.manifest)
        self.aliases = dict(getattr(part, "ALIASES", {}))
        path = Path(model_file(self.folder, self.manifest.get("file")))  # a plain name beside the manifest
        if path.suffix == ".pt2":  # code: checked for pickles and Python source before torch loads it
            self._module = load_program(path)
            self._session = None
        elif path.suffix == ".onnx":
            import onnxruntime

            self._session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            self._module = None
        else:
            raise IncompleteExport(
                f"{path.name} holds the model's weights only: serve.py serves the model as a program or ONNX "
                f"export (amp-console export --format program or --format onnx)"
            )
        self.part = part.Serving(self, KIT)  # the task's inputs and answers

    def run(self, rows, dtype=None):
        """The model on `rows` (nested lists shaped as manifest["inputs"]; a list of them, one per input, when
        `dtype` is None): nested lists back."""
        return self.run_array(rows, dtype).tolist()

    def run_array(self, rows, dtype=None):
        """As run, the answer as a torch tensor (model.pt2, model.safetensors) or a numpy array (model.onnx)."""
        inputs = self.manifest["inputs"]
        arrays = [(rows, dtype)] if dtype is not None else [(x, spec["dtype"]) for x, spec in zip(rows, inputs)]
        if self._module is not None:
            import torch

            with torch.no_grad():
                return self._module(*(torch.tensor(x, dtype=getattr(torch, kind)) for x, kind in arrays))
        import numpy as np

        feed = {spec["name"]: np.asarray(x, dtype=kind) for spec, (x, kind) in zip(inputs, arrays)}
        return self._session.run(None, feed)[0]

    def predict(self, inputs, k=10):
        """One answer per input of a batch of the task's inputs (a str or bytes is a batch of one); `k`: the
        answers per input, for a task that ranks (recommender)."""
        inputs = [inputs] if isinstance(inputs, (str, bytes)) else list(inputs)
        return self.part.predict(inputs, k) if inputs else []

    def width(self):
        """The numbers per point / candidate the model takes (the input's last dimension)."""
        return self.manifest["inputs"][0]["shape"][-1]


class IncompleteExport(ValueError):
    """An export this serve.py cannot serve as it is; str() says what to do."""


def serving_module(folder, manifest):
    """The serving module the manifest names, run from beside this serve.py only (the project's own copy also
    looks in core/tasks); IncompleteExport when it is not there or the manifest names none."""
    name = manifest.get("serving_module")
    if name is None:
        raise IncompleteExport(
            f"{folder}: its manifest.json names no serving module (written before the task's serving code "
            f"travelled with the export): serve it with the serve.py in that folder, or export the checkpoint again"
        )
    _module_name(name, "serving module")
    for place in _module_places():
        if os.path.lexists(os.path.join(place, name)):
            return load_module(place, name, "serving module")
    raise IncompleteExport(
        f"{folder}: its serving module {name} is not beside this serve.py: serve it with the serve.py in that "
        f"folder, or export the checkpoint again"
    )


def _module_places():
    """Where serving modules are run from: this file's folder, and in the project's tree core/tasks' packages."""
    places = [HERE]
    tasks = HERE.parent / "tasks"
    if HERE.name == "runs" and HERE.parent.name == "core" and (tasks / "serving.py").is_file():
        places += [tasks, *sorted(p for p in tasks.iterdir() if (p / "__init__.py").is_file())]
    return [str(p) for p in places]


def _is_list(value):
    return isinstance(value, (list, tuple)) or (
        hasattr(value, "shape") and hasattr(value, "tolist") and len(value.shape) > 0
    )


def _numbers(rows, width, what):
    """Rows of `width` floats, or ValueError naming the row that is not."""
    out = []
    for i, row in enumerate(rows):
        row = list(row) if _is_list(row) else [row]
        if len(row) != width:
            raise ValueError(f"{what} {i}: {len(row)} numbers, the model takes {width}")
        out.append([float(v) for v in row])
    return out


# ---------------------------------------------------------------------------------------------- the files
class UnsafeExport(ValueError):
    """An export this loader will not open; str() is the one-line reason."""


def model_file(folder, name):
    """The path of manifest.json's "file": a plain name in `folder`, a regular file, not a link; else UnsafeExport."""
    if (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or os.path.basename(name) != name
        or "\\" in name
        or "\0" in name
    ):
        raise UnsafeExport(
            f"manifest.json: the model file {ascii(name)[:80]} is not a file name in the export "
            f"folder: refused (the model file lies beside manifest.json)"
        )
    path = os.path.join(folder, name)
    try:
        mode = os.lstat(path).st_mode
    except OSError as exc:
        raise UnsafeExport(f"{name}: cannot read the model file: {exc.strerror or type(exc).__name__}") from None
    if stat.S_ISLNK(mode):
        raise UnsafeExport(f"{name} is a symbolic link: refused (the model file lies in the export folder)")
    if not stat.S_ISREG(mode):
        raise UnsafeExport(f"{name} is not a regular file: refused")
    return path


def open_regular(path):
    """`path` opened for reading in binary, refused unless it is a regular file (not a link, FIFO or device)."""
    flags = (
        os.O_RDONLY
        | getattr(os, "O_NOFOLLOW", 0)
        | getattr(os, "O_NONBLOCK", 0)
        | getattr(os, "O_CLOEXEC", 0)
        | getattr(os, "O_BINARY", 0)
    )
    name = os.path.basename(path)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise UnsafeExport(
            f"{name}: cannot open it: {exc.strerror or type(exc).__name__} (a link is refused)"
        ) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafeExport(f"{name} is not a regular file: refused")
    return os.fdopen(fd, "rb")


def load_program(path):
    """torch.export.load(path).module() once check_program passes, both through one open file (no swap between)."""
    import torch

    with open_regular(path) as f:
        check_program(f, os.path.basename(path))
        f.seek(0)
        return torch.export.load(f).module()


def check_program(file, label="model.pt2"):
    """UnsafeExport (one line) for a torch.export archive that would run Python when loaded (serve_program.py)."""
    checks = _companion("serve_program.py")
    try:
        checks.check_program(file, label)
    except checks.Refused as exc:
        raise UnsafeExport(str(exc)) from None


_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,100}\.py")


def _module_name(name, what):
    """UnsafeExport unless `name` is a plain `name.py` (no folder part)."""
    if not isinstance(name, str) or not _MODULE_NAME.fullmatch(name):
        raise UnsafeExport(
            f"manifest.json: the {what} {ascii(name)[:80]} is not a module file name in the export "
            f"folder: refused (it lies beside manifest.json)"
        )


def load_module(folder, name, what="module"):
    """The file `name` of `folder` run as a fresh module (not put in sys.modules): a plain `name.py`, a regular
    file and not a link; UnsafeExport otherwise, IncompleteExport when the folder has no such file."""
    _module_name(name, what)
    path = os.path.join(folder, name)
    if not os.path.lexists(path):
        raise IncompleteExport(f"{folder}: no {name} (the {what} serve.py needs)")
    with open_regular(path) as f:
        source = f.read()
    module = types.ModuleType(f"amp_export_{name[:-3]}")
    module.__file__ = os.path.abspath(path)
    exec(compile(source, module.__file__, "exec"), module.__dict__)
    return module


@functools.cache
def _companion(name):
    """serve.py's own part in the file `name` beside it (loaded on first use: --help needs none)."""
    return load_module(HERE, name, "part of serve.py")


# ---------------------------------------------------------------------------------------------- the command line
MAX_REQUEST_BYTES = 1 << 20  # a JSON line, a CSV field or an HTTP body
REQUEST_TIMEOUT = 30.0  # seconds an HTTP request (its line, headers and body) may take to arrive
MAX_CONNECTIONS = 32  # HTTP connections served at once (a thread each); more are answered 503
_FLOAT32_MAX = 3.4028234663852886e38
_NUMBER = re.compile(r"\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*")


class RowError(ValueError):
    """A row (or a line, or a request) the model cannot take; str() is the one-line reason."""


@functools.lru_cache(maxsize=4096)  # a file's rows repeat its header's names
def _normal(name):
    """A column name as amp-console predict compares it: lower case, without blanks, "_" and "-"."""
    return re.sub(r"[\s_-]+", "", str(name)).lower()


_KINDS = ((type(None), "null"), (bool, "true/false"), (str, "a string"), ((int, float), "a number"), (list, "a list"))


def _kind(value):
    """What a JSON value is, in words."""
    return next((words for kind, words in _KINDS if isinstance(value, kind)), "an object")


def _shown(value):
    text = ascii(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _line(text):
    """One printable line of `text` (an error message that may quote a file)."""
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return "".join(c if c.isprintable() else "?" for c in line)[:300]


def parse_json(text):
    """A JSON document; RowError for one that is not strict JSON (NaN and Infinity are not) or is nested too
    deeply for this Python."""

    def refuse(constant):
        raise ValueError(f"{constant} is not a JSON number")

    try:
        return json.loads(text, parse_constant=refuse)
    except RecursionError:
        raise RowError("the JSON is nested too deeply") from None
    except ValueError as exc:
        raise RowError(f"not JSON: {_line(exc)}") from None


class Rows:
    """The task's rows (dicts of column -> value: a JSON object, or a CSV row under its header) as the model's
    inputs, and its answers as dicts (see the module doc); what is the task's, its serving module says."""

    def __init__(self, served, k=10):
        self.served, self.task, self.k = served, served.task, k
        self.part = served.part
        self.answer_columns = list(self.part.columns)
        self.aliases = {_normal(name): tuple(aliases) for name, aliases in served.aliases.items()}
        self.canonical = {alias: name for name, aliases in self.aliases.items() for alias in aliases}

    def answer(self, rows):
        """One answer per row, in order: a dict, or a RowError for a row the model cannot take."""
        out, good, inputs = [None] * len(rows), [], []
        for i, row in enumerate(rows):
            try:
                inputs.append(self._input(row))
                good.append(i)
            except RowError as exc:
                out[i] = exc
        if good:
            results = self.served.predict([x for x, _copied in inputs], k=self.k)
            for i, (_x, copied), result in zip(good, inputs, results):
                out[i] = {**copied, **self.part.answer(result)}
        return out

    def _input(self, row):
        """(the model's input, the columns copied to the answer) of one row; RowError for a bad one."""
        if not isinstance(row, dict):
            raise RowError(f"a row is an object of column: value, not {_kind(row)}")
        values = {}
        for key, value in row.items():
            if len(key) > 64:  # no column's name: not worth a place in _normal's cache
                continue
            name = _normal(key)
            if name in self.canonical:
                values.setdefault(self.canonical[name], value)  # the column's own name wins over an alias
            else:
                values[name] = value
        copied = {}
        for name in self.part.copied:
            value = values.get(_normal(name))
            if value is not None and not isinstance(value, (str, int, float)):
                raise RowError(f"{name} is {_kind(value)}, not an id")
            if value is not None:
                copied[name] = value
        return self.part.row_input(values), copied

    def csv_columns(self, header):
        """The CSV output's columns for an input with `header`."""
        present = {_normal(name) for name in header}
        copied = [
            name
            for name in self.part.copied
            if _normal(name) in present or set(self.aliases.get(_normal(name), ())) & present
        ]
        if hasattr(self.part, "csv_columns"):
            return self.part.csv_columns(copied)
        return ["line", *copied, *self.answer_columns]

    def csv_rows(self, line, answer, columns):
        if hasattr(self.part, "csv_rows"):
            return self.part.csv_rows(line, answer, columns)
        return [[line if c == "line" else answer.get(c, "") for c in columns]]


def _finite(value):
    """A model output as JSON takes it: a float, None where it is not finite."""
    value = float(value)
    return value if math.isfinite(value) else None


def _number(values, name):
    """values[name] as a float the model takes (finite, within float32's range); RowError naming it otherwise."""
    if name not in values:
        raise RowError(f"no {name} column")
    value = values[name]
    if isinstance(value, str):
        if not value.strip():
            raise RowError(f"{name} is empty")
        if not _NUMBER.fullmatch(value):
            raise RowError(f"{name} {_shown(value)} is not a number")
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RowError(f"{name} is {_kind(value)}, not a number")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number) or abs(number) > _FLOAT32_MAX:
        raise RowError(f"{name} {_shown(value)} is not a finite float32 number")
    return number


def _requests(document):
    """(rows, batch) of a JSON document: an object is one row, a list of objects a batch."""
    if isinstance(document, dict):
        return [document], False
    if isinstance(document, list):
        return document, True
    raise RowError(f"give an object (one row) or a list of objects (a batch), not {_kind(document)}")


def _collect(answers, batch):
    """A request's JSON answer from its rows' answers, or RowError naming its first bad row."""
    for i, answer in enumerate(answers):
        if isinstance(answer, RowError):
            return RowError(f"row {i}: {answer}" if batch else str(answer))
    return answers if batch else answers[0]


def serve_json_lines(rows, stream, out, limit, one_at_a_time):
    """Each JSON line of the binary `stream` answered on `out` (serve_lines.py)."""
    _companion("serve_lines.py").serve_json_lines(KIT, rows, stream, out, limit, one_at_a_time)


def is_loopback(host):
    """Whether `host` names this machine's loopback only (serve_http.py)."""
    return _companion("serve_http.py").is_loopback(host)


def main(argv=None):
    """The command line (see the module doc); the exit status."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="serve.py",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Predict with this AMP Console export: rows of a .csv or .jsonl file (answers on stdout as CSV "
        "or JSON lines), JSON lines on stdin (-), or HTTP (--http).",
        epilog=__doc__.split("\n\n")[1],
    )
    parser.add_argument(
        "input",
        nargs="?",
        metavar="INPUT",
        help="a .csv or .jsonl file of rows, or - to read JSON lines from stdin until EOF",
    )
    parser.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve POST /predict and GET /health instead (a non-loopback HOST is reachable from other machines)",
    )
    parser.add_argument(
        "--export",
        metavar="FOLDER",
        default=str(Path(__file__).resolve().parent),
        help="the export folder (default: the folder serve.py lies in)",
    )
    parser.add_argument("--k", type=int, default=10, help="recommender: lessons per history (default 10)")
    parser.add_argument(
        "--max-request-bytes",
        type=int,
        default=MAX_REQUEST_BYTES,
        metavar="N",
        help=f"the largest JSON line, CSV field or HTTP body (default {MAX_REQUEST_BYTES:,})",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=REQUEST_TIMEOUT,
        metavar="SECONDS",
        help=f"HTTP: a request not wholly arrived this long after it began is dropped (default {REQUEST_TIMEOUT:g})",
    )
    parser.add_argument(
        "--max-connections",
        type=int,
        default=MAX_CONNECTIONS,
        metavar="N",
        help=f"HTTP: connections served at once; more are answered 503 (default {MAX_CONNECTIONS})",
    )
    parser.add_argument("--quiet", action="store_true", help="HTTP: no line per request on stderr")
    args = parser.parse_args(argv)
    if (args.input is None) == (args.http is None):
        parser.error("give INPUT (a .csv or .jsonl file, or - for stdin) or --http HOST:PORT")
    if args.k < 1:
        parser.error(f"--k {args.k}: ask for at least 1 recommendation")
    if args.max_request_bytes < 1:
        parser.error(f"--max-request-bytes {args.max_request_bytes}: allow at least 1 byte")
    if not args.timeout > 0:
        parser.error(f"--timeout {args.timeout}: give a number of seconds above 0")
    if args.max_connections < 1:
        parser.error(f"--max-connections {args.max_connections}: allow at least 1")
    suffix = Path(args.input or "").suffix.lower()
    if args.input not in (None, "-") and suffix not in (".csv", ".jsonl", ".ndjson"):
        parser.error(f"{args.input}: give a .csv or .jsonl file (or - for JSON lines on stdin)")
    if args.input not in (None, "-") and not os.path.isfile(args.input):
        return _fail(f"{args.input}: no such file")
    if not os.path.isfile(os.path.join(args.export, "manifest.json")):
        return _fail(f"{args.export}: no manifest.json: name the export folder with --export FOLDER")
    try:
        rows = Rows(load(args.export), args.k)
    except Exception as exc:
        return _fail(f"cannot load the export in {args.export}: {_line(exc)}")
    try:
        if args.http is not None:
            _companion("serve_http.py").serve_http(
                KIT, rows, args.http, args.max_request_bytes, args.timeout, args.quiet, connections=args.max_connections
            )
        elif args.input == "-":
            serve_json_lines(rows, sys.stdin.buffer, sys.stdout, args.max_request_bytes, one_at_a_time=True)
        elif suffix == ".csv":
            _companion("serve_lines.py").serve_csv(
                KIT, rows, args.input, sys.stdout, sys.stderr, args.max_request_bytes
            )
        else:
            with open(args.input, "rb") as f:
                serve_json_lines(rows, f, sys.stdout, args.max_request_bytes, one_at_a_time=False)
    except RowError as exc:
        return _fail(str(exc))
    except OSError as exc:
        if isinstance(exc, BrokenPipeError):  # the reader went away (`| head`): nothing more to say
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        return _fail(f"{exc.filename or 'input'}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        return 130
    return 0


def _fail(message):
    sys.stderr.write(f"serve.py: {message}\n")
    return 2


# what a task's serving module (see the module doc) and serve_http.py are given of this module
KIT = types.SimpleNamespace(
    RowError=RowError,
    number=_number,
    numbers=_numbers,
    finite=_finite,
    kind=_kind,
    is_list=_is_list,
    parse_json=parse_json,
    requests=_requests,
    collect=_collect,
    line=_line,
    shown=_shown,
    NUMBER=_NUMBER,
)


if __name__ == "__main__":
    sys.exit(main())
