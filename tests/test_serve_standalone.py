"""What the standalone serve.py is made of: its task-free parts beside it (core/runs/serve_*.py) and each task's
serving module (the serving part's `rows_module`, e.g. core/tasks/sentiment/sentiment_rows.py), real modules
imported and tested here directly; an export carries them all, byte for byte, and its manifest names the task's;
serve.py loads that module by a plain file name beside itself only. Exports written before the task's module
travelled with them (tests/fixtures/old_exports) are served by their own serve.py as they were; today's serve.py
says in one line what to do with one.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import torch

from core.runs import serve
from core.runs.export import SERVE_PARTS, export_model, serve_files
from core.tasks import TASKS

ROOT = Path(__file__).resolve().parents[1]
OLD = ROOT / "tests" / "fixtures" / "old_exports"
OLD_EXPORTS = sorted(p.name.removesuffix(".answers.json") for p in OLD.glob("*.answers.json"))


def rows_module(name):
    """The task's serving module for serve.py, imported as the project's module it is."""
    serving = TASKS[name]().serving()
    owner = next(cls for cls in type(serving).__mro__ if "rows_module" in vars(cls))
    module = importlib.import_module(f"{owner.__module__.rsplit('.', 1)[0]}.{serving.rows_module[:-3]}")
    assert Path(module.__file__).name == serving.rows_module
    return module


def imported(path: Path) -> set[str]:
    """The top-level packages a module imports (relative imports refused: it lies alone in an export)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: a relative import"
            names.add(node.module.split(".")[0])
    return names


# ---- what travels -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("part", SERVE_PARTS)
def test_serve_parts_import_only_the_standard_library(part):
    assert imported(ROOT / "core" / "runs" / part) <= set(sys.stdlib_module_names)


@pytest.mark.parametrize("name", list(TASKS))
def test_each_task_has_a_serving_module_of_the_standard_library(name):
    serving = TASKS[name]().serving()
    module = rows_module(name)
    assert serving.rows_source() == Path(module.__file__).read_bytes()
    assert imported(Path(module.__file__)) <= set(sys.stdlib_module_names)
    assert isinstance(module.ALIASES, dict) and not hasattr(module, "forward")  # no copy of the model
    for member in ("copied", "columns", "predict", "row_input", "answer"):
        assert hasattr(module.Serving, member) or member == "columns", (name, member)


def test_an_export_carries_serve_py_its_parts_and_the_tasks_module(trained_runs, tmp_path):
    folder = tmp_path / "export"
    result = export_model(trained_runs["tiny"].checkpoint, folder, "safetensors")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["serving_module"] == "feature_rows.py"
    for name, payload in serve_files(TASKS["tiny"]().serving()).items():
        assert (folder / name).read_bytes() == payload and name in result.files
    assert (folder / "feature_rows.py").read_bytes() == (ROOT / "core/tasks/feature_rows.py").read_bytes()
    with pytest.raises(serve.IncompleteExport, match="weights only.*--format program or --format onnx"):
        serve.load(folder)  # the weights alone: served as a program or ONNX export


# ---- each task's module on its own --------------------------------------------------------------------------------


class FakeServed:
    """What a task's Serving reads of serve.py's Served: the manifest, the input's width and the model's run."""

    def __init__(self, manifest, model):
        self.manifest, self.model = manifest, model

    def width(self):
        return self.manifest["inputs"][0]["shape"][-1]

    def run_array(self, rows, dtype):
        with torch.no_grad():
            return self.model(torch.tensor(rows, dtype=getattr(torch, dtype)))

    def run(self, rows, dtype):
        return self.run_array(rows, dtype).tolist()


def task_and_model(name, **options):
    task = TASKS[name](**options) if options else TASKS[name]()
    torch.manual_seed(0)
    return task, task.build_model({}).eval()


def manifest_of(name):
    task, model = task_and_model(name)
    serving = task.serving()
    sample = serving.sample_inputs(model, 4, 0)
    state = (
        {"vocabulary": {"items": [str(5000 + 3 * k) for k in range(model.items.num_embeddings - 1)]}}
        if name == "recommender"
        else {"vocabulary": {}}
    )
    manifest = {"inputs": [spec.entry() for spec in serving.inputs(model)], **serving.manifest(model, state, sample)}
    return manifest, serving.module(model, "program").eval()


