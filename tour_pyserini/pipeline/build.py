"""From a :class:`~tour_pyserini.pipeline.plan.Plan` to a running :class:`Pipeline`, reading, resolving and checking
nothing again: the only place a searcher, a rewriter, a teacher or a score store is made.

Each model loads once per process: the searcher's index and query encoder are the ones every teacher reading the
same index or encoder shares, and two pipelines of one :class:`~tour_pyserini.pipeline.resources.Resources` that
differ only in their rewriter share their index, query encoder, teacher and store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tour_pyserini.encoders.query import QueryEncoder
from tour_pyserini.index.layout import IndexKind
from tour_pyserini.pipeline.plan import STORE_NEEDS_PAIRWISE, Plan
from tour_pyserini.results import SearchResult, Trace
from tour_pyserini.rewriters import Rewriter
from tour_pyserini.rewriters.base import TeacherRewriter
from tour_pyserini.teachers import Teacher, TeacherContext, TeacherSpec, get_teacher, options_for
from tour_pyserini.teachers.store import ScoreStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TeacherInfo:
    """What a run says of the teacher that ranked it: its label, and whether it read relevance judgements."""

    label: str
    oracle: bool


@dataclass
class Pipeline:
    """A search system assembled: the searcher (a ``TourSearcher`` ranking with the rewriter, so that Pyserini's
    ``FaissSearcher`` API runs the whole system; or a ``Bm25Searcher`` for a BM25 index), the rewriter (None on a
    BM25 index), the teacher it asks and the store keeping that teacher's scores."""

    plan: Plan
    searcher: Any
    rewriter: Rewriter | None = None
    teacher: Teacher | None = None
    store: ScoreStore | None = None

    @property
    def asked_teacher(self) -> Teacher:
        """The teacher of a search planned with one (a rewriter's, or one its caller asks itself)."""
        if self.teacher is None:
            raise ValueError(f"the search of {self.plan.spec.index} was planned with no teacher")
        return self.teacher

    @property
    def info(self) -> TeacherInfo | None:
        return None if self.teacher is None else TeacherInfo(self.teacher.label, self.teacher.oracle)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """The query vectors (n, d) the searcher's encoder makes of ``texts`` (a dense index)."""
        return self.searcher.encode(texts)

    def run(
        self,
        texts: Sequence[str],
        qids: Sequence[str],
        k: int,
        *,
        vectors: np.ndarray | None = None,
        traces: Sequence[Trace] | None = None,
        stop: Callable[[], bool] | None = None,
        encoded: bool = False,
    ) -> list[SearchResult]:
        """The top ``k`` of each query, ranked by the rewriter, with its trace, in order. ``vectors``: the queries
        already encoded (``encoded``: by :meth:`encode`, untouched since, so that a teacher of the same encoder takes
        them instead of encoding the texts again; else moved since, or another encoder's); ``traces``: one per
        query, to fill further; ``stop``: asked before each search, and once true the call raises
        :class:`~tour_pyserini.rewriters.Abandoned`."""
        if self.plan.kind == IndexKind.BM25:
            with self.searcher.bm25(self.plan.spec.bm25_k1, self.plan.spec.bm25_b):
                return self.searcher.retrieve(texts, qids, k)
        if vectors is None:
            return self.searcher.retrieve(texts, qids, k, traces=traces, stop=stop)
        encoded_by = self.searcher.query_encoder if encoded else None
        return self.searcher.retrieve_vectors(texts, qids, vectors, k, traces=traces, stop=stop, encoded_by=encoded_by)


def build(plan: Plan) -> Pipeline:
    """The pipeline ``plan`` describes, from what its resources hold or open now."""
    spec = plan.spec
    if plan.kind == IndexKind.BM25:
        from tour_pyserini.search.bm25 import Bm25Searcher

        searcher = plan.resources.shared(
            "bm25", (spec.index, spec.threads), lambda: Bm25Searcher.from_index(spec.index, threads=spec.threads or 1)
        )
        return Pipeline(plan, searcher)
    if spec.threads:  # the encoder and a cross-encoder teacher share torch's process-wide thread pool
        import torch

        torch.set_num_threads(spec.threads)
    teacher = build_teacher(plan) if plan.teacher else None  # first: a teacher's own input is refused before the
    store = None  # query encoder loads
    if spec.score_store:
        if teacher is None or not teacher.pairwise:
            from tour_pyserini.errors import UserError

            raise UserError(STORE_NEEDS_PAIRWISE)
        store = plan.resources.store(spec.score_store, teacher.fingerprint)
    if teacher is not None and teacher.oracle:
        log.warning(
            "ORACLE teacher — what it ranks or judges reads the relevance judgements (an upper bound, not a system)"
        )
    rewriter = build_rewriter(plan, teacher, store)
    return Pipeline(plan, dense_searcher(plan, rewriter), rewriter, teacher, store)


def dense_searcher(plan: Plan, rewriter: Rewriter):
    """The plan's index and query encoder (shared through its resources) as a searcher ranking with ``rewriter``."""
    from tour_pyserini.search.searcher import TourSearcher

    spec, encoded = plan.spec, plan.spec.encoded_queries
    if plan.encoder is not None:  # the one a teacher built already, where it reads the same encoder
        encoder = plan.resources.encoders.get(plan.encoder, spec.device, plan.encoder_precision, plan.encoder_runtime)
    elif encoded:
        encoder = plan.resources.shared("encoded", encoded, lambda: QueryEncoder.from_encoded(encoded))
    else:
        raise ValueError(f"the plan of dense index {spec.index} has neither a query encoder nor encoded queries")
    return TourSearcher.from_open_index(plan.index, encoder, rewriter=rewriter, threads=spec.threads or 1)


def build_rewriter(plan: Plan, teacher: Teacher | None, store: ScoreStore | None) -> Rewriter:
    """The plan's rewriter from its checked config, with the teacher, store and state it uses."""
    cls = plan.dense_rewriter
    if not cls.needs_teacher:
        if plan.start is not None:  # ttt-embed searches with the state read in planning
            return cls(config=plan.rewriter_config, shift=plan.start)
        return cls(config=plan.rewriter_config)
    if not issubclass(cls, TeacherRewriter) or teacher is None:  # planning gives a teacher to each that asks one
        raise ValueError(f"rewriter {cls.name!r} asks a teacher: it is a TeacherRewriter, and its plan has one")
    extra: dict[str, Any] = {"store": store} if store is not None else {}
    if plan.start is not None:
        extra["start"] = plan.start
    return cls(teacher, config=plan.rewriter_config, **extra)


def build_teacher(plan: Plan, spec: TeacherSpec | None = None) -> Teacher:
    """The plan's teacher (or ``spec``, another one planned with it: a server's) over the plan's index, with the
    teacher flags it reads, sharing the plan's index and query encoder; each built once per process."""
    spec = spec or plan.teacher
    if spec is None:
        raise ValueError("build_teacher builds the plan's teacher, or another one planned with it: there is neither")
    search = plan.spec
    options = options_for(str(spec), search.teacher_options)
    key = (
        spec,
        search.index,
        search.teacher_max_length,
        search.device,
        search.teacher_precision,
        tuple(sorted(options.items())),
    )
    context = TeacherContext(
        index_dir=search.index,
        max_length=search.teacher_max_length,
        device=search.device,
        precision=search.teacher_precision,
        options=options,
        encoders=plan.resources.encoders,
        indexes=plan.resources.indexes,
    )
    return plan.resources.shared("teacher", key, lambda: get_teacher(spec, context))
