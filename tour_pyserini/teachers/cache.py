"""The per-query teacher score cache: a candidate is scored at most once per query."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tour_pyserini.index.docstore import DocStore
from tour_pyserini.results import Trace, timed
from tour_pyserini.teachers.base import ScoreRequest, Teacher


class ScoreCache:
    """Scores many queries' candidates with one teacher call, remembering every (qid, docid) score.

    With ``enabled=False`` (the paper's no-cache ablation) every candidate is scored again each time;
    the scores are the same, only the teacher calls grow.
    """

    def __init__(self, teacher: Teacher, docstore: DocStore | None = None, enabled: bool = True):
        if teacher.needs_text and docstore is None:
            raise ValueError(f"teacher {teacher.label!r} reads document texts but the index has no docstore")
        self.teacher = teacher
        self.docstore = docstore
        self.enabled = enabled
        self.scores: dict[str, dict[str, float]] = {}

    def score(
        self, qids: Sequence[str], queries: Sequence[str], docids: Sequence[Sequence[str]], traces: Sequence[Trace]
    ) -> list[np.ndarray]:
        """Scores of each query's candidates, aligned with ``docids``; counts calls and hits in ``traces``."""
        requests = []
        for qid, query, candidates, trace in zip(qids, queries, docids, traces):
            known = self.scores.setdefault(qid, {}) if self.enabled else {}
            new = list(dict.fromkeys(d for d in candidates if d not in known))
            trace.cache_hits += len(candidates) - len(new) if self.enabled else 0
            trace.teacher_calls += len(new)
            if new:
                requests.append((trace, ScoreRequest(qid, query, new)))
        if requests:
            with timed([trace for trace, _ in requests], "teacher"):
                batch = [self._with_text(r) for _, r in requests]
                for request, scores in zip(batch, self.teacher.score(batch)):
                    scores = np.asarray(scores, dtype=np.float64)
                    if scores.shape != (len(request.docids),) or not np.isfinite(scores).all():
                        raise ValueError(f"teacher {self.teacher.label!r} returned non-finite or misshaped scores "
                                         f"for query {request.qid!r}")  # fmt: skip
                    self.scores.setdefault(request.qid, {}).update(zip(request.docids, scores.tolist()))
        out = [np.array([self.scores[q][d] for d in c]) if c else np.zeros(0) for q, c in zip(qids, docids)]
        if not self.enabled:
            self.scores.clear()
        return out

    def _with_text(self, request: ScoreRequest) -> ScoreRequest:
        if not self.teacher.needs_text:
            return request
        return ScoreRequest(request.qid, request.query, request.docids, self.docstore.get(request.docids))
