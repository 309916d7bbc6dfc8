"""Serve an AMP Console export with the standard library and torch only (onnxruntime and numpy for model.onnx).
`amp-console export` copies this file (core/lab/serve.py, which imports nothing of the project) into every export;
manifest.json beside it says what the model computes and what it needs.

From Python, `load(folder).predict(...)` takes the task's own inputs:

    import serve
    model = serve.load("export")
    model.predict(["Clear and useful, not boring at all."])   # sentiment: P(positive) per text
    model.predict([[12, 7, 40]], k=10)                        # recommender: top-k (lesson id, score), seen excluded
    model.predict([[0.1] * 136])                              # ranking: a score per feature vector
    model.predict([[0.0] * 10])                               # tiny: class probabilities per point

From the command line (the export is the folder this file lies in, or --export FOLDER):

    python serve.py rows.csv                  # predictions as CSV on stdout (rows.jsonl: as JSON lines)
    python serve.py - < rows.jsonl            # JSON lines on stdin until EOF, one answer line per line
    python serve.py --http 127.0.0.1:8000     # POST /predict (JSON in, JSON out), GET /health

A row holds the columns `amp-console predict` reads for the task (a CSV row under its header line, or a JSON
object), under predict's names and aliases (compared ignoring case, blanks, "_" and "-"):

- sentiment: text -> p_positive, predicted ("positive" or "negative");
- recommender: history (lesson ids separated by spaces or commas, or a JSON list), user_id optional and copied ->
  items, scores: the top --k lessons, those of the history excluded (none when it has no lesson the model knows);
- ranking: f1..fN, with query_id, doc_id and label optional and copied -> score;
- tiny: x1..xN (or f1..fN) -> p0..pC-1 (class probabilities), predicted.

CSV output has a `line` column (the input's line) and, for the recommender, a row per recommended lesson (rank,
item_id, score). A JSON line (or an HTTP body) is one row object, answered by an object, or a list of rows (a
batch), answered by a list; blank lines are skipped. A bad line (not JSON, a missing column, a value that is not
a finite number, a line over --max-request-bytes) is answered by one line {"line": N, "error": "..."} (CSV input:
reported on stderr) and the lines around it are answered as usual.

The HTTP server (http.server, a thread per connection, one prediction at a time) listens on loopback unless
another address is named (then it warns: there is no authentication or TLS). A body over --max-request-bytes is
refused (413) before it is read, a connection silent for --timeout seconds is closed, and every error is one line
of JSON {"error": "..."} with its status (400, 404, 405, 408, 411, 413, 500): no traceback reaches a client, and no
request stops the server.

A torch.export program (model.pt2) is code: `load_program` checks it (check_program) for pickles and Python
source before torch.export.load reads it. A model file that is not a plain name beside manifest.json (`..`, an
absolute path, a link) is refused too.
"""

from __future__ import annotations

import functools
import json
import math
import operator
import os
import re
import stat
import sys
import unicodedata
import zipfile
import zlib
from pathlib import Path

__all__ = ["Served", "UnsafeExport", "check_program", "hashed_tokens", "load", "load_program", "main", "words"]


def load(folder):
    """The export in `folder` (its manifest.json and model file), ready to predict. UnsafeExport (one line)
    for a model file outside the folder or a program holding pickles or Python source (see check_program)."""
    return Served(folder)