def test_tiny_reads_x_or_f_columns_and_answers_probabilities():
    manifest, model = manifest_of("tiny")
    part = rows_module("tiny").Serving(FakeServed(manifest, model), serve.KIT)
    width = manifest["inputs"][0]["shape"][-1]
    xs = part.row_input({f"x{i}": float(i) for i in range(1, width + 1)})
    fs = part.row_input({f"f{i}": float(i) for i in range(1, width + 1)})
    assert xs == fs == [float(i) for i in range(1, width + 1)]
    with pytest.raises(serve.RowError, match="no x2 column"):
        part.row_input({"x1": 1.0})
    (one,) = part.predict(xs, 10)  # one point alone is a batch of one
    assert part.predict([xs], 10) == [one]
    answer = part.answer(one)
    assert set(answer) == set(part.columns) and answer["predicted"] == max(range(len(one)), key=one.__getitem__)
    with pytest.raises(ValueError, match=f"row 0: 1 numbers, the model takes {width}"):
        part.predict([[1.0]], 10)


def test_ranking_scores_one_candidate_one_query_or_queries_of_one_size():
    manifest, model = manifest_of("ranking")
    part = rows_module("ranking").Serving(FakeServed(manifest, model), serve.KIT)
    width = manifest["inputs"][0]["shape"][-1]
    a, b = [0.1] * width, [0.9] * width
    assert len(part.predict(a, 10)) == 1 and len(part.predict([a, b], 10)) == 2
    assert part.predict([[a, b], [b, a]], 10)[0] == pytest.approx(part.predict([a, b], 10), abs=1e-6)
    with pytest.raises(ValueError, match="the same number of candidates"):
        part.predict([[a, b], [a]], 10)
    assert part.copied == ("query_id", "doc_id", "label") and part.answer(0.5) == {"score": 0.5}


def test_sentiment_reads_a_text_and_hashes_it_as_the_manifest_says():
    manifest, model = manifest_of("sentiment")
    module = rows_module("sentiment")
    part = module.Serving(FakeServed(manifest, model), serve.KIT)
    for values, error in [
        ({}, "no text column"),
        ({"text": 3}, "text is a number, not a string"),
        ({"text": "  "}, "text is empty"),
    ]:
        with pytest.raises(serve.RowError, match=error):
            part.row_input(values)
    (p,) = part.predict(["Great lesson"], 10)
    t = manifest["serving"]["tokenizer"]
    ids = module.hashed_tokens(["Great lesson"], t["buckets"], t["max_tokens"], t["negation_scope"])
    assert p == pytest.approx(model(torch.tensor(ids)).item(), abs=1e-6)
    assert part.answer(0.75) == {"p_positive": 0.75, "predicted": "positive"}
    with pytest.raises(TypeError, match="input 1: a review is a string"):
        part.predict(["fine", None], 10)


def test_recommender_maps_lesson_ids_and_excludes_the_history():
    manifest, model = manifest_of("recommender")
    module = rows_module("recommender")
    part = module.Serving(FakeServed(manifest, model), serve.KIT)
    lessons = manifest["serving"]["vocabulary"]
    assert module.split_history("[12, 7 40]") == ["12", "7", "40"]
    assert module.lesson_key(12.0) == module.lesson_key("12.0") == "12"
    (top,) = part.predict([[lessons[0], lessons[1]]], 3)
    assert len(top) == 3 and not {lessons[0], lessons[1]} & {lesson for lesson, _s in top}
    assert part.predict([[float(lessons[0]), f"{lessons[1]}.0"]], 3) == [top]  # 5000.0 is lesson 5000
    assert part.predict([["nobody knows this one"]], 3) == [[]]  # no known lesson: nothing to go on
    with pytest.raises(ValueError, match="k=0: ask for at least 1"):
        part.predict([[lessons[0]]], 0)
    with pytest.raises(serve.RowError, match="history is empty"):
        part.row_input({"history": ""})
    answer = part.answer(top)
    columns = part.csv_columns(["user_id"])
    rows = part.csv_rows(7, {"user_id": "u", **answer}, columns)
    assert columns == ["line", "user_id", "rank", "item_id", "score"]
    assert [r[:3] for r in rows] == [[7, "u", 1], [7, "u", 2], [7, "u", 3]]


# ---- the serving module is run from beside serve.py only ---------------------------------------------------------


def export_copy(tmp_path, source):
    """A copy of the export in `source` (its serve.py, parts and the task's module in it)."""
    return Path(shutil.copytree(source, tmp_path / "export"))


