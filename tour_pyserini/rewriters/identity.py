"""The rewriter that does nothing: one search with the encoded query."""

from __future__ import annotations

from tour_pyserini.results import SearchResult, timed
from tour_pyserini.rewriters.base import REWRITERS, QueryBatch, Rewriter, VectorIndex


@REWRITERS.register
class Identity(Rewriter):
    name = "none"

    def rewrite(self, batch: QueryBatch, index: VectorIndex, hits: int) -> list[SearchResult]:
        with timed(batch.traces, "search"):
            rankings = index.search_vectors(batch.vectors, hits)
        return [SearchResult(qid, ranking, trace) for qid, ranking, trace in zip(batch.qids, rankings, batch.traces)]
