"""What a query rewriter is, and the one thing it may use: a :class:`VectorIndex`.

Rewriters never see the searcher. They search the full, unchanged index through the
:class:`VectorIndex` protocol (exact candidate vectors included), read candidate texts from its
document store, and return one :class:`SearchResult` per query.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np

from tour_pyserini.errors import ParamError
from tour_pyserini.numbers import Param, Role, configure, params_of, positive_float, positive_int, probability
from tour_pyserini.registry import Registry
from tour_pyserini.results import Hit, SearchResult, StopReason, Trace, timed
from tour_pyserini.rewriters.updates import aggregate, fill_unscored

if TYPE_CHECKING:
    from tour_pyserini.encoders import EncoderSpec
    from tour_pyserini.index.docstore import DocStore
    from tour_pyserini.teachers import Teacher
    from tour_pyserini.teachers.cache import ScoreCache
    from tour_pyserini.teachers.store import ScoreStore


class VectorIndex(Protocol):
    """The dense index as a rewriter sees it."""

    @property
    def docstore(self) -> DocStore | None:
        """docid -> text, for teachers that read candidates."""
        ...

    @property
    def encoder(self) -> EncoderSpec | None:
        """What encoded the query vectors, when known."""
        ...

    @property
    def num_docs(self) -> int: ...

    @property
    def dimension(self) -> int: ...

    def search_vectors(self, vectors: np.ndarray, depth: int, return_vector: bool = False) -> list[list[Hit]]:
        """The top-``depth`` hits of the whole index for each row of ``vectors`` (n, d), in row order;
        with ``return_vector`` each hit carries its exact index vector."""
        ...

    def search_candidates(self, vectors: np.ndarray, depth: int) -> list[Candidates]:
        """The same search as arrays, with the exact index vectors: what an iterating rewriter reads (no
        object per hit)."""
        ...


class Abandoned(Exception):
    """A search stopped before its next step because no one waits for its answer any more."""


class StoppableIndex:
    """``index`` as a rewriter sees it, except that each search first asks ``stop()`` and raises
    :class:`Abandoned` when it says so: a caller can end a long rewrite (many iterations, a slow teacher) at its
    next step without the rewriter knowing."""

    def __init__(self, index: VectorIndex, stop: Callable[[], bool]):
        self.index, self.stop = index, stop

    def __getattr__(self, name: str):
        return getattr(self.index, name)

    def check(self) -> None:
        if self.stop():
            raise Abandoned("the search was abandoned")

    def search_vectors(self, vectors: np.ndarray, depth: int, return_vector: bool = False) -> list[list[Hit]]:
        self.check()
        return self.index.search_vectors(vectors, depth, return_vector)

    def search_candidates(self, vectors: np.ndarray, depth: int) -> list[Candidates]:
        self.check()
        return self.index.search_candidates(vectors, depth)


@dataclass(frozen=True)
class Candidates:
    """One query's top-``depth``: docids, similarities (k,) and exact index vectors (k, d), best first."""

    docids: list[str]
    scores: np.ndarray
    vectors: np.ndarray


@dataclass(frozen=True, init=False)
class QueryBatch:
    """Queries that advance through a rewriter together: ids, texts, vectors (n, d) and their traces.

    The traces are made by whoever builds the batch (the searcher records encoding time in them) and
    filled in by the rewriter, so one trace per query travels through the whole search.
    """

    qids: list[str]
    texts: list[str]
    vectors: np.ndarray
    traces: list[Trace]
    encoded_by: Any = None  # the QueryEncoder that made ``vectors``, when the searcher did (teachers share it)

    def __init__(
        self,
        qids: list[str],
        texts: list[str],
        vectors: np.ndarray,
        traces: list[Trace] | None = None,  # None: fresh traces
        encoded_by: Any = None,
    ) -> None:
        object.__setattr__(self, "qids", qids)
        object.__setattr__(self, "texts", texts)
        object.__setattr__(self, "vectors", vectors)
        object.__setattr__(self, "traces", [Trace() for _ in qids] if traces is None else traces)
        object.__setattr__(self, "encoded_by", encoded_by)
        if not (len(self.qids) == len(self.texts) == len(self.vectors) == len(self.traces)):
            raise ValueError(
                f"batch has {len(self.qids)} qids, {len(self.texts)} texts, {len(self.vectors)} vectors "
                f"and {len(self.traces)} traces"
            )

    def __len__(self) -> int:
        return len(self.qids)


