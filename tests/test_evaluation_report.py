"""The evaluation report (core.runs.evaluation_report, `amp-console evaluate --report`): at k = 10 its curves are
the task's own metrics, curves are monotone where they must be, buckets add up, the ROC curve runs from (0, 0) to
(1, 1) with the task's AUC, evaluation.json is written atomically and reads back (a damaged one never raises
unless asked)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

from core.cli.main import main
from core.config import RunConfig
from core.engine.trainer import train
from core.errors import DataError
from core.runs.evaluate import evaluate_checkpoint
from core.runs.evaluation_report import REPORT_FILE, evaluation_report, load_report, write_report

# docs 200: queries of up to 600 candidates exceed the 256-candidate lists: in its val split a query spans rows
RANKING_LONG = {"queries": 80, "docs": 200, "features": 4}


@pytest.fixture(scope="module")
def runs(trained_runs, tmp_path_factory):
    """The shared runs (the recommender's synthetic one: the sampled protocol ranks against 100 negatives, more
    than the file run's ten lessons, and its histories fill several buckets), and this module's ranking_long
    (queries longer than a list, which no other test needs): each test only reads them."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        long = train(
            RunConfig.for_task(
                "ranking",
                device="cpu",
                max_steps=10,
                threads=1,
                task_options=RANKING_LONG,
                eval_interval=0,
                out_dir=str(tmp_path_factory.mktemp("ranking_long")),
            )
        )
    finally:
        torch.set_num_threads(threads)
    assert long.status == "completed", long.message
    shared = {task: trained_runs[task].ended for task in ("tiny", "sentiment", "ranking")}
    return {**shared, "recommender": trained_runs["recommender-synthetic"].ended, "ranking_long": long}


def series(report: dict, metric: str) -> dict[str, list[float]]:
    curve = next(c for c in report["curves"] if c["metric"] == metric)
    return {s["name"]: s["values"] for s in curve["series"]}


def non_decreasing(values) -> bool:
    return all(b >= a - 1e-12 for a, b in zip(values, values[1:], strict=False))


def test_recommender_curves_at_10_are_the_tasks_metrics(runs):
    report = evaluation_report(runs["recommender"].checkpoint)
    metrics = evaluate_checkpoint(runs["recommender"].checkpoint).metrics
    assert report["metrics"] == pytest.approx(metrics, abs=1e-12)
    assert report["task"] == "recommender" and report["split"] == "test" and report["precision"] == "fp32"
    hr, ndcg = series(report, "hr"), series(report, "ndcg")
    ks = next(c for c in report["curves"] if c["metric"] == "hr")["ks"]
    assert ks == list(range(1, 51))
    assert set(hr) == {"full_filtered", "full_unfiltered", "sampled100_unseen"}
    for protocol in hr:
        assert hr[protocol][9] == pytest.approx(metrics[f"hr@10_{protocol}"], rel=1e-6)
        assert ndcg[protocol][9] == pytest.approx(metrics[f"ndcg@10_{protocol}"], rel=1e-5)
        assert non_decreasing(hr[protocol]) and non_decreasing(ndcg[protocol])
        assert all(n <= h + 1e-12 for n, h in zip(ndcg[protocol], hr[protocol], strict=True))
        assert hr[protocol][0] == pytest.approx(ndcg[protocol][0])  # at k = 1 a hit is worth 1 either way
        assert 0.0 <= hr[protocol][-1] <= 1.0
    # the sampled protocol ranks against 100 candidates, the full one against the catalogue: never harder
    assert all(s >= f - 1e-12 for s, f in zip(hr["sampled100_unseen"], hr["full_filtered"], strict=True))
    assert "sampled" in report["protocols"]["sampled100_unseen"]


def test_recommender_history_buckets_add_up_to_the_split(runs):
    report = evaluation_report(runs["recommender"].checkpoint)
    buckets = report["buckets"]
    counts = [row["count"] for row in buckets["rows"]]
    assert sum(counts) == buckets["total"] == report["rows"] and all(c > 0 for c in counts)
    assert len(counts) >= 2  # the synthetic histories spread over several buckets
    for name, overall in report["metrics"].items():  # the users' weighted mean of the buckets is the whole
        weighted = sum(row["values"][name] * row["count"] for row in buckets["rows"]) / sum(counts)
        assert weighted == pytest.approx(overall, rel=1e-5)
    lows = [row["min"] for row in buckets["rows"]]
    assert lows == sorted(lows)


