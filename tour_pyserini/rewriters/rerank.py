"""Direct re-ranking: the teacher reorders the retriever's top-depth. The baseline TOUR must beat."""

from __future__ import annotations

from tour_pyserini.errors import UserError
from tour_pyserini.results import SearchResult
from tour_pyserini.rewriters.base import (
    DEPTH,
    LAMBDA,
    REWRITERS,
    SMOOTHING,
    QueryBatch,
    Rewriter,
    VectorIndex,
    check_depth,
    rank_by_teacher,
)
from tour_pyserini.rewriters.updates import check_aggregation
from tour_pyserini.teachers import ScoreCache, ScoreStore, Teacher


@REWRITERS.register
class Rerank(Rewriter):
    """Score the top-``depth`` with the teacher and sort; documents below ``depth`` keep retriever order.

    ``lam`` < 1 interpolates as TOUR's final aggregation does: lam softmax(teacher) + (1 - lam)
    softmax(sim / smoothing). Re-ranking never changes which documents are in the top ``depth``.
    """

    name = "rerank"
    options = (DEPTH, LAMBDA, SMOOTHING)

    def __init__(self, teacher: Teacher, depth: int = 100, lam: float = 1.0, smoothing: float = 100.0, *,
                 store: ScoreStore | None = None):  # fmt: skip
        """``store`` keeps teacher scores on disk across searches (see :class:`ScoreCache`)."""
        self.check_options(depth, lam, smoothing)
        self.store = store
        self.teacher, self.depth, self.lam, self.smoothing = teacher, depth, lam, smoothing

    @classmethod
    def check_options(cls, depth: int = 100, lam: float = 1.0, smoothing: float = 100.0) -> None:
        if depth < 1:
            raise UserError(f"re-ranking depth --k must be positive, got {depth}")
        check_aggregation(lam, smoothing)

    def rewrite(self, batch: QueryBatch, index: VectorIndex, hits: int) -> list[SearchResult]:
        check_depth(self.depth, index)
        cache = ScoreCache(self.teacher, index.docstore, store=self.store)
        return rank_by_teacher(batch, index, vectors=batch.vectors, cache=cache, depth=self.depth, hits=hits,
                               lam=self.lam, smoothing=self.smoothing)  # fmt: skip
