"""ReFIT: relevance feedback from a re-ranker during inference (Reddy et al., 2023; docs/algorithms.md, "ReFIT").

Per query: search the top-depth once, have the teacher score them, take a few gradient steps on the query vector
towards the teacher's distribution over those same candidates (KL, as TOUR-soft's loss), search again with the new
vector and rank its top-depth as TOUR does. With one step it is TOUR-soft's first iteration without early stop,
clipping or weight decay; with more, ReFIT keeps its first candidates where TOUR searches again between steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tour_pyserini.numbers import Role, non_negative_float, param, params_of, positive_int
from tour_pyserini.results import SearchResult, StopReason, timed
from tour_pyserini.rewriters.base import (
    DEPTH,
    LAMBDA,
    REWRITERS,
    SMOOTHING,
    QueryBatch,
    TeacherRewriter,
    VectorIndex,
    rank_by_teacher,
)
from tour_pyserini.rewriters.tour import TourConfig
from tour_pyserini.rewriters.updates import fill_unscored, refit_update, softmax
from tour_pyserini.teachers import ScoreCache

TOUR = {p.name: p for p in params_of(TourConfig)}  # the flags ReFIT shares with TOUR, declared there


@dataclass(frozen=True)
class RefitConfig:
    depth: int = param(100, like=DEPTH)  # the paper's K
    iterations: int = param(
        1,
        positive_int,
        "gradient steps on the query vector over the first top-k",
        flag="--refit-updates",
        role=Role.ITERATIONS,
    )
    lr: float = param(0.2, non_negative_float, "learning rate of each step", flag="--refit-lr")
    tau: float = param(1.0, like=TOUR["tau"])
    retriever_temperature: float = param(1.0, like=TOUR["retriever_temperature"])
    lam: float = param(1.0, like=LAMBDA)
    smoothing: float = param(100.0, like=SMOOTHING)
    final: str = param("search", like=TOUR["final"])


@REWRITERS.register
class Refit(TeacherRewriter):
    """Distil the teacher's distribution over the first top-depth into the query vector, then search again."""

    name = "refit"
    Config = RefitConfig

    def rewrite(self, batch: QueryBatch, index: VectorIndex, hits: int) -> list[SearchResult]:
        cfg = self.config
        self.check_index(index)
        traces = batch.traces
        q = batch.vectors.astype(np.float64)
        cache = ScoreCache(self.teacher, index.docstore, store=self.store)
        with timed(traces, "search"):
            candidates = index.search_candidates(batch.vectors, cfg.depth)
        scores = cache.score(
            batch.qids,
            batch.texts,
            [found.docids for found in candidates],
            traces,
            list(batch.vectors),
            batch.encoded_by,
        )
        with timed(traces, "update"):
            for i, (found, s) in enumerate(zip(candidates, scores)):
                if s.size and np.isnan(s).all():  # no target distribution: the query stays where it is
                    traces[i].stop_reason = StopReason.UNSCORED
                    continue
                probs = softmax(fill_unscored(s), cfg.tau)
                q[i], losses = refit_update(
                    q[i], found.vectors.astype(np.float64), probs, cfg.lr, cfg.iterations, cfg.retriever_temperature
                )
                traces[i].losses += losses
                traces[i].iterations = cfg.iterations
        scored = [dict(zip(found.docids, found.vectors)) for found in candidates] if cfg.final == "union" else None
        return rank_by_teacher(
            batch,
            index,
            vectors=q,
            cache=cache,
            depth=cfg.depth,
            hits=hits,
            lam=cfg.lam,
            smoothing=cfg.smoothing,
            scored=scored,
        )