@dataclass(frozen=True)
class NoOptions:
    """The configuration of a rewriter that takes no parameters."""


# parameters of every rewriter that ranks with a teacher, declared once (each rewriter's config sets the default)
# ``depth``, not ``k``: k is the number of hits, as in Pyserini's search(query, k); --k is its old flag
DEPTH = Param(
    "depth",
    positive_int,
    help="candidates the teacher scores per query (and per TOUR iteration)",
    metavar="DEPTH",
    aliases=("--k",),
    role=Role.CANDIDATES,
)
LAMBDA = Param("lam", probability, help="final weight of the teacher (1 - lambda: the retriever)", flag="--lambda")
SMOOTHING = Param("smoothing", positive_float, help="retriever logits are sim / smoothing in the final ranking")


class Rewriter(ABC):
    """Turns encoded queries into final rankings.

    A rewriter may search the full, unchanged index as often as it likes through
    ``index.search_vectors`` (with ``return_vector=True`` for candidate vectors), ask a teacher about
    candidate texts from ``index.docstore``, and move the query vectors. It returns one
    :class:`SearchResult` per query, in batch order, with ``hits`` hits and the batch's trace.
    A subclass is registered with ``@REWRITERS.register`` under its ``name`` (the value of
    ``--rewriter``) and declares its parameters once, as the fields of its ``Config`` dataclass
    (:func:`~tour_pyserini.numbers.param`): its flags (``options``), their help and range checks derive from it.
    It is built from a checked config (:meth:`configure`), or from the values themselves.
    """

    name: ClassVar[str]
    Config: ClassVar[type] = NoOptions
    options: ClassVar[tuple[Param, ...]] = ()  # the Config's parameters, set for each subclass
    needs_teacher: ClassVar[bool] = False
    carries: ClassVar[bool] = False  # carries a state from query to query in run order (:meth:`start_run`)

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.options = params_of(cls.Config)

    def __init__(self, config: Any = None, **values) -> None:
        """``config``: the rewriter's ``Config``, checked (:meth:`configure`); else one made of ``values``."""
        if config is not None and values:
            raise TypeError("give a rewriter its config or its values, not both")
        self.config = config if config is not None else self.configure(**values)

    @classmethod
    def configure(cls, **values) -> Any:
        """The rewriter's ``Config`` from parameter values (None: the default), each checked once."""
        return configure(cls.Config, values, f"--rewriter {cls.name}")

    @abstractmethod
    def rewrite(self, batch: QueryBatch, index: VectorIndex, hits: int) -> list[SearchResult]: ...

    def check_index(self, index: VectorIndex) -> None:
        """Refuse an index with fewer documents than an option counts (:func:`check_candidates`)."""
        check_candidates(type(self), self.config, index.num_docs)

    def start_run(self, state: bytes | None = None) -> None:
        """A rewriter that :attr:`carries` a state carries it from each query to the next from now on, in the order
        queries come (a run's order), starting from ``state`` (what :meth:`run_state` gave; None: fresh). Until then
        every query starts fresh, as each request to a server does."""
        return None

    def run_state(self) -> bytes | None:
        """The carried state after the queries so far (None: none), for a run to record with them and resume from."""
        return None


class TeacherRewriter(Rewriter):
    """A rewriter that asks a teacher: built with it, and with the score store that keeps its scores across
    searches (see :class:`~tour_pyserini.teachers.cache.ScoreCache`)."""

    needs_teacher = True

    def __init__(self, teacher: Teacher, config: Any = None, *, store: ScoreStore | None = None, **values) -> None:
        super().__init__(config, **values)
        self.teacher, self.store = teacher, store


