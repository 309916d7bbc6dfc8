"""Exports from someone else, and exports that end cleanly: a crafted model.pt2 (pickled weights, constants or
example inputs, guard code, a shape expression that is Python) is refused by serve.py before torch.export.load
runs any of it; a manifest whose model file lies outside the export folder is refused; the manifest says which
formats are data and which code; a name too long for the file system or a full disk is one line and leaves no
partial folder."""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import pickle
import shutil
import warnings
import zipfile
from pathlib import Path

import pytest

from core.cli.main import main
from core.errors import ConfigError
from core.runs.export import export_model
from core.runs.serve import UnsafeExport, check_program

pytestmark = pytest.mark.reliability


class Payload:
    """Unpickled, it creates `marker`: the proof that loading ran code from the file."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').close()",)


@pytest.fixture(scope="module")
def program_export(trained_runs, tmp_path_factory) -> Path:
    """A program export of the shared tiny run (read-only: tests work on a copy)."""
    folder = tmp_path_factory.mktemp("export") / "tiny"
    export_model(trained_runs["tiny"].checkpoint, folder, "program")
    return folder


def serve_module(folder: Path):
    """The export's own serve.py, imported from its folder (as a server would)."""
    spec = importlib.util.spec_from_file_location(f"serve_{abs(hash(folder))}", folder / "serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rewrite(pt2: Path, change) -> None:
    """Rewrite the archive `pt2`: `change(members, root)` edits {inner name: bytes} in place."""
    with zipfile.ZipFile(pt2) as archive:
        root = archive.namelist()[0].split("/")[0]
        members = {name.split("/", 1)[1]: archive.read(name) for name in archive.namelist()}
    change(members, root)
    with zipfile.ZipFile(pt2, "w") as archive:
        for name, data in members.items():
            archive.writestr(f"{root}/{name}", data)


def craft(members: dict, variant: str, marker: Path) -> None:
    bomb = pickle.dumps(Payload(marker), protocol=2)
    graph = json.loads(members["models/model.json"])
    if variant == "legacy weights":  # the legacy layout: a pickled state dict beside the new one
        members["data/weights/model.pt"] = bomb
    elif variant == "legacy constants":
        members["data/constants/model.pt"] = bomb
    elif variant == "weight marked use_pickle":
        config = json.loads(members["data/weights/model_weights_config.json"])
        first = next(iter(config["config"].values()))
        first.update(use_pickle=True, path_name="weight_payload")
        members["data/weights/model_weights_config.json"] = json.dumps(config).encode()
        members["data/weights/weight_payload"] = bomb
    elif variant == "opaque constant":
        config = json.loads(members["data/constants/model_constants_config.json"])
        config["config"]["payload"] = {
            "path_name": "opaque_obj_0",
            "is_param": False,
            "use_pickle": True,
            "tensor_meta": None,
        }
        members["data/constants/model_constants_config.json"] = json.dumps(config).encode()
        members["data/constants/opaque_obj_0"] = bomb
    elif variant == "example inputs":  # torch.load falls back to weights_only=False when weights_only fails
        members["data/sample_inputs/model.pt"] = bomb
    elif variant == "guard code":  # compiled by .module() into the guard function each call runs
        graph["guards_code"] = [f"open({str(marker)!r}, 'w').close() is None"]
    elif variant == "shape expression":  # parsed by sympy.sympify, which is eval
        values = graph["graph_module"]["graph"]["tensor_values"].values()  # the input's name is the task's own
        sizes = next(v["sizes"][0]["as_expr"] for v in values if "as_expr" in v["sizes"][0])
        sizes["expr_str"] = (
            f"Symbol.__new__.__globals__['__builtins__']['open']({str(marker)!r}, 'w').close() or {sizes['expr_str']}"
        )
    members["models/model.json"] = json.dumps(graph).encode()


VARIANTS = {
    "legacy weights": "data/weights/model.pt",
    "legacy constants": "data/constants/model.pt",
    "weight marked use_pickle": "use_pickle",
    "opaque constant": "model_constants_config.json",
    "example inputs": "data/sample_inputs/model.pt",
    "guard code": "guards_code",
    "shape expression": "shape expression",
}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_crafted_program_is_refused_before_it_runs_anything(program_export, tmp_path, variant):
    folder = Path(shutil.copytree(program_export, tmp_path / "export"))
    marker = tmp_path / "MARKER"
    rewrite(folder / "model.pt2", lambda members, _root: craft(members, variant, marker))
    serve = serve_module(folder)
    with pytest.raises(serve.UnsafeExport) as caught:
        serve.load(folder).predict([[0.0] * 10])  # guard code runs at the first call
    message = str(caught.value)
    assert not marker.exists(), "loading the export ran code from it"
    assert "\n" not in message and message.startswith("model.pt2: ") and VARIANTS[variant] in message
    assert "refused before torch.export.load" in message


@pytest.mark.parametrize(
    "name, why",
    [
        ("../escape", "not a plain member name"),
        ("/absolute", "not a plain member name"),
        ("data/weights/weight_0", "appears twice"),
        ("link", "symbolic link"),
        ("extra/notes.txt", "is a pickle"),
    ],
)
def test_odd_zip_members_and_pickles_under_any_name_are_refused(program_export, tmp_path, name, why):
    pt2 = tmp_path / "model.pt2"
    shutil.copy(program_export / "model.pt2", pt2)
    with zipfile.ZipFile(pt2) as archive:
        root = archive.namelist()[0].split("/")[0]
    with zipfile.ZipFile(pt2, "a") as archive, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # zipfile warns of the duplicate name it is asked to write
        info = zipfile.ZipInfo(name if name.startswith(("/", "..")) else f"{root}/{name}")
        if name == "link":
            info.external_attr = 0o120777 << 16
        archive.writestr(info, pickle.dumps({"any": "pickle"}, protocol=4) if name == "extra/notes.txt" else b"x")
    with pytest.raises(UnsafeExport, match=why) as caught:
        check_program(pt2)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("where", ["parent", "absolute", "link"])
def test_a_model_file_outside_the_export_folder_is_refused(program_export, tmp_path, where):
    folder = Path(shutil.copytree(program_export, tmp_path / "inner" / "export"))
    outside = tmp_path / "outside.pt2"
    (folder / "model.pt2").rename(outside)
    manifest = json.loads((folder / "manifest.json").read_text())
    if where == "link":
        (folder / "model.pt2").symlink_to(outside)
    else:
        manifest["file"] = "../../outside.pt2" if where == "parent" else str(outside)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    serve = serve_module(folder)
    with pytest.raises(serve.UnsafeExport) as caught:
        serve.load(folder)
    message = str(caught.value)
    assert "\n" not in message and ("symbolic link" if where == "link" else "not a file name") in message


@pytest.mark.parametrize("fmt, kind", [("program", "code"), ("safetensors", "data"), ("onnx", "data")])
def test_the_manifest_says_whether_the_format_is_data_or_code(trained_runs, tmp_path, fmt, kind):
    if fmt == "onnx":
        pytest.importorskip("onnxruntime")
        pytest.importorskip("onnxscript")
    folder = tmp_path / "export"
    export_model(trained_runs["tiny"].checkpoint, folder, fmt)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["format_kind"] == kind
    assert kind in manifest["safety"] and "\n" not in manifest["safety"]  # one line, saying it plainly
    if fmt == "program":  # what the project writes passes its own checks: no pickle in it, not even the inputs
        check_program(folder / "model.pt2")
        with zipfile.ZipFile(folder / "model.pt2") as archive:
            assert [i.file_size for i in archive.infolist() if "sample_inputs" in i.filename] == [0]
        assert serve_module(folder).load(folder).predict([[0.0] * 10])


def test_an_out_name_too_long_for_the_file_system_is_one_line(trained_runs, tmp_path, capsys):
    code = main(["export", str(trained_runs["tiny"].checkpoint), "--out", str(tmp_path / ("n" * 300))])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("amp-console:")]
    assert code == 2 and len(errors) == 1 and "too long for the file system" in errors[0], err
    assert "Traceback" not in err and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt, code", [("program", errno.ENOSPC), ("safetensors", errno.EDQUOT)])
def test_a_full_disk_is_one_line_and_leaves_no_partial_folder(trained_runs, tmp_path, monkeypatch, fmt, code):
    import core.files

    def fsync(fd):  # the last step of every atomic write
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(core.files.os, "fsync", fsync)
    out = tmp_path / "new" / "deep" / "export"
    with pytest.raises(ConfigError) as caught:
        export_model(trained_runs["tiny"].checkpoint, out, fmt)
    message = str(caught.value)
    assert "\n" not in message and f"{os.strerror(code)} (errno {code})" in message
    assert message.startswith(f"out: {out}: could not write the export") and message.endswith("nothing was written")
    assert list(tmp_path.iterdir()) == []  # neither the folder, the ones made for it, nor a staging folder