@pytest.mark.parametrize("run, split", [("ranking", "test"), ("ranking_long", "val")])
def test_ranking_ndcg_at_10_and_mrr_are_the_tasks(runs, run, split):
    report = evaluation_report(runs[run].checkpoint, split)
    metrics = report["metrics"]
    assert metrics == pytest.approx(evaluate_checkpoint(runs[run].checkpoint, split).metrics, abs=1e-12)
    curves = series(report, "ndcg")
    assert curves["all"][9] == pytest.approx(metrics["ndcg@10"], rel=1e-5)
    assert report["mrr"] == pytest.approx(metrics["mrr"], rel=1e-5)
    assert len(curves["all"]) == 20
    buckets = report["buckets"]
    counts = [row["count"] for row in buckets["rows"]]
    assert sum(counts) == buckets["total"] == report["queries"] > 0
    for name in ("ndcg@10", "mrr"):
        weighted = sum(row["values"][name] * row["count"] for row in buckets["rows"]) / sum(counts)
        assert weighted == pytest.approx(metrics[name], rel=1e-5)
    for row in buckets["rows"]:
        assert row["values"]["ndcg@10"] == pytest.approx(row["ndcg"][9])
        low, high = row["min"], row["max"] if row["max"] is not None else 10**9
        assert 0 < low <= high


def test_a_long_query_spanning_rows_is_ranked_whole(runs):
    report = evaluation_report(runs["ranking_long"].checkpoint, "val")  # its val split has a query of 600
    assert any(row["min"] >= 100 for row in report["buckets"]["rows"])  # queries longer than a list (256) too
    assert report["rows"] > report["queries"] + report["queries_without_relevant"]  # rows of lists, not queries


def test_query_curves_match_ranking_metrics_with_ties():
    from core.tasks.ranking.task import query_curves, ranking_metrics

    gen = torch.Generator().manual_seed(0)
    label = torch.randint(0, 3, (40, 12), generator=gen)
    label[torch.rand(label.shape, generator=gen) < 0.2] = -1  # padding
    label[0] = torch.where(label[0] >= 0, 0, label[0])  # a query with nothing relevant
    scores = torch.randint(0, 4, label.shape, generator=gen).float()  # many ties
    real = label >= 0
    qid = torch.arange(40).unsqueeze(1).expand_as(label)[real]
    got = query_curves(qid, scores[real], label[real], most=20)
    used = got["has_relevant"]
    for k in (1, 3, 10, 12, 20):
        ndcg, rr, count = ranking_metrics(scores, label, k=k)
        assert int(used.sum()) == int(count)
        assert float(got["ndcg"][used, k - 1].sum()) == pytest.approx(float(ndcg), rel=1e-5)
        assert float(got["rr"][used].sum()) == pytest.approx(float(rr), rel=1e-6)
    assert got["size"].tolist() == real.sum(1)[real.sum(1) > 0].tolist()


def test_sentiment_roc_and_confusion(runs):
    report = evaluation_report(runs["sentiment"].checkpoint)
    metrics = report["metrics"]
    roc = report["roc"]
    assert roc["auc"] == pytest.approx(metrics["roc_auc"], abs=1e-12)
    fpr, tpr = roc["fpr"], roc["tpr"]
    assert (fpr[0], tpr[0]) == (0.0, 0.0) and (fpr[-1], tpr[-1]) == (1.0, 1.0)
    assert non_decreasing(fpr) and non_decreasing(tpr)
    assert len(fpr) == len(tpr) == len(roc["threshold"]) <= 200 < roc["points_exact"]
    assert roc["threshold"][0] is None and non_decreasing(roc["threshold"][:0:-1])
    area = sum((b - a) * (c + d) / 2 for a, b, c, d in zip(fpr, fpr[1:], tpr, tpr[1:], strict=False))
    assert area == pytest.approx(roc["auc"], abs=0.01)  # thinned to 200 points, still the same curve
    (tn, fp), (fn, tp) = report["confusion"]["matrix"]
    assert tn + fp + fn + tp == report["rows"]
    assert (tn + tp) / report["rows"] == pytest.approx(metrics["accuracy"], abs=1e-12)
    figures = report["classification"]
    assert figures["precision"] == pytest.approx(tp / (tp + fp)) and figures["recall"] == pytest.approx(tp / (tp + fn))
    histogram = report["histogram"]
    assert sum(map(sum, (s["counts"] for s in histogram["series"]))) == report["rows"]
    assert sum(histogram["series"][1]["counts"]) == tp + fn  # the positive class's reviews


