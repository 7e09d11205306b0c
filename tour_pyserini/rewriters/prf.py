"""Pseudo relevance feedback on dense vectors: Rocchio and average PRF, as Pyserini computes them."""

from __future__ import annotations

import numpy as np

from tour_pyserini.results import SearchResult, Trace, timed
from tour_pyserini.rewriters.base import QueryBatch, Rewriter, check_depth
from tour_pyserini.rewriters.updates import average_prf, rocchio


class _Prf(Rewriter):
    """Search ``prf_depth`` documents, rewrite the query from their vectors, repeat ``iterations`` times,
    then search for the final ranking. One iteration is exactly Pyserini's ``--prf-method``.
    """

    def __init__(self, prf_depth: int = 3, iterations: int = 1):
        if prf_depth < 1 or iterations < 1:
            raise ValueError("--prf-depth and --prf-iterations must be positive")
        self.prf_depth, self.iterations = prf_depth, iterations

    def update(self, q: np.ndarray, feedback: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def rewrite(self, batch: QueryBatch, searcher, k: int) -> list[SearchResult]:
        check_depth(self.prf_depth, searcher)
        traces = [Trace() for _ in batch.qids]
        vectors = batch.vectors
        for _ in range(self.iterations):
            with timed(traces, "search"):
                feedback = searcher.search_vectors(vectors, self.prf_depth, return_vector=True)
            with timed(traces, "update"):
                vectors = np.array(
                    [self.update(q, np.vstack([h.vector for h in hits])) for q, hits in zip(vectors, feedback)]
                ).astype("float32")
            for trace in traces:
                trace.iterations += 1
        with timed(traces, "search"):
            rankings = searcher.search_vectors(vectors, k)
        return [SearchResult(qid, hits, trace) for qid, hits, trace in zip(batch.qids, rankings, traces)]


class Rocchio(_Prf):
    """q' = alpha q + beta mean(top ``topk``) - gamma mean(bottom ``bottomk`` of the feedback list)."""

    name = "rocchio"

    def __init__(self, prf_depth: int = 3, iterations: int = 1, alpha: float = 0.9, beta: float = 0.1,
                 gamma: float = 0.1, topk: int = 3, bottomk: int = 0):  # fmt: skip
        super().__init__(prf_depth, iterations)
        self.alpha, self.beta, self.gamma, self.topk, self.bottomk = alpha, beta, gamma, topk, bottomk

    def update(self, q: np.ndarray, feedback: np.ndarray) -> np.ndarray:
        return rocchio(q, feedback, self.alpha, self.beta, self.gamma, self.topk, self.bottomk)


class AveragePrf(_Prf):
    """q' = mean(q, d_1, ..., d_depth)."""

    name = "avg-prf"

    def update(self, q: np.ndarray, feedback: np.ndarray) -> np.ndarray:
        return average_prf(q, feedback)
