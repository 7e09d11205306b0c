"""Direct re-ranking: the teacher reorders the retriever's top-k. The baseline TOUR must beat."""

from __future__ import annotations

from tour_pyserini.results import SearchResult, Trace
from tour_pyserini.rewriters.base import QueryBatch, Rewriter, check_depth, rank_by_teacher
from tour_pyserini.teachers import ScoreCache, Teacher


class Rerank(Rewriter):
    """Score the top-``k`` with the teacher and sort; documents below ``k`` keep retriever order.

    ``lam`` < 1 interpolates as TOUR's final aggregation does: lam softmax(teacher) + (1 - lam)
    softmax(sim / smoothing). Re-ranking never changes which documents are in the top ``k``.
    """

    name = "rerank"

    def __init__(self, teacher: Teacher, k: int = 100, lam: float = 1.0, smoothing: float = 100.0):
        if k < 1:
            raise ValueError(f"rerank depth k must be positive, got {k}")
        self.teacher, self.k, self.lam, self.smoothing = teacher, k, lam, smoothing

    def rewrite(self, batch: QueryBatch, searcher, k: int) -> list[SearchResult]:
        check_depth(self.k, searcher)
        traces = [Trace() for _ in batch.qids]
        cache = ScoreCache(self.teacher, searcher.docstore)
        return rank_by_teacher(batch, searcher, batch.vectors, cache, traces, self.k, k, self.lam, self.smoothing)
