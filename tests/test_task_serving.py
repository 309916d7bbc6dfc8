"""The serving part of the task API (core.tasks.serving): each built-in task declares one, its deployable module
takes its sample inputs and answers in the shape its manifest says, and the answers are its serving part's methods."""

from __future__ import annotations

import pytest
import torch

from core.runs.predict import Predictor
from core.tasks import TASKS
from core.tasks.serving import ServingShape, TaskServing


@pytest.mark.parametrize("name", list(TASKS))
def test_each_task_serves_its_sample_inputs_in_the_shape_its_manifest_says(name):
    task = TASKS[name]()
    serving = task.serving()
    assert isinstance(serving, TaskServing)
    torch.manual_seed(0)
    model = task.build_model({}).eval()
    sample = serving.sample_inputs(model, 8, 0)
    sample = sample if isinstance(sample, tuple) else (sample,)
    with torch.no_grad():
        got = serving.module(model, "program").eval()(*sample)
    (answer,) = serving.manifest(model, {"vocabulary": {}}, sample[0])["outputs"]
    assert answer["name"] == serving.output_name
    sizes = {"batch": len(sample[0])}
    for spec, x in zip(serving.inputs(model), sample, strict=True):  # the declared inputs, in order
        given = spec.entry()
        sizes.update((d, n) for d, n in zip(given["shape"], x.shape) if isinstance(d, str))
        assert given["shape"][0] == "batch" and [sizes.get(d, d) for d in given["shape"]] == list(x.shape)
        assert str(x.dtype).removeprefix("torch.") == given["dtype"]
    assert [sizes.get(d, d) for d in answer["shape"]] == list(got.shape) and got.dtype == torch.float32
    assert isinstance(serving.shape(model), ServingShape)


def test_each_answer_is_a_method_of_one_tasks_serving_and_none_of_the_predictor():
    owners: dict[str, list[str]] = {}
    for name, cls in TASKS.items():
        for method in cls.serving_class().answers:
            assert callable(getattr(cls.serving_class(), method, None)), (name, method)
            owners.setdefault(method, []).append(name)
    assert not [method for method in owners if hasattr(Predictor, method)], owners  # one way: the task's
    assert all(len(tasks) == 1 for tasks in owners.values()), owners


def test_each_task_declares_the_file_scorer_predict_reads_its_files_with():
    from core.data.importers import ALIASES
    from core.runs.file_input import _declared
    from core.tasks.serving import FileScorer

    scorers = [cls.serving_class().file_scorer for cls in TASKS.values()]
    assert all(isinstance(s, type) and issubclass(s, FileScorer) and s.unit != FileScorer.unit for s in scorers)
    declared = {column for s in scorers for column in s.input_columns}
    assert set(ALIASES) <= declared  # a header of any column training's importer knows reads as a header
    assert {"qid", "history", "text"} <= _declared()