def own_serve(folder: Path):
    """The serve.py in `folder`, imported from there (as `python serve.py` in the export runs it)."""
    spec = importlib.util.spec_from_file_location(f"serve_in_{abs(hash(str(folder)))}", folder / "serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def rename_module(folder: Path, named) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "serving_module": named}))


@pytest.fixture
def tiny_export(trained_exports):
    return trained_exports("tiny", "program").folder


@pytest.mark.parametrize(
    "named",
    ["../feature_rows.py", "/tmp/feature_rows.py", "feature_rows", "feature rows.py", "sub/feature_rows.py", "..", 7],
)
def test_a_serving_module_outside_the_folder_is_refused(tmp_path, tiny_export, named):
    folder = export_copy(tmp_path, tiny_export)
    rename_module(folder, named)
    for module in (serve, own_serve(folder)):
        with pytest.raises(module.UnsafeExport, match="is not a module file name in the export folder") as caught:
            module.load(folder)
        assert "\n" not in str(caught.value)


def test_a_serving_module_that_is_a_link_or_missing_is_refused(tmp_path, tiny_export):
    folder = export_copy(tmp_path, tiny_export)
    own = own_serve(folder)
    elsewhere = tmp_path / "feature_rows.py"
    os.replace(folder / "feature_rows.py", elsewhere)
    with pytest.raises(own.IncompleteExport, match="feature_rows.py is not beside this serve.py"):
        own.load(folder)
    (folder / "feature_rows.py").symlink_to(elsewhere)
    with pytest.raises(own.UnsafeExport, match="a link is refused"):
        own.load(folder)


def test_serving_another_folder_never_runs_that_folders_code(tmp_path, tiny_export):
    """serve.py pointed at another export (`--export FOLDER`) runs the serving module beside itself, never the
    one in that folder: a planted module is not run, and a folder of another task is said to need its own
    serve.py."""
    mine = export_copy(tmp_path / "mine", tiny_export)
    theirs = export_copy(tmp_path / "theirs", tiny_export)
    marker = tmp_path / "ran"
    (theirs / "feature_rows.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise SystemExit('planted')\n")
    own = own_serve(mine)
    served = own.load(theirs)
    assert not marker.exists()
    assert served.predict([[0.0] * 10])  # answered by the module beside serve.py
    rename_module(theirs, "ranking_rows.py")
    with pytest.raises(own.IncompleteExport, match="ranking_rows.py is not beside this serve.py") as caught:
        own.load(theirs)
    assert "\n" not in str(caught.value) and "serve.py in that folder" in str(caught.value)


# ---- exports written before the task's module travelled with them -------------------------------------------------


def recorded(name):
    return json.loads((OLD / f"{name}.answers.json").read_text())


def answers_of(module, folder, record):
    """What serve.py `module` answers for the recorded inputs and rows, as JSON values."""
    served = module.load(folder)
    predicted = served.predict(record["predict"]["inputs"], **record["predict"]["kwargs"])
    rows = module.Rows(served, record["rows"]["k"])
    answers = [str(a) if isinstance(a, module.RowError) else a for a in rows.answer(record["rows"]["rows"])]
    columns = rows.csv_columns(list(record["rows"]["rows"][0]))
    return json.loads(json.dumps([predicted, answers, columns]))


def want(record):
    return [record["predict"]["answers"], record["rows"]["answers"], record["rows"]["csv_columns"]]


def alike(got, wanted):
    """JSON values alike, floats to 1e-5 (recorded on another machine, whose kernels may round differently)."""
    if isinstance(wanted, float):
        return got == pytest.approx(wanted, abs=1e-5)
    if isinstance(wanted, list):
        return isinstance(got, list) and len(got) == len(wanted) and all(map(alike, got, wanted))
    if isinstance(wanted, dict):
        return isinstance(got, dict) and got.keys() == wanted.keys() and all(alike(got[k], wanted[k]) for k in got)
    return got == wanted


def old_serve(name):
    """The old export's own serve.py (every old export carried the same file, kept once as old_exports/serve.py:
    it held all its code, so where it lies does not matter)."""
    spec = importlib.util.spec_from_file_location(f"old_serve_{name.replace('-', '_')}", OLD / "serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", OLD_EXPORTS)
def test_an_old_exports_own_serve_py_still_serves_it(name):
    assert alike(answers_of(old_serve(name), OLD / name, recorded(name)), want(recorded(name)))


@pytest.mark.parametrize("name", OLD_EXPORTS)
def test_todays_serve_py_says_in_one_line_what_to_do_with_an_old_export(name):
    """An old manifest names no serving module: its own serve.py serves it (above), today's says so."""
    with pytest.raises(serve.IncompleteExport) as caught:
        serve.load(OLD / name)
    message = str(caught.value)
    assert "\n" not in message and "names no serving module" in message and "serve.py in that folder" in message