REWRITERS: Registry[type[Rewriter]] = Registry("rewriter", "tour_pyserini.rewriters")


def rerank_head(hits: Sequence[Hit], head_scores: np.ndarray) -> list[Hit]:
    """Put the first ``len(head_scores)`` hits in order of ``head_scores``; the rest keep retriever order below.

    Head hits get score ``offset + head_score`` with the offset placing all of them above the tail,
    so run files stay strictly decreasing. Ties in ``head_scores`` keep retriever order.
    """
    n = len(head_scores)
    head, tail = list(hits[:n]), list(hits[n:])
    order = np.argsort(-np.asarray(head_scores, dtype=np.float64), kind="stable")
    offset = (tail[0].score - float(np.min(head_scores)) + 1.0) if tail else 0.0
    reranked = [Hit(head[i].docid, offset + float(head_scores[i]), head[i].vector) for i in order]
    return reranked + tail


def check_candidates(cls: type[Rewriter], config: Any, num_docs: int) -> None:
    """No option of ``cls`` counting candidates (:attr:`~tour_pyserini.numbers.Role.CANDIDATES`) beyond the index's
    ``num_docs`` documents: the one check, which a plan makes before anything loads and a rewriter before it
    searches an index it was not planned for."""
    for option in cls.options:
        value = getattr(config, option.name, None)
        if option.role is Role.CANDIDATES and value is not None and num_docs and value > num_docs:
            raise ParamError(option.name, option.option, f"{value} is larger than the index ({num_docs} documents)")


def rank_by_teacher(
    batch: QueryBatch,
    index: VectorIndex,
    *,
    vectors: np.ndarray,
    cache: ScoreCache,
    depth: int,
    hits: int,
    lam: float,
    smoothing: float | Sequence[float],
    scored: Sequence[dict[str, np.ndarray]] | None = None,
) -> list[SearchResult]:
    """Search with ``vectors``; rank each top-``depth`` by lam softmax(teacher) + (1 - lam) softmax(sim / smoothing)
    (``smoothing``: one for all queries, or one per query).

    The final step shared by re-ranking and TOUR: documents below ``depth`` keep retriever order, and
    ``hits`` documents are returned per query. ``scored`` (one ``{docid: vector}`` per query) adds
    candidates the teacher has already scored to the ranked head, so the teacher ranks their union
    with the new top-``depth`` at no extra teacher calls. Candidates the teacher could not score rank below
    those it scored; a query it scored none of keeps the search's ranking, as its trace says.
    """
    traces = batch.traces
    with timed(traces, "search"):
        rankings = index.search_vectors(vectors, max(hits, depth), return_vector=scored is not None)
    heads = [list(ranking[:depth]) for ranking in rankings]
    tails = [list(ranking[depth:]) for ranking in rankings]
    if scored is not None:
        for i, extra in enumerate(scored):
            seen = {h.docid for h in heads[i]}
            heads[i] += [Hit(d, float(vectors[i] @ v), v) for d, v in extra.items() if d not in seen]
            seen.update(extra)
            tails[i] = [h for h in tails[i] if h.docid not in seen]
    teacher_scores = cache.score(
        batch.qids, batch.texts, [[h.docid for h in head] for head in heads], traces, batch.vectors, batch.encoded_by
    )
    results = []
    smoothings = np.broadcast_to(np.asarray(smoothing, dtype=np.float64), (len(batch.qids),))
    for qid, ranking, head, tail, scores, trace, smooth in zip(
        batch.qids, rankings, heads, tails, teacher_scores, traces, smoothings
    ):
        if scores.size and np.isnan(scores).all():  # nothing to re-rank by: the search's own ranking and scores
            trace.stop_reason = StopReason.NOT_RERANKED
            results.append(SearchResult(qid, list(ranking[:hits]), trace))
            continue
        retriever = np.array([h.score for h in head])
        final = rerank_head(head + tail, aggregate(fill_unscored(scores), retriever, lam, float(smooth)))
        results.append(SearchResult(qid, final[:hits], trace))
    return results
