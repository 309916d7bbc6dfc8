"""Sentiment quality features: a tokenizer for real reviews (case, punctuation, contractions, Unicode),
negation scope and bigrams, TF-IDF weights fit on the training split and carried by checkpoints, option
checks, and an end-to-end run that reads negation."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import torch

from core.config import RunConfig
from core.data.reviews import generate_reviews
from core.data.tokenizer import hashed_tokens, word_lists
from core.engine.checkpoints import load_checkpoint, load_model_state
from core.engine.trainer import train
from core.errors import ConfigError
from core.tasks import create_task
from core.tasks.sentiment.task import duplicate_counts, fit_bucket_weights, split_indices

BUCKETS = 1 << 20


def ids(text: str, scope: int = 3, width: int = 16) -> list[int]:
    return hashed_tokens(pa.array([text]), BUCKETS, width, scope)[0].tolist()


def test_words_ignore_case_punctuation_and_keep_contractions_and_unicode():
    text = pa.array(["Didn’t LIKE it, Café ﬁne!!  'Quoted' (really) won't...", None, "", "ＧＯＯＤ"])
    assert word_lists(text).to_pylist() == [
        ["didn't", "like", "it", "café", "fine", "quoted", "really", "won't"],
        [],
        [],
        ["good"],
    ]
    assert ids("DIDN'T like it") == ids("didn’t like it")  # case and the typographic apostrophe
    assert ids("Great... really!") == ids("great really")


def test_negated_words_get_their_own_unigram_until_the_clause_ends():
    def word_at(text, index, scope=3):  # layout w0, w1, w0w1, w2, w1w2, ...: word i is at slot 2i - 1
        return ids(text, scope)[max(2 * index - 1, 0)]

    plain = word_at("it was helpful", 2)
    assert word_at("wasn't very helpful", 2) != plain  # the negator's scope skips the intensifier
    assert word_at("never so helpful", 2) == word_at("not that helpful", 2)  # one negated "helpful"
    assert word_at("wasn't very helpful", 2, scope=0) == plain  # scope 0: no negated unigrams
    assert word_at("not boring, helpful", 2) == plain  # a comma ends the scope
    assert word_at("not a b c helpful", 4) == word_at("x a b c helpful", 4)  # beyond 3 words
    # the bigram "not helpful" is a token of its own, unlike "very helpful"
    assert ids("not helpful")[2] != ids("very helpful")[2] and ids("not helpful")[2] > 0


def test_idf_and_min_df_are_fit_on_the_training_split_only():
    task = create_task(
        "sentiment", {"reviews": 1000, "buckets": 4096, "max_tokens": 64, "weighting": "tfidf", "min_df": 2}
    )
    data = task.load_data("", 3)
    model = task.build_model(data.info)
    train = data.train["tokens"]
    assert torch.equal(model.bucket_weight, fit_bucket_weights(train, 4096, idf=True, min_df=2))
    everything = torch.cat([train, data.val["tokens"], data.test["tokens"]])
    assert not torch.equal(model.bucket_weight, fit_bucket_weights(everything, 4096, idf=True, min_df=2))
    assert len(train) == len(split_indices(1000, 3)[0]) == 800
    once = torch.bincount(train.flatten().long(), minlength=4096) == 1  # in one training review only
    assert model.bucket_weight[0] == 0 and model.bucket_weight[once].eq(0).all()
    kept = model.bucket_weight[model.bucket_weight > 0]
    assert kept.min() >= 1 and kept.max() == pytest.approx(np.log(801 / 3) + 1)  # smoothed idf, df = 2
    plain = create_task("sentiment", {"buckets": 4096, "weighting": "none", "min_df": 1})
    assert torch.equal(plain.build_model({}).bucket_weight[1:], torch.ones(4095))


def test_sublinear_term_frequency_counts_repeats_in_a_row():
    tokens = torch.tensor([[5, 7, 5, 5, 0, 0], [1, 2, 3, 0, 0, 0]], dtype=torch.int32)
    assert duplicate_counts(tokens).tolist() == [[3, 1, 3, 3, 2, 2], [1, 1, 1, 3, 3, 3]]
    model = create_task("sentiment", {"buckets": 16, "dim": 4, "hidden": 0, "weighting": "tfidf"}).build_model({})
    weights = model.token_weights(tokens)
    assert weights[0, :4].tolist() == pytest.approx([(1 + np.log(3)) / 3, 1, (1 + np.log(3)) / 3, (1 + np.log(3)) / 3])
    assert weights[:, 4:].eq(0).all() and weights[1, 3:].eq(0).all()  # padding weighs nothing


@pytest.mark.parametrize(
    "options,field",
    [
        ({"pooling": "max"}, "task_options.pooling"),
        ({"weighting": "bm25"}, "task_options.weighting"),
        ({"negation_scope": -1}, "task_options.negation_scope"),
        ({"token_dropout": 1.5}, "task_options.token_dropout"),
        ({"negation": 2}, "task_options.negation"),
    ],
)
def test_options_are_checked_with_one_line_errors(options, field):
    with pytest.raises(ConfigError) as caught:
        create_task("sentiment", options)
    assert caught.value.field == field and "\n" not in str(caught.value)


def test_synthetic_reviews_have_realistic_shape():
    reviews = generate_reviews(4000, seed=1)
    texts = reviews.text.to_pylist()
    joined = " ".join(texts)
    assert all(t[0].isupper() and t[-1] in ".!" for t in texts)
    assert "," in joined and "didn't" in joined and "didn’t" in joined
    lengths = np.array([len(t.split()) for t in texts])
    assert lengths.min() >= 3 and np.percentile(lengths, 99) > 3 * np.median(lengths)
    counts = {}
    for word in word_lists(reviews.text).flatten().to_pylist():
        counts[word] = counts.get(word, 0) + 1
    assert sum(c == 1 for c in counts.values()) > 100  # a long tail of rare words
    assert generate_reviews(50, seed=1).text.equals(generate_reviews(50, seed=1).text)  # seeded


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("sentiment")
    torch.set_num_threads(1)
    options = {"reviews": 6000, "buckets": 1 << 16}
    config = RunConfig.for_task("sentiment", task_options=options, device="cpu", threads=1, epochs=3, out_dir=str(out))
    ended = train(config)
    assert ended.status == "completed", ended.message
    return config, ended


def _restored(ended, options: dict):
    state = load_checkpoint(ended.checkpoint)
    task = create_task("sentiment", options)  # no load_data: the idf comes from the checkpoint
    model = task.build_model(state["data_info"])
    assert model.bucket_weight[1:].eq(1).all()  # before: ones
    load_model_state(model, state["model"], ended.checkpoint)
    return model.eval()


def test_checkpoint_carries_the_bucket_weights_and_predicts_the_same(trained):
    config, ended = trained
    task = create_task("sentiment", config.task_options)
    data = task.load_data("", config.seed)
    model = _restored(ended, config.task_options)
    assert torch.equal(model.bucket_weight, task.build_model(data.info).bucket_weight)
    assert model.bucket_weight.eq(0).sum() > 1000  # rare buckets
    with torch.no_grad():
        metrics = task.evaluate(model, data.test, 512)
    assert metrics["accuracy"] == pytest.approx(ended.test_metrics["accuracy"], abs=1e-9)


def test_a_small_run_learns_negation(trained):
    config, ended = trained
    model = _restored(ended, config.task_options)
    positive = ["It was helpful.", "The lesson was not boring.", "Really great course!", "never confusing"]
    negative = ["It was not helpful.", "The lesson wasn't very clear.", "Really boring course!", "not great"]
    opts = create_task("sentiment", config.task_options).opts
    tokens = hashed_tokens(pa.array(positive + negative), opts["buckets"], opts["max_tokens"], opts["negation_scope"])
    with torch.no_grad():
        predicted = model(tokens).argmax(1).tolist()
    assert predicted == [1] * 4 + [0] * 4
    assert ended.test_metrics["accuracy"] > 0.62
