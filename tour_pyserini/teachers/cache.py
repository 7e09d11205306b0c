"""The per-search teacher score cache: a candidate is scored at most once per query."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import repeat

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.index.docstore import DocStore
from tour_pyserini.results import Trace, timed
from tour_pyserini.teachers.base import ScoreRequest, Teacher, with_texts
from tour_pyserini.teachers.store import ScoreStore, StoredTeacher


def mostly_unscored(unscored: int, asked: int) -> bool:
    """Whether a teacher gave no score for most of the pairs it was asked: too few to rank or learn by."""
    return unscored * 2 > asked


class ScoreCache:
    """Scores many queries' candidates with one teacher call, remembering every (qid, docid) score.

    One cache serves one search (one rewrite of a batch) and holds all per-query state of it: the
    scores, and each query's ``memo`` that teachers calibrating per query use. With ``enabled=False``
    (the paper's no-cache ablation) every candidate is scored again each time; the scores are the same,
    only the teacher calls grow. A ``store`` keeps scores across searches (on disk): pairs found there
    are not sent to the teacher, but still count as teacher calls, since the budget is the same. A pair
    the teacher could not score stays NaN here (it is not asked again in this search) and is counted in
    the query's ``Trace.unscored``.
    """

    def __init__(
        self,
        teacher: Teacher,
        docstore: DocStore | None = None,
        *,
        enabled: bool = True,
        store: ScoreStore | None = None,
    ):
        if teacher.needs_text and docstore is None:
            raise UserError(f"teacher {teacher.label!r} reads document texts but the index has no docstore")
        if store is not None and not teacher.pairwise:
            raise ValueError(f"teacher {teacher.label!r} scores depend on the other candidates: they cannot be stored")
        self.teacher = teacher
        self.docstore = docstore
        self.enabled = enabled
        self.store = store
        self.scorer = StoredTeacher(teacher, store, docstore) if store is not None else teacher
        self.scores: dict[str, dict[str, float]] = {}
        self.memos: dict[str, dict] = {}

    def score(
        self,
        qids: Sequence[str],
        queries: Sequence[str],
        docids: Sequence[Sequence[str]],
        traces: Sequence[Trace],
        vectors: np.ndarray | Sequence[np.ndarray] | None = None,
        encoded_by=None,
    ) -> list[np.ndarray]:
        """Scores of each query's candidates, aligned with ``docids``; counts calls and hits in ``traces``.
        ``vectors``: the queries' vectors as ``encoded_by`` (the searcher's ``QueryEncoder``) made them, for
        teachers that would encode the queries with it (:class:`ScoreRequest`)."""
        requests = []
        rows: Iterable[np.ndarray | None] = repeat(None) if vectors is None else vectors  # one per query
        for qid, query, candidates, trace, vector in zip(qids, queries, docids, traces, rows):
            known = self.scores.setdefault(qid, {}) if self.enabled else {}
            new = list(dict.fromkeys(d for d in candidates if d not in known))
            trace.cache_hits += len(candidates) - len(new) if self.enabled else 0
            trace.teacher_calls += len(new)
            if new:
                request = ScoreRequest(
                    qid,
                    query,
                    new,
                    memo=self.memos.setdefault(qid, {}),
                    vector=vector,
                    encoded_by=encoded_by if vector is not None else None,
                )
                requests.append((trace, request))
        if requests:
            with timed([trace for trace, _ in requests], "teacher"):
                for (trace, request), scores in zip(requests, self._score([r for _, r in requests])):
                    self.scores.setdefault(request.qid, {}).update(zip(request.docids, scores))
                    scored = ~np.isnan(scores)
                    trace.unscored += int(np.count_nonzero(~scored))
                    trace.judgments.update(zip(np.asarray(request.docids)[scored].tolist(), scores[scored].tolist()))
        out = [np.array([self.scores[q][d] for d in c]) if c else np.zeros(0) for q, c in zip(qids, docids)]
        if not self.enabled:
            self.scores.clear()
        return out

    def _score(self, requests: list[ScoreRequest]) -> list[np.ndarray]:
        """Scores of the requests (from the store where it has them), checked: finite, or NaN for no score."""
        if self.store is None and self.teacher.needs_text:
            requests = [with_texts(r, self.docstore) for r in requests]
        out = [np.asarray(s, dtype=np.float64) for s in self.scorer.score(requests)]  # a store reads missing texts
        for request, scores in zip(requests, out):
            if scores.shape != (len(request.docids),) or np.isinf(scores).any():
                raise ValueError(
                    f"teacher {self.teacher.label!r} returned infinite or misshaped scores for query {request.qid!r}"
                )
        return out
