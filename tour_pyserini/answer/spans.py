"""The reader's arithmetic on logits, without a model: the best span of a window and the two selection rules.

A span (s, e) of a window scores S_read = start_s + end_e (the sum of the QA head's two logits, as DPR's
reader and Hugging Face's QA pipeline score it), over context tokens only, with s <= e < s + max_answer_length.

Two rules choose one answer among the spans of a question's k passages (equations: docs/algorithms.md):

- ``orqa`` (the default): the derivation (b, s) maximising S = w * S_retr(b) + S_read(b, s), the retriever's
  score of passage b plus the span's score (ORQA's inference, with the weight w = 1 there).
- ``dpr``: the passage with the highest selection logit first, then its best span (DPR's two stages). A QA
  head has no separate relevance head; the selection logit is the start logit of the [CLS] token, a linear
  function of h_[CLS] as DPR's selection head is, which ``train-reader`` trains with DPR's selection loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

RULES = ("orqa", "dpr")
DEFAULT_RULE = "orqa"
# w of the orqa rule, in the units of the retriever's scores: on the shipped reader's dev questions 20 gave the
# best EM of 0, 1, 5, 20 after dense retrieval, re-ranking and TOUR, and tied with 5 after BM25 (make bench-qa)
DEFAULT_RETRIEVAL_WEIGHT = 20.0


@dataclass(frozen=True)
class Span:
    """The best span of one window: its score and token positions (inclusive), and the window's selection logit."""

    score: float
    start: int
    end: int
    selection: float


def best_span(start: np.ndarray, end: np.ndarray, context: np.ndarray, max_answer_length: int) -> Span | None:
    """The highest-scoring span of one window (logits ``start``, ``end``, boolean ``context`` mask, all of one
    length), or None if the window has no context token. Ties go to the earliest start, then the shortest."""
    n = len(start)
    s, e = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    allowed = context[:, None] & context[None, :] & (e >= s) & (e - s < max_answer_length)
    if not allowed.any():
        return None
    scores = np.where(allowed, start[:, None] + end[None, :], -np.inf)
    i, j = np.unravel_index(int(np.argmax(scores)), scores.shape)
    return Span(float(scores[i, j]), int(i), int(j), float(start[0]))


@dataclass(frozen=True)
class Candidate:
    """A passage's best span over its windows (``window`` says which), with its retrieval score and the
    highest selection logit of its windows."""

    passage: int
    retrieval: float
    span: Span
    window: int
    selection: float


def passage_candidate(passage: int, retrieval: float, spans: Sequence[Span | None]) -> Candidate | None:
    """One passage's candidate from the best spans of its windows (a span seen by two windows keeps its best)."""
    kept = [(w, s) for w, s in enumerate(spans) if s is not None]
    if not kept:
        return None
    window, span = max(kept, key=lambda item: item[1].score)
    return Candidate(passage, retrieval, span, window, max(s.selection for _, s in kept))


def choose(
    candidates: Sequence[Candidate], rule: str = DEFAULT_RULE, retrieval_weight: float = DEFAULT_RETRIEVAL_WEIGHT
) -> tuple[Candidate, float] | None:
    """The candidate a rule picks and the score it is picked by (S for orqa, the span's S_read for dpr);
    the first in order on ties."""
    if not candidates:
        return None
    if rule == "orqa":
        totals = [retrieval_weight * c.retrieval + c.span.score for c in candidates]
        best = int(np.argmax(totals))
        return candidates[best], totals[best]
    if rule == "dpr":
        best = int(np.argmax([c.selection for c in candidates]))
        return candidates[best], candidates[best].span.score
    raise ValueError(f"unknown rule {rule!r}")