class Served:
    def __init__(self, folder):
        self.folder = Path(folder)
        with open_regular(self.folder / "manifest.json") as f:
            self.manifest = json.loads(f.read().decode("utf-8"))
        self.task = self.manifest["task"]
        self.serving = self.manifest.get("serving", {})
        path = Path(model_file(self.folder, self.manifest.get("file")))  # a plain name beside the manifest
        if path.suffix == ".pt2":  # code: checked for pickles and Python source before torch loads it
            import torch

            self._torch = torch
            self._module = load_program(path)
            self._session = None
        elif path.suffix == ".onnx":
            import onnxruntime

            self._session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
            self._module = None
        else:  # safetensors: the task's forward pass in plain torch over the weights (computed in float32)
            import torch

            self._torch = torch
            self._module = _Rebuilt(self.task, read_safetensors(path), self.manifest["task_options"])
            self._session = None
        if self.task == "recommender":
            vocabulary = self.serving["vocabulary"]
            # looked up by text, so 5000 and "5000" name the same lesson (ids read from a file are text)
            self._model_id = {str(lesson): k + 1 for k, lesson in enumerate(vocabulary)}
            for k, lesson in enumerate(vocabulary):  # 12.0 is lesson 12 too (unless "12.0" is an id itself)
                self._model_id.setdefault(_lesson_key(lesson), k + 1)
            self._lesson = vocabulary

    def run(self, rows, dtype):
        """The exported model on `rows` (nested lists shaped as manifest["inputs"]): nested lists back."""
        return self.run_array(rows, dtype).tolist()

    def run_array(self, rows, dtype):
        """As run, the answer as a torch tensor (model.pt2, model.safetensors) or a numpy array (model.onnx)."""
        if self._module is not None:
            torch = self._torch
            with torch.no_grad():
                return self._module(torch.tensor(rows, dtype=getattr(torch, dtype)))
        import numpy as np

        name = self.manifest["inputs"][0]["name"]
        return self._session.run(None, {name: np.asarray(rows, dtype=dtype)})[0]

    def predict(self, inputs, k=10):
        """The task's answer for a batch of its own inputs (see the module doc), one answer per input. A single
        input is a batch of one: one text; one history (a list of lesson ids, or a string of ids separated by
        spaces, as `amp-console predict` reads them); one point or one candidate's features (a list of
        numbers). An empty batch answers []."""
        if isinstance(inputs, (str, bytes)):
            inputs = [inputs]
        inputs = list(inputs)
        if not inputs:
            return []
        if self.task == "tiny":
            points = _numbers([inputs] if not _is_list(inputs[0]) else inputs, self._width(), "point")
            return self.run(points, "float32")
        if self.task == "sentiment":
            bad = [i for i, text in enumerate(inputs) if not isinstance(text, str)]
            if bad:
                raise TypeError(f"input {bad[0]}: a review is a string, not {type(inputs[bad[0]]).__name__}")
            t = self.serving["tokenizer"]
            ids = hashed_tokens(inputs, t["buckets"], t["max_tokens"], t["negation_scope"])
            return self.run(ids, "int64")
        if self.task == "recommender":
            given = k
            try:  # any integer (numpy's too), not a bool or a float
                k = operator.index(k) if not isinstance(k, bool) else None
            except TypeError:
                k = None
            if k is None or k < 1:
                raise ValueError(f"k={given!r}: ask for at least 1 recommendation (a whole number)")
            if not any(_is_list(h) or isinstance(h, str) for h in inputs):  # one history of ids
                inputs = [inputs]
            return self._recommend([_split_history(h) if isinstance(h, str) else list(h) for h in inputs], k)
        if self.task == "ranking":
            if not _is_list(inputs[0]):  # one candidate's features: one query of one candidate
                inputs = [inputs]
            if not _is_list(inputs[0][0]):  # (N, F): one query's N candidates
                return self.run([_numbers(inputs, self._width(), "candidate")], "float32")[0]
            queries = [_numbers(q, self._width(), f"query {i}: candidate") for i, q in enumerate(inputs)]
            if len({len(q) for q in queries}) > 1:
                raise ValueError("the queries of one batch need the same number of candidates (or predict each "
                                 "query on its own)")
            return self.run(queries, "float32")
        raise ValueError(f"unknown task {self.task!r}")

    def _width(self):
        """The numbers per point / candidate the model takes (the input's last dimension)."""
        return self.manifest["inputs"][0]["shape"][-1]

    def _recommend(self, histories, k):
        max_len = self.serving["max_len"]
        batch, seen = [], []
        for history in histories:
            known = (self._model_id.get(_lesson_key(i)) for i in history)
            ids = [k for k in known if k is not None]  # lessons the model never saw in training: skipped
            window = ids[-max_len:]
            batch.append([0] * (max_len - len(window)) + window)
            seen.append(set(ids))
        scores = self.run_array(batch, "int64")
        k = min(k, scores.shape[1])
        for row, used in enumerate(seen):  # every lesson of the history is excluded, not just the window's
            scores[row, [j - 1 for j in used]] = float("-inf")
        if self._module is not None:
            values, order = scores.topk(k, dim=1)
        else:
            order = (-scores).argsort(axis=1, kind="stable")[:, :k]
            values = scores[[[r] for r in range(len(order))], order]
        out = []
        for used, row_values, row_order in zip(seen, values.tolist(), order.tolist()):
            # no lesson of the history is known: nothing to go on (as amp-console predict answers), not the
            # model's guess for an empty history
            out.append([(self._lesson[j], v) for j, v in zip(row_order, row_values) if v != float("-inf")]
                       if used else [])
        return out


def _is_list(value):
    return isinstance(value, (list, tuple)) or (hasattr(value, "shape") and hasattr(value, "tolist")
                                                and len(value.shape) > 0)


def _numbers(rows, width, what):
    """Rows of `width` floats, or ValueError naming the row that is not."""
    out = []
    for i, row in enumerate(rows):
        row = list(row) if _is_list(row) else [row]
        if len(row) != width:
            raise ValueError(f"{what} {i}: {len(row)} numbers, the model takes {width}")
        out.append([float(v) for v in row])
    return out


def _split_history(text):
    """A history written as text: ids separated by spaces or commas, brackets around them ignored
    ("12 7 40", "12,7,40", "[12, 7, 40]"), as `amp-console predict` reads its history column."""
    return [part for part in re.split(r"[\s,]+", text.strip(" \t\r\n[](),")) if part]


def _lesson_key(lesson):
    """A lesson id as the vocabulary is looked up: its text, a whole number written as a float (12.0, "12.0",
    from a float column) as the integer."""
    if isinstance(lesson, float) and lesson.is_integer():
        return str(int(lesson))
    text = str(lesson).strip()
    return _WHOLE.sub(r"\1", text)


_WHOLE = re.compile(r"^([-+]?\d+)\.0*$")


def read_safetensors(path):
    """name -> float32 tensor from a .safetensors file (8-byte header length, JSON header, raw data), read
    without the safetensors package."""
    import struct

    import torch

    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
              "I64": torch.int64, "I32": torch.int32}
    data = Path(path).read_bytes()
    (size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + size])
    body = bytearray(data[8 + size:])
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        flat = torch.frombuffer(body, dtype=dtypes[info["dtype"]], count=(end - start) // dtypes[info["dtype"]].itemsize,
                                offset=start) if end > start else torch.zeros(0, dtype=dtypes[info["dtype"]])
        tensors[name] = flat.reshape(info["shape"]).float()
    return tensors


