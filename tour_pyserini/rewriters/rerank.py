"""Direct re-ranking: the teacher reorders the retriever's top-depth. The baseline TOUR must beat."""

from __future__ import annotations

from dataclasses import dataclass

from tour_pyserini.numbers import param
from tour_pyserini.results import SearchResult
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
from tour_pyserini.teachers import ScoreCache


@dataclass(frozen=True)
class RerankConfig:
    depth: int = param(100, like=DEPTH)
    lam: float = param(1.0, like=LAMBDA)
    smoothing: float = param(100.0, like=SMOOTHING)


@REWRITERS.register
class Rerank(TeacherRewriter):
    """Score the top-``depth`` with the teacher and sort; documents below ``depth`` keep retriever order.

    ``lam`` < 1 interpolates as TOUR's final aggregation does: lam softmax(teacher) + (1 - lam)
    softmax(sim / smoothing). Re-ranking never changes which documents are in the top ``depth``.
    """

    name = "rerank"
    Config = RerankConfig

    def rewrite(self, batch: QueryBatch, index: VectorIndex, hits: int) -> list[SearchResult]:
        cfg = self.config
        self.check_index(index)
        cache = ScoreCache(self.teacher, index.docstore, store=self.store)
        return rank_by_teacher(
            batch,
            index,
            vectors=batch.vectors,
            cache=cache,
            depth=cfg.depth,
            hits=hits,
            lam=cfg.lam,
            smoothing=cfg.smoothing,
        )