def test_roc_curve_is_exact_with_ties():
    from core.tasks.sentiment.task import roc_auc, roc_curve, thin_curve

    gen = torch.Generator().manual_seed(1)
    labels = torch.randint(0, 2, (500,), generator=gen)
    scores = (labels + torch.randn(500, generator=gen)).round(decimals=1)  # many tied scores
    fpr, tpr, threshold = roc_curve(scores, labels)
    area = float(torch.trapezoid(tpr, fpr))
    assert area == pytest.approx(roc_auc(scores, labels), abs=1e-12)
    assert threshold[0] == float("inf") and (fpr[-1], tpr[-1]) == (1.0, 1.0)
    keep = thin_curve(fpr, tpr, 20)
    assert len(keep) <= 20 and keep[0] == 0 and keep[-1] == len(fpr) - 1
    one_class = roc_curve(scores, torch.ones(500, dtype=torch.int64))
    assert all(t.numel() == 0 for t in one_class)


def test_tiny_confusion_matrix_is_the_accuracy(runs):
    report = evaluation_report(runs["tiny"].checkpoint)
    assert report["split"] == "val"  # the tiny task has no test split
    matrix = report["confusion"]["matrix"]
    assert sum(map(sum, matrix)) == report["rows"]
    assert (matrix[0][0] + matrix[1][1]) / report["rows"] == pytest.approx(report["metrics"]["accuracy"], abs=1e-12)
    assert report["classification"]["accuracy"] == pytest.approx(report["metrics"]["accuracy"], abs=1e-12)


def test_written_atomically_and_read_back(runs, tmp_path, monkeypatch):
    report = evaluation_report(runs["tiny"].checkpoint)
    assert report["run_folder"] == str(Path(runs["tiny"].checkpoint).resolve().parent)
    path = write_report(report, tmp_path)
    assert path == tmp_path / REPORT_FILE and load_report(tmp_path) == json.loads(json.dumps(report))
    assert [p.name for p in tmp_path.iterdir()] == [REPORT_FILE]  # no temp file left beside it

    def interrupted(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(OSError):
        write_report({**report, "step": 999}, tmp_path)
    monkeypatch.undo()
    assert load_report(tmp_path)["step"] == report["step"]  # the old report is whole
    assert [p.name for p in tmp_path.iterdir()] == [REPORT_FILE]


def test_a_checkpoint_outside_a_run_folder_gets_its_report_next_to_it(runs, tmp_path):
    loose = tmp_path / "elsewhere" / "model.pt"
    loose.parent.mkdir()
    shutil.copy(runs["tiny"].checkpoint, loose)
    report = evaluation_report(loose)
    assert report["run_folder"] is None and report["checkpoint"] == str(loose)
    code = main(["evaluate", str(loose), "--report"])
    assert code == 0 and (loose.parent / REPORT_FILE).is_file()


@pytest.mark.parametrize("text, line", [('{"task": "tiny", "metrics": {', 1), ("[1, 2]", 1), ('{\n"a": 1,\n oops}', 3)])
def test_a_damaged_report_reads_as_none_or_one_line(tmp_path, text, line):
    (tmp_path / REPORT_FILE).write_text(text)
    assert load_report(tmp_path) is None
    with pytest.raises(DataError) as err:
        load_report(tmp_path, strict=True)
    message = str(err.value)
    assert "\n" not in message and str(tmp_path / REPORT_FILE) in message and f"line {line}" in message
    assert load_report(tmp_path / "nothing-here") is None
    (tmp_path / REPORT_FILE).write_bytes(b"\xff\xfe{")
    assert load_report(tmp_path) is None


def test_cli_report_prints_tables_and_writes_the_file(trained_runs, tmp_path, capsys):
    folder = str(trained_runs["recommender-synthetic"].copy_to(tmp_path))  # a copy: the report is written into it
    code = main(["evaluate", folder, "--report"])
    out = capsys.readouterr().out
    assert code == 0
    assert "test hr@10_full_filtered" in out  # the usual metric lines first
    header = next(line for line in out.splitlines() if "HR@1 " in line)
    assert header.split() == ["HR@1", "HR@5", "HR@10", "HR@20", "HR@50"]
    assert "sampled: 100 unseen negatives" in out and "By user history length (k = 10)" in out
    written = os.path.join(folder, REPORT_FILE)
    assert f"report written to {written}" in out
    saved = load_report(folder)
    primary = next(line for line in out.splitlines() if line.strip().startswith("full catalogue, seen removed"))
    assert primary.split()[-3] == f"{series(saved, 'hr')['full_filtered'][9]:.4f}"  # the HR@10 column

    code = main(["evaluate", folder, "--report", "--json"])
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and printed["curves"] and printed["buckets"]["rows"]
    assert printed["metrics"] == pytest.approx(saved["metrics"], abs=1e-12)


def test_cli_report_refuses_another_data_file(runs, capsys, tmp_path):
    code = main(["evaluate", str(runs["tiny"].checkpoint), "--report", "--data", str(tmp_path / "x.csv")])
    err = capsys.readouterr().err
    assert code == 2 and "--report" in err and len(err.strip().splitlines()) == 1
