"""serve.py's checks of a torch.export program (model.pt2) before torch.export.load reads it: what would run as
Python (a pickle, guard code, a shape expression beyond sympy constructors) is refused, and so is anything
torch.export.save does not write. Standard library only; it travels beside serve.py in every export, which loads it
for a program export (the project's export checks what it writes through serve.py too).
"""

from __future__ import annotations

import json
import re
import stat
import zipfile

PT2_MEMBERS_LIMIT = 10_000
PT2_JSON_LIMIT = 64 * 2**20  # bytes of one JSON member (a graph of this project's models is well under 1 MiB)
PT2_TEXT_MEMBERS = {
    "archive_format": r"pt2",
    "archive_version": r"\d{1,9}",
    "byteorder": r"little|big",
    ".data/version": r"\d{1,9}\s*",
    ".data/serialization_id": r"[A-Za-z0-9]{1,128}",
}
_PT2_NAME = re.compile(r"[A-Za-z0-9_.-]{1,200}(?:/[A-Za-z0-9_.-]{1,200}){0,16}")
_PT2_PLAIN = re.compile(r"[A-Za-z0-9_]{1,200}")
# sympy's srepr of shape expressions: Symbol('s77', positive=True, integer=True), Mul(Integer(2), ...)
_EXPR_TOKEN = re.compile(
    r"\s+|[A-Za-z][A-Za-z0-9_]*|\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|'[A-Za-z0-9_]*'"
    r"|==|!=|<=|>=|\*\*|[-+*/%(),=<>]"
)
# the sympy constructors a shape expression may call, then torch.utils._sympy.functions' as torch's deserializer names them
_EXPR_CALLS = frozenset(
    """Symbol Integer Rational Float Add Mul Pow Max Min Mod Abs Eq Ne Lt Le Gt Ge StrictLessThan StrictGreaterThan
    LessThan GreaterThan Equality Unequality And Or Not Piecewise ExprCondPair floor ceiling
    FloorDiv ModularIndexing Where PythonMod CleanDiv CeilToInt FloorToInt CeilDiv LShift RShift PowByNatural FloatPow
    FloatTrueDiv IntTrueDiv IsNonOverlappingAndDenseIndicator TruncToFloat TruncToInt RoundToInt RoundDecimal ToFloat
    Identity""".split()
)
_PT2_HINT = "refused before torch.export.load, which would run it (re-export it, or use --format safetensors)"


class Refused(ValueError):
    """A program check_program refuses; str() is the one-line reason (serve.py's UnsafeExport)."""


def _is_pickle(head):
    """A pickle of protocol 2 and later starts with the PROTO opcode; torch.save writes a zip holding one."""
    return (len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5) or head.startswith(b"PK\x03\x04")


# The archive check_program reads (torch/export/pt2_archive) is a zip whose members lie under one root folder:
# - `archive_format`, `archive_version`, `byteorder`, `.data/version`, `.data/serialization_id`: text;
# - `models/<m>.json`: the graph; torch runs `guards_code` and every shape expression `expr_str` (sympify: eval);
# - `data/weights/<m>_weights_config.json`, `data/constants/<m>_constants_config.json`: per tensor its member and
#   `use_pickle` (false: raw bytes read as a storage; true: torch.load(weights_only=False));
# - pickles: `data/weights/<m>.pt`, `data/constants/<m>.pt`, constants `custom_obj_*` and `opaque_obj_*`,
#   `data/sample_inputs/<m>.pt` (empty when there are none);
# - `data/aotinductor/`, `extra/` and the rest: not part of an export.
def check_program(file, label="model.pt2"):
    """Refuse (Refused, one line) an archive holding any of the above that runs as Python, a member
    torch.export.save does not write, an odd or duplicate member name, a link. Only small members are read,
    nothing is extracted. `file`: a path or a seekable binary file; `label`: the name messages give it."""

    def refuse(member, why):
        raise Refused(f"{label}: {member} {why}; {_PT2_HINT}")

    try:
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise Refused(f"{label} is not a torch.export program (not a readable zip archive: {exc})") from None
    with archive:
        members = _members(archive, label, refuse)

        def read(member, limit):
            if members[member].file_size > limit:
                refuse(member, f"is {members[member].file_size:,} bytes, more than it may be ({limit:,})")
            try:
                with archive.open(members[member]) as f:
                    payload = f.read(limit + 1)
            except Exception as exc:
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
            raise Refused(f"{label} is not a torch.export program (no archive_format or archive_version)")
        models = [m[7:-5] for m in members if m.startswith("models/") and m.endswith(".json")]
        if not models:
            raise Refused(f"{label} is not a torch.export program (no models/*.json)")
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
                    if (
                        not isinstance(path_name, str)
                        or not _PT2_PLAIN.fullmatch(path_name)
                        or not path_name.startswith(prefix)
                        or not isinstance(meta.get("tensor_meta"), dict)
                    ):
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
        raise Refused(f"{label} holds {len(infos):,} members, more than a program export has: refused")
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
        inner = name[len(root) + 1 :]
        if inner in members:
            refuse(name, "appears twice in the zip (readers may disagree on which one is meant)")
        members[inner] = info
    return members


def _refuse_pickle_head(archive, info, refuse):
    """Refuse a member whose first bytes are a pickle's (named as one, whatever else is wrong with it)."""
    try:
        with archive.open(info) as f:
            head = f.read(4)
    except Exception:
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
        if (
            token == "("
            and before is not None
            and (before == ")" or before[0] in "'0123456789" or (before[0].isalpha() and before not in _EXPR_CALLS))
        ):
            refuse(f"calls {before}(...) in a shape expression (only sympy constructors may be called)")
        before = token
