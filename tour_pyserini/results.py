"""The small records every search returns: hits, per-query traces and results."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from enum import StrEnum

import numpy as np

PHASES = ("encode", "search", "teacher", "update")


class StopReason(StrEnum):
    """Why a query's rewrite stopped, as its trace records it (the text is what runs' traces hold)."""

    MAX_ITERATIONS = "max iterations"
    TOP1_POSITIVE = "retriever top-1 is a pseudo positive"  # TOUR-hard's early stop
    TOP1_ARGMAX = "retriever top-1 is the teacher's top-1"  # TOUR-soft's early stop (the paper's)
    TOP1_NUCLEUS = "retriever top-1 is in the teacher's nucleus"  # TOUR-soft's early stop (the official code's)
    UNSCORED = "the teacher scored none of the candidates"  # the iterations stopped: nothing to learn from
    NOT_RERANKED = "the teacher scored none of its candidates: retriever order kept"  # nothing to rank by
    TEACHER_FAILED = "the teacher failed: unjudged"  # a server's policy served the query unjudged
    TOO_FEW = "fewer candidates than pseudo positives and negatives"  # DART left the query as it was

    @property
    def early(self) -> bool:
        """Whether the rewriter's early-stop rule fired (the query needed no more iterations)."""
        return self in (StopReason.TOP1_POSITIVE, StopReason.TOP1_ARGMAX, StopReason.TOP1_NUCLEUS)


@dataclass(slots=True)
class Hit:
    """One retrieved document; ``vector`` is its index vector when the search asked for it."""

    docid: str
    score: float
    vector: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def index_vector(self) -> np.ndarray:
        """``vector``, which every hit of a search that asked for vectors carries."""
        if self.vector is None:
            raise ValueError(f"hit {self.docid!r} carries no vector: its search did not ask for them")
        return self.vector


@dataclass
class Trace:
    """What a rewriter did for one query: the numbers the TOUR paper reports per query."""

    iterations: int = 0
    teacher_calls: int = 0
    cache_hits: int = 0
    unscored: int = 0  # pairs the teacher was asked but gave no score for (an API that answered nothing usable)
    stop_reason: StopReason | None = None
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    losses: list[float] = field(default_factory=list)  # the rewriter's loss at each iteration
    # the teacher's score of every candidate it judged for this query: rewards to recycle (ttt recycle)
    judgments: dict[str, float] = field(default_factory=dict)

    @property
    def unjudged(self) -> bool:
        """Whether a teacher asked to judge this query judged none of its candidates (it scored none, or failed):
        its ranking is the retriever's, never to be passed off as a teacher's, whichever face shows it."""
        return self.stop_reason in (StopReason.NOT_RERANKED, StopReason.TEACHER_FAILED)

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
