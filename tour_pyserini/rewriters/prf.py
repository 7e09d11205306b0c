"""Pseudo relevance feedback on dense vectors: Rocchio and average PRF, as Pyserini computes them.

See docs/algorithms.md, "Rocchio and average PRF".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tour_pyserini.numbers import Role, finite_float, non_negative_int, param, positive_int
from tour_pyserini.results import SearchResult, timed
from tour_pyserini.rewriters.base import REWRITERS, QueryBatch, Rewriter, VectorIndex
from tour_pyserini.rewriters.updates import average_prf, rocchio


@dataclass(frozen=True)
class PrfConfig:
    prf_depth: int = param(3, positive_int, "feedback documents", role=Role.CANDIDATES)
    iterations: int = param(1, positive_int, "feedback rounds", flag="--prf-iterations", role=Role.ITERATIONS)


@dataclass(frozen=True)
class RocchioConfig(PrfConfig):
    alpha: float = param(0.9, finite_float, "weight of the query", flag="--rocchio-alpha")
    beta: float = param(0.1, finite_float, "weight of the top documents", flag="--rocchio-beta")
    gamma: float = param(0.1, finite_float, "weight of the bottom documents", flag="--rocchio-gamma")
    topk: int = param(3, positive_int, "positive feedback documents", flag="--rocchio-topk", role=Role.CANDIDATES)
    bottomk: int = param(
        0, non_negative_int, "negative feedback documents", flag="--rocchio-bottomk", role=Role.CANDIDATES
    )


class _Prf(Rewriter):
    """Search ``prf_depth`` documents, rewrite the query from their vectors, repeat ``iterations`` times,
    then search for the final ranking. One iteration is exactly Pyserini's ``--prf-method``.
    """

    Config = PrfConfig

    def update(self, q: np.ndarray, feedback: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def rewrite(self, batch: QueryBatch, index: VectorIndex, hits: int) -> list[SearchResult]:
        cfg = self.config
        self.check_index(index)
        traces = batch.traces
        vectors = batch.vectors
        for _ in range(cfg.iterations):
            with timed(traces, "search"):
                feedback = index.search_vectors(vectors, cfg.prf_depth, return_vector=True)
            with timed(traces, "update"):
                vectors = np.array(
                    [self.update(q, np.vstack([h.index_vector for h in found])) for q, found in zip(vectors, feedback)]
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
    Config = RocchioConfig

    def update(self, q: np.ndarray, feedback: np.ndarray) -> np.ndarray:
        c = self.config
        return rocchio(q, feedback, c.alpha, c.beta, c.gamma, c.topk, c.bottomk)


@REWRITERS.register
class AveragePrf(_Prf):
    """q' = mean(q, d_1, ..., d_depth)."""

    name = "avg-prf"

    def update(self, q: np.ndarray, feedback: np.ndarray) -> np.ndarray:
        return average_prf(q, feedback)