class _Rebuilt:
    """The exported computation of each task written out in plain torch over a state dict (the same
    functions as amp-console's models, eval mode)."""

    def __init__(self, task, weights, options):
        self.task, self.w, self.o = task, weights, options

    def _linears(self, prefix):
        index = sorted({int(k[len(prefix):].split(".")[0]) for k in self.w if k.startswith(prefix)})
        return [(self.w[f"{prefix}{i}.weight"], self.w[f"{prefix}{i}.bias"]) for i in index]

    def _mlp(self, x, prefix):
        import torch.nn.functional as F

        layers = self._linears(prefix)
        for number, (weight, bias) in enumerate(layers):
            x = F.linear(x, weight, bias)
            if number < len(layers) - 1:
                x = F.relu(x)
        return x

    def __call__(self, x):
        return getattr(self, "_" + self.task)(x)

    def _tiny(self, x):
        import torch.nn.functional as F

        w = self.w
        hidden = F.relu(F.linear(x.float(), w["fc1.weight"], w["fc1.bias"]))
        return F.linear(hidden, w["fc2.weight"], w["fc2.bias"]).softmax(-1)

    def _sentiment(self, tokens):
        import torch
        import torch.nn.functional as F

        w, o = self.w, self.o
        weights = w["bucket_weight"][tokens]
        if o["weighting"] == "tfidf":  # sublinear tf, shared out over a row's copies of an id
            counts = (tokens.unsqueeze(2) == tokens.unsqueeze(1)).sum(-1).clamp(min=1).float()
            weights = weights * (1 + torch.log(counts)) / counts
        pooled = F.embedding_bag(tokens, w["bag.weight"], mode="sum", per_sample_weights=weights, padding_idx=0)
        pooling = o["pooling"]
        if pooling == "mean":
            norm = weights.sum(1)
        elif pooling == "sqrt":
            norm = (weights > 0).sum(1).float().sqrt()
        elif pooling == "l2":
            norm = weights.square().sum(1).sqrt()
        else:
            norm = torch.ones_like(weights[:, 0])
        return self._mlp(pooled / norm.clamp(min=1e-6).unsqueeze(1), "head.").softmax(-1)[:, 1]

    def _recommender(self, seq):
        import torch.nn.functional as F

        w, heads = self.w, self.o["heads"]
        items = w["items.weight"]
        b, length = seq.shape
        d = items.shape[1]
        x = items[seq] * d ** 0.5 + w["positions.weight"][:length]
        timeline = (seq > 0).unsqueeze(-1).float()
        x = x * timeline
        blocks = sorted({int(k.split(".")[1]) for k in w if k.startswith("blocks.")})
        for i in blocks:
            p = f"blocks.{i}."
            h = F.layer_norm(x, (d,), w[p + "norm1.weight"], w[p + "norm1.bias"])
            q, k, v = F.linear(h, w[p + "qkv.weight"], w[p + "qkv.bias"]).view(b, length, 3, heads, d // heads) \
                .permute(2, 0, 3, 1, 4)
            attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + F.linear(attn.transpose(1, 2).reshape(b, length, d), w[p + "proj.weight"], w[p + "proj.bias"])
            h = F.layer_norm(x, (d,), w[p + "norm2.weight"], w[p + "norm2.bias"])
            h = F.linear(F.gelu(F.linear(h, w[p + "ffn.0.weight"], w[p + "ffn.0.bias"])), w[p + "ffn.2.weight"],
                         w[p + "ffn.2.bias"])
            x = (x + h) * timeline
        x = F.layer_norm(x, (d,), w["norm.weight"], w["norm.bias"])
        return x[:, -1] @ items[1:].t()

    def _ranking(self, x):
        import torch

        w = self.w
        x = x.float()
        if "norm.knots" in w:
            knots = w["norm.knots"]
            k = knots.shape[1]
            flat = x.reshape(-1, x.shape[-1]).t().contiguous()
            lo = torch.searchsorted(knots, flat)
            hi = torch.searchsorted(knots, flat, right=True)
            below = knots.gather(1, (lo - 1).clamp(0, k - 1))
            above = knots.gather(1, lo.clamp(0, k - 1))
            between = (lo - 1).float() + (flat - below) / (above - below).clamp(min=1e-30)
            position = torch.where(hi > lo, (lo + hi - 1).float() / 2, between).clamp(0, k - 1)
            y = torch.special.ndtri((position + 0.5) / k).t().reshape(x.shape)
        else:
            y = (x - w["norm.center"]) / w["norm.scale"]
            y = torch.where(w["norm.curve"] > 0, torch.asinh(y), y)
        y = (y - w["norm.mean"]) / w["norm.std"]
        return self._mlp(y, "net.").squeeze(-1)


# The tokenizer the model was trained with (core/data/tokenizer.py), in pure Python: identical ids for text
# whose characters this Python's Unicode database knows (unicodedata.unidata_version: 14.0 on Python 3.11);
# characters assigned by a later Unicode version than the one there may be split or normalised differently.
CLAUSE_END = re.compile(r"[.,;:!?()\[\]{}\"“”…]+")
BOUNDARY = "|"
NEGATORS = frozenset({"not", "no", "never", "nor", "neither", "without", "cannot", "hardly", "nothing", "none"})
NEGATED_SALT = 0x2545F491
MASK64 = (1 << 64) - 1


def _lower(text):
    """Per-code-point (simple) lower-casing, as Arrow's utf8_lower: no final-sigma rule, U+0130 -> 'i'."""
    out = []
    for c in text:
        low = c.lower()
        out.append(low if len(low) == 1 else ("i" if c == "\u0130" else low))
    return "".join(out)


def _is_word_char(c, boundaries):
    return unicodedata.category(c)[0] in "LNM" or c in "_'" or (boundaries and c == BOUNDARY)


def words(text, boundaries=False):
    """A text's normalised, lower-cased words; with `boundaries`, clause ends as BOUNDARY entries."""
    text = _lower(unicodedata.normalize("NFKC", text)).replace("\u2019", "'")
    if boundaries:
        text = CLAUSE_END.sub(f" {BOUNDARY} ", text)
    out, current = [], []
    for c in text + " ":
        if _is_word_char(c, boundaries):
            current.append(c)
        elif current:
            word = "".join(current).strip("'")
            if word:
                out.append(word)
            current = []
    return out


def _row_ids(text, buckets, max_tokens, negation_scope):
    ws = words(text, boundaries=negation_scope > 0)
    last_negator = last_stop = -1
    kept, negated = [], []
    for i, w in enumerate(ws):
        boundary = negation_scope > 0 and w == BOUNDARY
        if boundary or i == 0:
            last_stop = i
        if w in NEGATORS or w.endswith("n't"):
            last_negator = i
        gap = i - last_negator
        if not boundary:
            kept.append(zlib.crc32(w.encode("utf-8")))
            negated.append(negation_scope > 0 and last_negator >= 0 and last_negator >= last_stop
                           and 1 <= gap <= negation_scope)
    spread = buckets - 1
    row = [0] * max_tokens
    for p, h in enumerate(kept):
        slot = max(2 * p - 1, 0)
        if slot >= max_tokens:
            break
        row[slot] = ((h ^ NEGATED_SALT) if negated[p] else h) % spread + 1
        if p > 0 and 2 * p < max_tokens:
            mixed = ((kept[p - 1] * 0x9E3779B1 + h * 0x85EBCA77) & MASK64) ^ 0xB5
            row[2 * p] = mixed % spread + 1
    return row


def hashed_tokens(texts, buckets, max_tokens, negation_scope=0):
    """(rows, max_tokens) bucket ids of unigrams and bigrams, 0 = padding, as lists of ints."""
    return [_row_ids(text, buckets, max_tokens, negation_scope) for text in texts]

# ---------------------------------------------------------------------------------------------- program checks
PT2_MEMBERS_LIMIT = 10_000
PT2_JSON_LIMIT = 64 * 2**20  # bytes of one JSON member (a graph of this project's models is well under 1 MiB)
PT2_TEXT_MEMBERS = {"archive_format": r"pt2", "archive_version": r"\d{1,9}", "byteorder": r"little|big",
                    ".data/version": r"\d{1,9}\s*", ".data/serialization_id": r"[A-Za-z0-9]{1,128}"}
_PT2_NAME = re.compile(r"[A-Za-z0-9_.-]{1,200}(?:/[A-Za-z0-9_.-]{1,200}){0,16}")
_PT2_PLAIN = re.compile(r"[A-Za-z0-9_]{1,200}")
# sympy's srepr of shape expressions: Symbol('s77', positive=True, integer=True), Mul(Integer(2), ...)
_EXPR_TOKEN = re.compile(r"\s+|[A-Za-z][A-Za-z0-9_]*|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|'[A-Za-z0-9_]*'"
                         r"|==|!=|<=|>=|\*\*|[-+*/%(),=<>]")
_EXPR_CALLS = frozenset((
    "Symbol", "Integer", "Rational", "Float", "Add", "Mul", "Pow", "Max", "Min", "Mod", "Abs", "Eq", "Ne", "Lt",
    "Le", "Gt", "Ge", "StrictLessThan", "StrictGreaterThan", "LessThan", "GreaterThan", "Equality", "Unequality",
    "And", "Or", "Not", "Piecewise", "ExprCondPair", "floor", "ceiling",
    # torch.utils._sympy.functions, as torch's deserializer names them
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "CleanDiv", "CeilToInt", "FloorToInt", "CeilDiv", "LShift",
    "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv", "IntTrueDiv", "IsNonOverlappingAndDenseIndicator",
    "TruncToFloat", "TruncToInt", "RoundToInt", "RoundDecimal", "ToFloat", "Identity"))
_PT2_HINT = "refused before torch.export.load, which would run it (re-export it, or use --format safetensors)"


class UnsafeExport(ValueError):
    """An export this loader will not open; str() is the one-line reason."""


def model_file(folder, name):
    """The path of the export's model file `name` (manifest.json's "file"): a plain name in `folder` (no folder
    part, `..` or absolute path), a regular file and not a link; UnsafeExport otherwise."""
    if (not isinstance(name, str) or name in ("", ".", "..") or os.path.basename(name) != name
            or "\\" in name or "\0" in name):
        raise UnsafeExport(f"manifest.json: the model file {ascii(name)[:80]} is not a file name in the export "
                           f"folder: refused (the model file lies beside manifest.json)")
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
    flags = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
             | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    name = os.path.basename(path)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise UnsafeExport(f"{name}: cannot open it: {exc.strerror or type(exc).__name__} (a link is refused)") \
            from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafeExport(f"{name} is not a regular file: refused")
    return os.fdopen(fd, "rb")


def load_program(path):
    """torch.export.load(path).module(), once check_program found nothing in the archive that would run code.
    The archive is checked and loaded through one open file, so it cannot be swapped in between."""
    import torch

    with open_regular(path) as f:
        check_program(f, os.path.basename(path))
        f.seek(0)
        return torch.export.load(f).module()


def _is_pickle(head):
    """A pickle of protocol 2 and later starts with the PROTO opcode; torch.save writes a zip holding one."""
    return (len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5) or head.startswith(b"PK\x03\x04")


def check_program(file, label="model.pt2"):
    """Refuse (UnsafeExport, one line) a torch.export archive holding what torch.export.load would run as
    Python: a pickle (legacy weights or constants, a tensor marked use_pickle, opaque or custom objects, example
    inputs, a pickle's bytes under any name), guard code, a shape expression beyond sympy constructors; or a
    member torch.export.save does not write, an odd or duplicate member name, a link. Only small members are
    read (raw tensors never are); nothing is extracted. `file`: a path or a seekable binary file; `label`:
    the name messages give it."""

    def refuse(member, why):
        raise UnsafeExport(f"{label}: {member} {why}; {_PT2_HINT}")

    try:
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise UnsafeExport(f"{label} is not a torch.export program (not a readable zip archive: {exc})") from None
    with archive:
        members = _members(archive, label, refuse)

        def read(member, limit):
            if members[member].file_size > limit:
                refuse(member, f"is {members[member].file_size:,} bytes, more than it may be ({limit:,})")
            try:
                with archive.open(members[member]) as f:
                    payload = f.read(limit + 1)
            except Exception as exc:  # noqa: BLE001 - zipfile, zlib and the OS each raise their own
                refuse(member, f"cannot be read ({type(exc).__name__})")
            if _is_pickle(payload[:4]):
                refuse(member, "is a pickle (Python code runs when it is loaded)")
            if len(payload) > limit:
                refuse(member, f"is more than it may be ({limit:,} bytes)")
            return payload

        def read_json(member):
            try:
                value = json.loads(read(member, PT2_JSON_LIMIT).decode("utf-8"))
            except (UnicodeDecodeError, ValueError, RecursionError):
                refuse(member, "is not valid JSON")
            if not isinstance(value, dict):
                refuse(member, "is not a JSON object")
            return value

        for member, pattern in PT2_TEXT_MEMBERS.items():
            if member in members and not re.fullmatch(pattern, read(member, 256).decode("ascii", "replace")):
                refuse(member, "does not hold what torch.export.save writes there")
        if "archive_format" not in members or "archive_version" not in members:
            raise UnsafeExport(f"{label} is not a torch.export program (no archive_format or archive_version)")
        models = [m[7:-5] for m in members if m.startswith("models/") and m.endswith(".json")]
        if not models:
            raise UnsafeExport(f"{label} is not a torch.export program (no models/*.json)")
        allowed, raw = set(PT2_TEXT_MEMBERS), set()
        for model in models:
            graph = f"models/{model}.json"
            if not _PT2_PLAIN.fullmatch(model):
                refuse(graph, "is not a plain model name")
            allowed.add(graph)
            _check_graph(read_json(graph), lambda why, graph=graph: refuse(graph, why))
            for folder, kind, prefix in (("data/weights/", "weights", ""), ("data/constants/", "constants", "tensor_")):
                if f"{folder}{model}.pt" in members:
                    refuse(f"{folder}{model}.pt", f"is a pickle (the legacy {kind} layout, unpickled when loaded)")
                config = f"{folder}{model}_{kind}_config.json"
                if config not in members:
                    refuse(config, "is missing")
                allowed.add(config)
                entries = read_json(config).get("config")
                if not isinstance(entries, dict):
                    refuse(config, "has no config object")
                for fqn, meta in entries.items():
                    what = f"{config} ({ascii(fqn)[:60]})"
                    if not isinstance(meta, dict):
                        refuse(what, "is not an object")
                    if meta.get("use_pickle") is not False:
                        refuse(what, "marks a tensor use_pickle (stored as a pickle, unpickled when loaded)")
                    path_name = meta.get("path_name")
                    if (not isinstance(path_name, str) or not _PT2_PLAIN.fullmatch(path_name)
                            or not path_name.startswith(prefix) or not isinstance(meta.get("tensor_meta"), dict)):
                        refuse(what, f"names {ascii(path_name)[:60]}, not a raw tensor member")
                    if folder + path_name not in members:
                        refuse(what, f"names {path_name}, which is not in the archive")
                    raw.add(folder + path_name)  # read by torch as bytes, never unpickled: any content is fine
            sample = f"data/sample_inputs/{model}.pt"
            if sample in members and members[sample].file_size:
                _refuse_pickle_head(archive, members[sample], refuse)
                refuse(sample, "holds example inputs saved with torch.save (a pickle)")
            allowed.add(sample)
        for member in members:
            if member not in allowed and member not in raw:
                _refuse_pickle_head(archive, members[member], refuse)
                refuse(member, "is not part of a program export (raw tensors, JSON and version text are)")


def _members(archive, label, refuse):
    """inner name -> ZipInfo of an archive's members, refusing odd names, links, duplicates, more than one root."""
    infos = archive.infolist()
    if len(infos) > PT2_MEMBERS_LIMIT:
        raise UnsafeExport(f"{label} holds {len(infos):,} members, more than a program export has: refused")
    members, root = {}, None
    for info in infos:
        name = info.filename
        parts = name.split("/")
        if not _PT2_NAME.fullmatch(name) or "." in parts or ".." in parts or len(parts) < 2:
            refuse(ascii(name)[:80], "is not a plain member name (a folder, `..` or an absolute path)")
        if stat.S_ISLNK(info.external_attr >> 16):
            refuse(name, "is a symbolic link")
        if info.flag_bits & 0x1:
            refuse(name, "is encrypted")
        root = parts[0] if root is None else root
        if parts[0] != root:
            refuse(name, f"lies outside the archive's root folder {root}/")
        inner = name[len(root) + 1:]
        if inner in members:
            refuse(name, "appears twice in the zip (readers may disagree on which one is meant)")
        members[inner] = info
    return members


def _refuse_pickle_head(archive, info, refuse):
    """Refuse a member whose first bytes are a pickle's (named as one, whatever else is wrong with it)."""
    try:
        with archive.open(info) as f:
            head = f.read(4)
    except Exception:  # noqa: BLE001 - unreadable: refused as not part of an export just after
        return
    if _is_pickle(head):
        refuse(info.filename.split("/", 1)[-1], "is a pickle (Python code runs when it is loaded)")


def _check_graph(graph, refuse):
    """The graph JSON's Python: no guard code, and shape expressions of sympy constructors only."""
    if graph.get("guards_code"):
        refuse("holds guards_code (Python source run by .module())")
    stack = [graph]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "expr_str":
                    _check_expression(item, refuse)
                else:
                    stack.append(item)
        elif isinstance(value, list):
            stack.extend(value)


def _check_expression(text, refuse):
    """A shape expression as sympy.sympify (eval) reads it: numbers, 'names', operators, keyword arguments and
    calls of known sympy constructors; no attribute access, subscript, other call, or quote of anything else."""
    if not isinstance(text, str) or len(text) > 10_000:
        refuse("holds a shape expression that is not a short string")
    tokens = [t for t in _EXPR_TOKEN.findall(text) if not t.isspace()]
    if "".join(tokens) != "".join(text.split()):
        refuse(f"holds the shape expression {ascii(text)[:60]}, which is not a sympy expression of numbers and names")
    before = None
    for token in tokens:
        if token == "(" and before is not None and (before == ")" or before[0] in "'0123456789"
                                                    or (before[0].isalpha() and before not in _EXPR_CALLS)):
            refuse(f"calls {before}(...) in a shape expression (only sympy constructors may be called)")
        before = token


# ---------------------------------------------------------------------------------------------- the command line
MAX_REQUEST_BYTES = 1 << 20  # a JSON line, a CSV field or an HTTP body
REQUEST_TIMEOUT = 30.0  # seconds an HTTP connection may stay silent (and a body may take to arrive)
CHUNK_ROWS = 512  # rows of a file predicted at a time
REPORTED = 20  # bad CSV lines reported one by one on stderr; the rest are counted
_DRAIN_LIMIT = 16 << 20  # bytes of a refused body read and dropped, so that the client sees the 413
_FLOAT32_MAX = 3.4028234663852886e38
_ESCAPED = re.compile("[\udc80-\udcff]")  # a byte that is not UTF-8, as errors="surrogateescape" reads it
_NUMBER = re.compile(r"\s*[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?\s*")
# amp-console predict's column aliases (core.data.importers.ALIASES), compared as _normal names
_ALIASES = {"text": ("sentence", "review", "reviewtext", "content"),
            "history": ("histories", "lessons", "items", "sequence"),
            "userid": ("user", "uid"), "queryid": ("qid", "query"), "docid": ("did",)}
_CANONICAL = {alias: name for name, aliases in _ALIASES.items() for alias in aliases}
_COPIED = {"sentiment": (), "tiny": (), "ranking": ("query_id", "doc_id", "label"), "recommender": ("user_id",)}


class RowError(ValueError):
    """A row (or a line, or a request) the model cannot take; str() is the one-line reason."""


@functools.lru_cache(maxsize=4096)  # a file's rows repeat its header's names
def _normal(name):
    """A column name as amp-console predict compares it: lower case, without blanks, "_" and "-"."""
    return re.sub(r"[\s_-]+", "", str(name)).lower()


def _kind(value):
    """What a JSON value is, in words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (int, float)):
        return "a number"
    return "a list" if isinstance(value, list) else "an object"


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
    inputs, and its answers as dicts (see the module doc)."""

    def __init__(self, served, k=10):
        self.served, self.task, self.k = served, served.task, k
        self.width = served._width() if self.task in ("tiny", "ranking") else None
        classes = (served.manifest.get("serving") or {}).get("classes", 2)
        self.answer_columns = {"sentiment": ["p_positive", "predicted"], "recommender": ["items", "scores"],
                               "ranking": ["score"],
                               "tiny": [f"p{c}" for c in range(classes)] + ["predicted"]}[self.task]

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
            kwargs = {"k": self.k} if self.task == "recommender" else {}
            results = self.served.predict([x for x, _copied in inputs], **kwargs)
            for i, (_x, copied), result in zip(good, inputs, results):
                out[i] = {**copied, **self._shape(result)}
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
            if name in _CANONICAL:
                values.setdefault(_CANONICAL[name], value)  # the column's own name wins over an alias
            else:
                values[name] = value
        copied = {}
        for name in _COPIED[self.task]:
            value = values.get(_normal(name))
            if value is not None and not isinstance(value, (str, int, float)):
                raise RowError(f"{name} is {_kind(value)}, not an id")
            if value is not None:
                copied[name] = value
        if self.task == "sentiment":
            text = values.get("text")
            if not isinstance(text, str):
                raise RowError("no text column" if text is None else f"text is {_kind(text)}, not a string")
            if not text.strip():
                raise RowError("text is empty")
            return text, copied
        if self.task == "recommender":
            return _history(values.get("history")), copied
        prefix = "f" if self.task == "ranking" or ("f1" in values and "x1" not in values) else "x"
        return [_number(values, f"{prefix}{i}") for i in range(1, self.width + 1)], copied

    def _shape(self, result):
        if self.task == "sentiment":
            return {"p_positive": _finite(result), "predicted": "positive" if result >= 0.5 else "negative"}
        if self.task == "recommender":
            return {"items": [lesson for lesson, _score in result], "scores": [_finite(s) for _l, s in result]}
        if self.task == "ranking":
            return {"score": _finite(result)}
        answer = {f"p{c}": _finite(p) for c, p in enumerate(result)}
        answer["predicted"] = max(range(len(result)), key=result.__getitem__)
        return answer

    def csv_columns(self, header):
        """The CSV output's columns for an input with `header`."""
        present = {_normal(name) for name in header}
        copied = [name for name in _COPIED[self.task] if _normal(name) in present
                  or set(_ALIASES.get(_normal(name), ())) & present]
        if self.task == "recommender":
            return ["line", *copied, "rank", "item_id", "score"]
        return ["line", *copied, *self.answer_columns]

    def csv_rows(self, line, answer, columns):
        if self.task != "recommender":
            return [[line if c == "line" else answer.get(c, "") for c in columns]]
        head = [line] + [answer.get(c, "") for c in columns[1:-3]]
        return [head + [rank, item, score] for rank, (item, score) in
                enumerate(zip(answer["items"], answer["scores"]), 1)]


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


def _history(value):
    """A recommender row's lesson ids: text split as predict splits its history column, or a JSON list."""
    if value is None:
        raise RowError("no history column (lesson ids separated by spaces)")
    if isinstance(value, str):
        ids = _split_history(value)
    elif isinstance(value, list):
        bad = [v for v in value if isinstance(v, bool) or not isinstance(v, (str, int, float))]
        if bad:
            raise RowError(f"history holds {_kind(bad[0])}, not a lesson id")
        ids = value
    else:
        raise RowError(f"history is {_kind(value)}: give lesson ids separated by spaces, or a list")
    if not ids:
        raise RowError("history is empty")
    return ids


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


def answer_documents(rows, documents):
    """The answer to each (line, JSON document or RowError): its JSON value or a RowError. The rows of all of
    them are predicted together; when the model fails on that, each document is tried on its own, so that only
    the one it fails on is lost."""
    answers, requests = {}, {}
    for n, document in documents:
        try:
            if isinstance(document, RowError):
                raise document
            requests[n] = _requests(document)
        except RowError as exc:
            answers[n] = exc
    try:
        results = iter(rows.answer([row for batch, _b in requests.values() for row in batch]))
    except Exception as exc:  # noqa: BLE001 - the model's failure is one line for its request
        if len(requests) > 1:
            return [answer_documents(rows, [(n, d)])[0] for n, d in documents]
        results, failure = None, RowError(f"the model failed: {_line(exc)}")
    for n, (batch, is_batch) in requests.items():
        answers[n] = failure if results is None else _collect([next(results) for _ in batch], is_batch)
    return [answers[n] for n, _d in documents]


def _read_lines(stream, limit):
    """(line number, bytes or RowError) of each line of a binary stream; a line over `limit` bytes is skipped
    (read in pieces, never held) and reported."""
    number = 0
    while True:
        raw = stream.readline(limit + 1)
        if not raw:
            return
        number += 1
        if len(raw) > limit and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = stream.readline(1 << 16)
            yield number, RowError(f"more than {limit:,} bytes (--max-request-bytes)")
            continue
        yield number, raw


def _document(number, raw):
    """The JSON document of a line (None for a blank one), or RowError."""
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
        return parse_json(text)
    except RowError as exc:
        return exc


def serve_json_lines(rows, stream, out, limit, one_at_a_time):
    """Answer each JSON line of the binary `stream` with a JSON line on `out`, an error as {"line": N, "error"};
    `one_at_a_time`: each as soon as its line is read (stdin), else up to CHUNK_ROWS rows predicted together."""
    pending, size = [], 0

    def flush():
        for (n, _d), answer in zip(pending, answer_documents(rows, pending)):
            if isinstance(answer, RowError):
                answer = {"line": n, "error": str(answer)}
            out.write(json.dumps(answer, allow_nan=False) + "\n")
        out.flush()
        pending.clear()

    for number, raw in _read_lines(stream, limit):
        document = _document(number, raw)
        if document is None:
            continue
        pending.append((number, document))
        size += len(document) if isinstance(document, list) else 1
        if one_at_a_time or size >= CHUNK_ROWS:
            flush()
            size = 0
    flush()


def serve_csv(rows, path, out, err, limit):
    """Answer each row of the CSV file `path` (a header line, then rows) with CSV rows on `out`; a bad line is
    reported on `err` (the first REPORTED, then a count). Returns the number of bad lines."""
    import csv

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
        if all(_NUMBER.fullmatch(name) for name in header):
            raise RowError(f"{path}: line 1 holds numbers, not column names: add a header line naming the columns")
        columns = rows.csv_columns(header)
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(columns)
        chunk = []

        def flush():
            for (line, _row), answer in zip(chunk, answer_documents(rows, chunk)):
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


def serve_http(rows, address, limit, timeout, quiet=False, err=None):
    """Serve POST /predict and GET /health on `address` ("HOST:PORT", "PORT", "[::1]:PORT") until interrupted;
    the log on `err` (stderr)."""
    import http.server
    import socket
    import socketserver
    import threading
    import time
    from urllib.parse import urlsplit

    err = err or sys.stderr
    host, port = _address(address)
    lock = threading.Lock()  # one prediction at a time: the model's threads are the CPU's, not the clients'
    health = {"status": "ok", "task": rows.task, "format": rows.served.manifest.get("format"),
              "step": rows.served.manifest.get("step")}
    routes = {"/predict": "POST", "/health": "GET"}

    class Handler(http.server.BaseHTTPRequestHandler):
        default_request_version = "HTTP/1.0"  # a garbled request line is answered with a status line too

        def version_string(self):
            return "amp-console-serve"

        def finish(self):
            """Read what the client sent that no one read (a refused body) before the connection closes:
            closing over unread bytes resets it, which can destroy the answer before the client reads it."""
            super().finish()
            try:
                self.connection.setblocking(False)
                left = _DRAIN_LIMIT
                while left > 0:
                    piece = self.connection.recv(1 << 16)
                    if not piece:
                        break
                    left -= len(piece)
            except OSError:
                pass

        def setup(self):
            self.timeout = timeout  # StreamRequestHandler sets it on the socket: every read waits this long at most
            super().setup()

        def do_GET(self):
            self._route()

        do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = do_GET

        def _route(self):
            path = urlsplit(self.path).path
            method = routes.get(path)
            if method is None:
                return self._reply(404, {"error": f"no such path {_shown(path)}: POST /predict or GET /health"})
            if self.command != method:
                return self._reply(405, {"error": f"{path} takes {method}, not {_shown(self.command)[1:-1]}"},
                                   Allow=method)
            if path == "/health":
                return self._reply(200, health)
            try:
                document = parse_json(self._body())
                with lock:
                    answer = _collect(rows.answer(_requests(document)[0]), isinstance(document, list))
                if isinstance(answer, RowError):
                    raise answer
            except _Refused as exc:
                return self._reply(exc.status, {"error": str(exc)}, close=True)
            except RowError as exc:
                return self._reply(400, {"error": str(exc)})
            except Exception as exc:  # noqa: BLE001 - the model's failure: one line to the client and the log
                self.log_error("the model failed: %s", _line(exc))
                return self._reply(500, {"error": f"the model failed: {_line(exc)}"})
            self._reply(200, answer)

        def _body(self):
            """The request body as text: refused (_Refused) without a Content-Length, over the limit, not
            arriving in time, or cut short."""
            if self.headers.get("Transfer-Encoding"):
                raise _Refused(411, "send the body with a Content-Length (chunked bodies are not read)")
            lengths = self.headers.get_all("Content-Length") or []
            if not lengths:
                raise _Refused(411, "POST /predict needs a Content-Length")
            if len(lengths) > 1 or not re.fullmatch(r"\s*\d{1,19}\s*", lengths[0]):
                raise _Refused(400, f"Content-Length {_shown(', '.join(lengths))} is not one number of bytes")
            length = int(lengths[0])
            if length > limit:
                self._drain(length)
                raise _Refused(413, f"the body is {length:,} bytes, more than {limit:,} (--max-request-bytes)")
            deadline, data = time.monotonic() + timeout, bytearray()
            while len(data) < length:
                try:
                    piece = self.rfile.read1(min(1 << 16, length - len(data)))
                except TimeoutError:
                    piece = None
                if piece is None or time.monotonic() > deadline:
                    raise _Refused(408, f"the body did not arrive within {timeout:g} s")
                if not piece:
                    raise _Refused(400, f"the body ended after {len(data):,} of its {length:,} bytes "
                                        f"(Content-Length)")
                data += piece
            try:
                return data.decode("utf-8")
            except UnicodeDecodeError:
                raise RowError("the body is not UTF-8 text") from None

        def _drain(self, length):
            """Read and drop a refused body (up to _DRAIN_LIMIT, while it keeps coming): a client that sends it
            all before reading then gets the 413, not a reset connection."""
            left = length if length <= _DRAIN_LIMIT else 0
            try:
                while left > 0:
                    piece = self.rfile.read1(min(1 << 16, left))
                    if not piece:
                        break
                    left -= len(piece)
            except OSError:
                pass

        def _reply(self, status, value, close=False, **headers):
            body = (json.dumps(value, allow_nan=False) + "\n").encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, text in headers.items():
                self.send_header(name, text)
            if close:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def send_error(self, code, message=None, explain=None):
            """http.server's own refusals (a malformed request line, headers too long, ...) as JSON too."""
            try:
                self._reply(code, {"error": _line(message or self.responses.get(code, ("refused",))[0])},
                            close=True)
            except OSError:
                self.close_connection = True

        def log_message(self, format, *args):
            if not quiet:
                err.write(_line(f"{self.address_string()} - {format % args}") + "\n")

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

        def server_bind(self):  # HTTPServer's would look the host name up (socket.getfqdn): no need, and slow
            socketserver.TCPServer.server_bind(self)
            self.server_name, self.server_port = host, self.server_address[1]

        def handle_error(self, request, client_address):
            err.write(_line(f"serve.py: {client_address[0]}: {sys.exc_info()[1]!r}") + "\n")

    try:
        server = Server((host, port), Handler)
    except OSError as exc:
        raise RowError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    shown = f"[{host}]" if ":" in host else host
    if not is_loopback(host):
        err.write(f"serve.py: warning: listening on {shown}, not loopback: anyone who can reach this port can use "
                  f"the model (no authentication, no TLS)\n")
    err.write(f"serve.py: serving the {rows.task} model on http://{shown}:{server.server_address[1]} "
              f"(POST /predict, GET /health; Ctrl-C stops)\n")
    err.flush()
    with server:
        server.serve_forever(poll_interval=0.5)


class _Refused(Exception):
    """A request refused before its body is read, with its HTTP status."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def is_loopback(host):
    """Whether `host` names this machine's loopback only (127.0.0.0/8, ::1, localhost)."""
    import ipaddress

    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _address(text):
    """(host, port) of "HOST:PORT", "[IPV6]:PORT" or "PORT" (on 127.0.0.1)."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or int(port) > 65535:
        raise RowError(f"--http {_shown(text)[1:-1]}: give HOST:PORT, e.g. 127.0.0.1:8000")
    return host, int(port)


def main(argv=None):
    """The command line (see the module doc); the exit status."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="serve.py", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Predict with this AMP Console export: rows of a .csv or .jsonl file (answers on stdout as CSV "
                    "or JSON lines), JSON lines on stdin (-), or HTTP (--http).",
        epilog=__doc__.split("From the command line", 1)[1].split("\nThe HTTP server", 1)[0].split("\n", 1)[1])
    parser.add_argument("input", nargs="?", metavar="INPUT", help="a .csv or .jsonl file of rows, or - to read "
                                                                   "JSON lines from stdin until EOF")
    parser.add_argument("--http", metavar="HOST:PORT", help="serve POST /predict and GET /health instead (a "
                                                            "non-loopback HOST is reachable from other machines)")
    parser.add_argument("--export", metavar="FOLDER", default=str(Path(__file__).resolve().parent),
                        help="the export folder (default: the folder serve.py lies in)")
    parser.add_argument("--k", type=int, default=10, help="recommender: lessons per history (default 10)")
    parser.add_argument("--max-request-bytes", type=int, default=MAX_REQUEST_BYTES, metavar="N",
                        help=f"the largest JSON line, CSV field or HTTP body (default {MAX_REQUEST_BYTES:,})")
    parser.add_argument("--timeout", type=float, default=REQUEST_TIMEOUT, metavar="SECONDS",
                        help=f"HTTP: a connection silent this long is closed (default {REQUEST_TIMEOUT:g})")
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
    suffix = Path(args.input or "").suffix.lower()
    if args.input not in (None, "-") and suffix not in (".csv", ".jsonl", ".ndjson"):
        parser.error(f"{args.input}: give a .csv or .jsonl file (or - for JSON lines on stdin)")
    if args.input not in (None, "-") and not os.path.isfile(args.input):
        return _fail(f"{args.input}: no such file")
    if not os.path.isfile(os.path.join(args.export, "manifest.json")):
        return _fail(f"{args.export}: no manifest.json: name the export folder with --export FOLDER")
    try:
        rows = Rows(load(args.export), args.k)
    except Exception as exc:  # noqa: BLE001 - any reason the export cannot load is one line
        return _fail(f"cannot load the export in {args.export}: {_line(exc)}")
    try:
        if args.http is not None:
            serve_http(rows, args.http, args.max_request_bytes, args.timeout, args.quiet)
        elif args.input == "-":
            serve_json_lines(rows, sys.stdin.buffer, sys.stdout, args.max_request_bytes, one_at_a_time=True)
        elif suffix == ".csv":
            serve_csv(rows, args.input, sys.stdout, sys.stderr, args.max_request_bytes)
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


if __name__ == "__main__":
    sys.exit(main())
