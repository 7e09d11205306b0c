"""The rewriter that does nothing: one search with the encoded query."""

from __future__ import annotations

from tour_pyserini.results import SearchResult, Trace, timed
from tour_pyserini.rewriters.base import QueryBatch, Rewriter


class Identity(Rewriter):
    name = "none"

    def rewrite(self, batch: QueryBatch, searcher, k: int) -> list[SearchResult]:
        traces = [Trace() for _ in batch.qids]
        with timed(traces, "search"):
            rankings = searcher.search_vectors(batch.vectors, k)
        return [SearchResult(qid, hits, trace) for qid, hits, trace in zip(batch.qids, rankings, traces)]
