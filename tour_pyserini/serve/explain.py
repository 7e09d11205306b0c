"""What the explorer page shows of one query: each search TOUR made, the teacher's labels, the rank
trajectories of the documents that moved, and re-ranking at the same number of teacher calls.

TOUR is run as any search runs it, through a :class:`RecordingIndex` that keeps every ranking the rewriter
asked the index for (one per iteration, then the final search), so what is shown is what happened.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tour_pyserini.rewriters import Candidates, QueryBatch, Rewriter, VectorIndex


class RecordingIndex:
    """A :class:`VectorIndex` that delegates to ``index`` and keeps each search's ranking of the first query."""

    def __init__(self, index: VectorIndex):
        self.index = index
        self.docstore = index.docstore
        self.encoder = index.encoder
        self.searches: list[list[tuple[str, float]]] = []

    @property
    def num_docs(self) -> int:
        return self.index.num_docs

    @property
    def dimension(self) -> int:
        return self.index.dimension

    def search_vectors(self, vectors: np.ndarray, depth: int, return_vector: bool = False):
        rankings = self.index.search_vectors(vectors, depth, return_vector)
        self.searches.append([(h.docid, float(h.score)) for h in rankings[0]])
        return rankings

    def search_candidates(self, vectors: np.ndarray, depth: int) -> list[Candidates]:
        found = self.index.search_candidates(vectors, depth)
        self.searches.append(list(zip(found[0].docids, found[0].scores.tolist())))
        return found


@dataclass(frozen=True)
class Stage:
    name: str
    ranking: list[tuple[str, float]]

    def to_json(self, show: int) -> dict:
        return {"name": self.name, "ranking": [{"docid": d, "score": round(s, 6)} for d, s in self.ranking[:show]]}


def trajectories(stages: list[Stage], show: int) -> dict[str, list[int | None]]:
    """Each document's rank (1-based; None below ``show``) at every stage, for the documents whose rank changes."""
    ranks = [{d: r for r, (d, _) in enumerate(stage.ranking[:show], 1)} for stage in stages]
    docids = dict.fromkeys(d for stage in ranks for d in stage)
    paths = {d: [stage.get(d) for stage in ranks] for d in docids}
    return {d: path for d, path in paths.items() if len(set(path)) > 1}


def explain(
    index: VectorIndex,
    vector: np.ndarray,
    query: str,
    qid: str,
    *,
    tour: Rewriter,
    rerank_at: Callable[[int], Rewriter] | None,
    hits: int,
    show: int,
) -> dict:
    """TOUR's stages for one query (vector (1, d)), and, with ``rerank_at`` (a function from a teacher-call
    count to a re-ranking rewriter), re-ranking the base top with as many teacher calls as TOUR made."""
    recorder = RecordingIndex(index)
    result = tour.rewrite(QueryBatch([qid], [query], vector), recorder, hits)[0]
    searches = recorder.searches
    stages = [
        Stage("first search" if i == 0 else f"after step {i}", ranking) for i, ranking in enumerate(searches[:-1])
    ]
    stages.append(Stage("final search", searches[-1]))
    stages.append(Stage("TOUR's ranking (teacher + retriever)", [(h.docid, h.score) for h in result.hits]))
    out = {
        "stages": [stage.to_json(show) for stage in stages],
        "trajectories": trajectories(stages, show),
        "judgments": {d: round(s, 6) for d, s in result.trace.judgments.items()},
        "trace": {k: v for k, v in result.trace.to_json().items() if k != "judgments"},
    }
    if rerank_at is not None:
        calls = max(1, result.trace.teacher_calls)
        reranked = rerank_at(calls).rewrite(QueryBatch([qid], [query], vector), index, max(hits, calls))[0]
        out["rerank"] = {
            "depth": calls,
            "ranking": [{"docid": h.docid, "score": round(h.score, 6)} for h in reranked.hits[:show]],
            "judgments": {d: round(s, 6) for d, s in reranked.trace.judgments.items()},
        }
    return out
