"""The one small interface every query rewriter implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from tour_pyserini.results import Hit, SearchResult, timed
from tour_pyserini.rewriters.updates import aggregate

if TYPE_CHECKING:
    from tour_pyserini.search.searcher import TourSearcher

_REGISTRY: dict[str, type[Rewriter]] = {}


@dataclass(frozen=True)
class QueryBatch:
    """Queries that advance through a rewriter together: ids, texts and encoded vectors (n, d)."""

    qids: list[str]
    texts: list[str]
    vectors: np.ndarray

    def __post_init__(self) -> None:
        if not (len(self.qids) == len(self.texts) == len(self.vectors)):
            raise ValueError(
                f"batch has {len(self.qids)} qids, {len(self.texts)} texts and {len(self.vectors)} vectors"
            )

    def __len__(self) -> int:
        return len(self.qids)


class Rewriter(ABC):
    """Turns encoded queries into final rankings.

    A rewriter may search the full, unchanged index as often as it likes through
    ``searcher.search_vectors`` (with ``return_vector=True`` for candidate vectors), ask a teacher
    about candidate texts from ``searcher.docstore``, and move the query vectors. It returns one
    :class:`SearchResult` per query, in batch order, with ``k`` hits and a filled-in trace.
    Subclasses register themselves under their ``name``, the value of ``--rewriter``.
    """

    name: ClassVar[str]

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            _REGISTRY[cls.name] = cls

    @abstractmethod
    def rewrite(self, batch: QueryBatch, searcher: TourSearcher, k: int) -> list[SearchResult]: ...


def rerank_head(hits: Sequence[Hit], head_scores: np.ndarray) -> list[Hit]:
    """Put the first ``len(head_scores)`` hits in order of ``head_scores``; the rest keep retriever order below.

    Head hits get score ``offset + head_score`` with the offset placing all of them above the tail,
    so run files stay strictly decreasing. Ties in ``head_scores`` keep retriever order.
    """
    n = len(head_scores)
    head, tail = list(hits[:n]), list(hits[n:])
    order = np.argsort(-np.asarray(head_scores, dtype=np.float64), kind="stable")
    offset = (tail[0].score - float(np.min(head_scores)) + 1.0) if tail else 0.0
    reranked = [Hit(head[i].docid, offset + float(head_scores[i]), head[i].vector) for i in order]
    return reranked + tail


def check_depth(depth: int, searcher) -> None:
    """Rewriters that need ``depth`` candidates refuse an index with fewer documents."""
    if depth > searcher.num_docs:
        raise ValueError(f"k = {depth} is larger than the index ({searcher.num_docs} documents)")


def rank_by_teacher(batch: QueryBatch, searcher, vectors: np.ndarray, cache, traces, k: int, hits: int,
                    lam: float, smoothing: float, scored: Sequence[dict[str, np.ndarray]] | None = None,
                    ) -> list[SearchResult]:  # fmt: skip
    """Search with ``vectors``; rank each top-``k`` by lam softmax(teacher) + (1 - lam) softmax(sim / smoothing).

    The final step shared by re-ranking and TOUR: documents below ``k`` keep retriever order, and
    ``hits`` documents are returned per query. ``scored`` (one ``{docid: vector}`` per query) adds
    candidates the teacher has already scored to the ranked head, so the teacher ranks their union
    with the new top-``k`` at no extra teacher calls.
    """
    with timed(traces, "search"):
        rankings = searcher.search_vectors(vectors, max(hits, k), return_vector=scored is not None)
    heads = [list(ranking[:k]) for ranking in rankings]
    tails = [list(ranking[k:]) for ranking in rankings]
    if scored is not None:
        for i, extra in enumerate(scored):
            seen = {h.docid for h in heads[i]}
            heads[i] += [Hit(d, float(vectors[i] @ v), v) for d, v in extra.items() if d not in seen]
            seen.update(extra)
            tails[i] = [h for h in tails[i] if h.docid not in seen]
    teacher_scores = cache.score(batch.qids, batch.texts, [[h.docid for h in head] for head in heads], traces)
    results = []
    for qid, head, tail, scores, trace in zip(batch.qids, heads, tails, teacher_scores, traces):
        retriever = np.array([h.score for h in head])
        final = rerank_head(head + tail, aggregate(scores, retriever, lam, smoothing))
        results.append(SearchResult(qid, final[:hits], trace))
    return results
