"""The sentiment task's serving part (core.tasks.serving): review texts, hashed as the run hashed its data, in;
P(positive) out. Its answers: `sentiment`, `sentiment_array` and `explain` (the words that moved it most)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import torch
from torch import nn

from core.data.row_checks import Checks, as_text, ids
from core.data.tokenizer import BOUNDARY, NEGATORS, word_lists
from core.tasks.serving import FileScorer, Input, PreviewSpec, TaskServing, tensor_entry

SENTIMENT_ROWS = 4096  # texts tokenized and scored at a time


class SentimentServing(nn.Module):
    """Hashed token ids (B, T) int64 -> P(positive) (B,) float32 (`onnx_friendly`: with ONNX's ops only)."""

    def __init__(self, model: nn.Module, onnx_friendly: bool = False):
        super().__init__()
        self.model: Any = model
        self.onnx_friendly = onnx_friendly

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self.model(tokens, portable=True) if self.onnx_friendly else self.model(tokens)
        return torch.softmax(logits.float(), dim=-1)[:, 1]


TOKENIZER_RECIPE = (
    "NFKC-normalise, lower-case (per code point), replace U+2019 with an apostrophe; with negation_scope > 0 "
    'each run of .,;:!?()[]{}"“”… becomes a clause boundary; words are runs of Unicode letters, numbers, '
    "marks, '_' and apostrophes, quotes stripped from their ends; a negator (negators, or a word ending in "
    "n't) negates the next negation_scope words of its clause (unigram hash xor negated_salt); hash = CRC32 "
    "of the UTF-8 word; row = [w0, w1, w0w1, w2, w1w2, ...] truncated to max_tokens, padded with 0; unigram id "
    "= hash % (buckets - 1) + 1; bigram id = (((h1 * a + h2 * b) mod 2^64) xor xor) % (buckets - 1) + 1"
)


class SentimentFileScorer(FileScorer):
    """`predict` over reviews: a `text` column (`label` ignored) -> line, p_positive, predicted (its class)."""

    unit = "reviews"
    input_columns = ("text", "label")

    def __init__(self, predictor, reader, options):
        super().__init__(predictor, reader, options)
        self.text = reader.require("text", "a sentiment model reads reviews from a `text` column")
        reader.use([self.text])
        self.schema = pa.schema(
            [(self.line_column, pa.int64()), ("p_positive", pa.float64()), ("predicted", pa.string())]
        )

    def score(self, batch, lines, report):
        text = batch.column(self.text)
        if not (pa.types.is_string(text.type) or pa.types.is_large_string(text.type)):
            text = as_text(text, self.text, self.reader.path)
        checks = Checks(batch.num_rows)
        ids(text, self.text, checks)
        good = self._good(batch, lines, checks, report)
        for rows in self._slices(good):
            p = self.predictor.sentiment_array(text.take(pa.array(rows)))
            self.scored += len(rows)
            yield pa.table(
                {
                    self.line_column: pa.array(lines[rows]),
                    "p_positive": pa.array(p),
                    "predicted": pa.array(np.where(p >= 0.5, "positive", "negative")),
                },
                schema=self.schema,
            )


class SentimentTaskServing(TaskServing):
    """Review texts, hashed as the run hashed its data (the recipe in the manifest), in; P(positive) out."""

    output_name = "p_positive"
    rows_module = "sentiment_rows.py"  # serve.py's part for the task (core.tasks.serving)
    answers = ("sentiment", "sentiment_array", "explain")
    file_scorer = SentimentFileScorer
    sample_texts = (
        "clear explanations and a kind teacher, I learned a lot",
        "boring, confusing and far too slow",
        "not bad at all, though the pace was uneven",
        "I would not recommend it",
    )
    preview = PreviewSpec(
        "text",
        "score",
        answer="sentiment",
        explain="explain",
        noun="review",
        hint="Type a review, e.g. 'clear explanations, but the pace was far too slow'",
        label="P(positive)",
        classes=("negative", "positive"),
    )

    def module(self, model: nn.Module, fmt: str) -> nn.Module:
        return SentimentServing(model, onnx_friendly=fmt == "onnx")

    def inputs(self, model: Any) -> tuple[Input, ...]:
        tokens = "hashed token ids (see serving.tokenizer), 0 = padding"
        return (Input("tokens", "int64", (int(self.opts["max_tokens"]),), meaning=tokens),)

    def manifest(self, model: Any, state: dict, sample: torch.Tensor) -> dict:
        opts = self.opts
        return {
            "outputs": [tensor_entry(self.output_name, ["batch"], "float32", "P(positive review)")],
            "serving": {
                "tokenizer": {
                    "buckets": int(model.bag.num_embeddings),
                    "max_tokens": int(opts["max_tokens"]),
                    "negation_scope": int(opts["negation_scope"]),
                    "recipe": TOKENIZER_RECIPE,
                    "negators": sorted(NEGATORS),
                    "negated_salt": 0x2545F491,
                    "bigram_mix": {"a": 0x9E3779B1, "b": 0x85EBCA77, "xor": 0xB5},
                }
            },
        }

    # ---- the answers (called with the predictor first: core.runs.predict)
    def sentiment(self, predictor, texts: list[str] | str) -> list[float]:
        """P(positive) of each text (a single string is one text, not one per character)."""
        if isinstance(texts, str):
            texts = [texts]
        return self.sentiment_array(predictor, pa.array([str(t) for t in texts], pa.string())).tolist()

    def sentiment_array(self, predictor, texts: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """P(positive) (float64) of a string array, SENTIMENT_ROWS at a time."""
        if isinstance(texts, pa.ChunkedArray):
            texts = texts.combine_chunks()
        out = np.empty(len(texts), dtype=np.float64)
        with predictor.lock, torch.inference_mode():
            for start in range(0, len(texts), SENTIMENT_ROWS):
                tokens = self.task.tokens(texts.slice(start, SENTIMENT_ROWS))
                logits = predictor.model(tokens.to(predictor.device)).float()
                out[start : start + len(tokens)] = torch.softmax(logits, dim=1)[:, 1].double().cpu().numpy()
        return out

    def explain(self, predictor, text: str, top: int = 8) -> list[tuple[str, float]]:
        """The words that pushed P(positive) most: (word, P(text) - P(text without that word)), by |effect|
        (positive: towards positive). Every occurrence of the word is removed, clause ends stay (a negator's
        scope is kept as the tokenizer reads it); words as the tokenizer reads them (lower-cased, normalised)."""
        words = word_lists(pa.array([str(text)], pa.string()), boundaries=True)[0].as_py() or []
        distinct = list(dict.fromkeys(w for w in words if w != BOUNDARY))
        if not distinct:
            return []

        def joined(kept: list[str]) -> str:
            return " ".join("." if w == BOUNDARY else w for w in kept)

        variants = [joined(words)] + [joined([w for w in words if w != word]) for word in distinct]
        p = self.sentiment_array(predictor, pa.array(variants, pa.string()))
        effects = [(word, float(p[0] - p[i + 1])) for i, word in enumerate(distinct)]
        effects.sort(key=lambda item: -abs(item[1]))
        return effects[: max(0, int(top))]
