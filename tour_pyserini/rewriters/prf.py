"""Pseudo relevance feedback on dense vectors: Rocchio and average PRF, as Pyserini computes them.

See docs/algorithms.md, "Rocchio and average PRF".
"""

from __future__ import annotations

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.numbers import finite_float, non_negative_int, positive_int
from tour_pyserini.results import SearchResult, timed
from tour_pyserini.rewriters.base import REWRITERS, Option, QueryBatch, Rewriter, VectorIndex, check_depth
from tour_pyserini.rewriters.updates import average_prf, rocchio

PRF_OPTIONS = (
    Option("--prf-depth", "prf_depth", positive_int, "feedback documents (3)"),
    Option("--prf-iterations", "iterations", positive_int, "feedback rounds (1)"),
)


class _Prf(Rewriter):
    """Search ``prf_depth`` documents, rewrite the query from their vectors, repeat ``iterations`` times,
    then search for the final ranking. One iteration is exactly Pyserini's ``--prf-method``.
    """

    options = PRF_OPTIONS

    def __init__(self, prf_depth: int = 3, iterations: int = 1):
        _Prf.check_options(prf_depth, iterations)
        self.prf_depth, self.iterations = prf_depth, iterations

    @classmethod
    def check_options(cls, prf_depth: int = 3, iterations: int = 1, **weights) -> None:
        if prf_depth < 1 or iterations < 1:
            raise UserError("--prf-depth and --prf-iterations must be positive")

    def update(self, q: np.ndarray, feedback: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def rewrite(self, batch: QueryBatch, index: VectorIndex, hits: int) -> list[SearchResult]:
        check_depth(self.prf_depth, index)
        traces = batch.traces
        vectors = batch.vectors
        for _ in range(self.iterations):
            with timed(traces, "search"):
                feedback = index.search_vectors(vectors, self.prf_depth, return_vector=True)
            with timed(traces, "update"):
                vectors = np.array(
                    [self.update(q, np.vstack([h.vector for h in found])) for q, found in zip(vectors, feedback)]
                ).astype("float32")
            for trace in traces:
                trace.iterations += 1
        with timed(traces, "search"):
            rankings = index.search_vectors(vectors, hits)
        return [SearchResult(qid, ranking, trace) for qid, ranking, trace in zip(batch.qids, rankings, traces)]


@REWRITERS.register
class Rocchio(_Prf):
    """q' = alpha q + beta mean(top ``topk``) - gamma mean(bottom ``bottomk`` of the feedback list)."""

    name = "rocchio"
    options = PRF_OPTIONS + (
        Option("--rocchio-alpha", "alpha", finite_float, "weight of the query (0.9)"),
        Option("--rocchio-beta", "beta", finite_float, "weight of the top documents (0.1)"),
        Option("--rocchio-gamma", "gamma", finite_float, "weight of the bottom documents (0.1)"),
        Option("--rocchio-topk", "topk", positive_int, "positive feedback documents (3)"),
        Option("--rocchio-bottomk", "bottomk", non_negative_int, "negative feedback documents (0)"),
    )

    def __init__(self, prf_depth: int = 3, iterations: int = 1, *, alpha: float = 0.9, beta: float = 0.1,
                 gamma: float = 0.1, topk: int = 3, bottomk: int = 0):  # fmt: skip
        super().__init__(prf_depth, iterations)
        self.alpha, self.beta, self.gamma, self.topk, self.bottomk = alpha, beta, gamma, topk, bottomk

    def update(self, q: np.ndarray, feedback: np.ndarray) -> np.ndarray:
        return rocchio(q, feedback, self.alpha, self.beta, self.gamma, self.topk, self.bottomk)


@REWRITERS.register
class AveragePrf(_Prf):
    """q' = mean(q, d_1, ..., d_depth)."""

    name = "avg-prf"

    def update(self, q: np.ndarray, feedback: np.ndarray) -> np.ndarray:
        return average_prf(q, feedback)
