"""The small records every search returns: hits, per-query traces and results."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import numpy as np

PHASES = ("encode", "search", "teacher", "update")
NOT_RERANKED = "the teacher scored none of its candidates: retriever order kept"  # a trace's stop reason


@dataclass(slots=True)
class Hit:
    """One retrieved document; ``vector`` is its index vector when the search asked for it."""

    docid: str
    score: float
    vector: np.ndarray | None = field(default=None, repr=False, compare=False)


@dataclass
class Trace:
    """What a rewriter did for one query: the numbers the TOUR paper reports per query."""

    iterations: int = 0
    teacher_calls: int = 0
    cache_hits: int = 0
    unscored: int = 0  # pairs the teacher was asked but gave no score for (an API that answered nothing usable)
    stop_reason: str | None = None
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    losses: list[float] = field(default_factory=list)  # the rewriter's loss at each iteration
    # the teacher's score of every candidate it judged for this query: rewards to recycle (ttt recycle)
    judgments: dict[str, float] = field(default_factory=dict)

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds.values())

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class SearchResult:
    """The final ranking of one query and how it was obtained."""

    qid: str
    hits: list[Hit]
    trace: Trace = field(default_factory=Trace)


@contextmanager
def timed(traces: Sequence[Trace], phase: str) -> Iterator[None]:
    """Add the block's wall time to ``phase``, shared equally by the queries that the work was for."""
    start = time.perf_counter()
    try:
        yield
    finally:
        elapsed = time.perf_counter() - start
        for trace in traces:
            trace.seconds[phase] += elapsed / len(traces)
