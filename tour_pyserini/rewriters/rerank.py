"""Direct re-ranking: the teacher reorders the retriever's top-k. The baseline TOUR must beat."""

from __future__ import annotations

import numpy as np

from tour_pyserini.results import SearchResult, Trace, timed
from tour_pyserini.rewriters.base import QueryBatch, Rewriter, check_depth, rerank_head
from tour_pyserini.rewriters.updates import aggregate
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
        with timed(traces, "search"):
            rankings = searcher.search_vectors(batch.vectors, max(k, self.k))
        heads = [[h.docid for h in hits[: self.k]] for hits in rankings]
        cache = ScoreCache(self.teacher, searcher.docstore)
        teacher_scores = cache.score(batch.qids, batch.texts, heads, traces)
        results = []
        for qid, hits, scores, trace in zip(batch.qids, rankings, teacher_scores, traces):
            retriever = np.array([h.score for h in hits[: len(scores)]])
            final = rerank_head(hits, aggregate(scores, retriever, self.lam, self.smoothing))
            results.append(SearchResult(qid, final[:k], trace))
        return results
