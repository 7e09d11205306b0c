"""From a search's typed configuration to a ready searcher, checking once and building once.

:func:`plan_search` checks a :class:`SearchConfig` before any model, the JVM or Ray starts and resolves it into a
:class:`SearchPlan`: the index opened (memory-mapped) with its metadata, the query encoder's spec and precision,
the rewriter's typed config, the TTT-Embed state read. :func:`open_searcher` builds from the plan, reading,
resolving and checking nothing again, and builds each model once: the searcher's query encoder and index are the
ones every teacher that reads the same encoder or index shares (:class:`~tour_pyserini.teachers.TeacherContext`).

The search command plans in its driver; each distributed worker plans and opens its own searcher from the same
:class:`SearchConfig` (an opened index does not travel between processes).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tour_pyserini.devices import check_device
from tour_pyserini.encoders import EncoderSettings, EncoderSpec, encoder_identity
from tour_pyserini.encoders.exported import EXPORTABLE, check_exportable
from tour_pyserini.encoders.query import QueryEncoder, QueryEncoders, check_encoded_queries, resolve_query_precision
from tour_pyserini.errors import ParamError, UserError
from tour_pyserini.index.faiss_index import OpenIndex, OpenIndexes, set_search_params
from tour_pyserini.index.layout import check_readable, index_kind
from tour_pyserini.index.query_side import index_query_encoder
from tour_pyserini.rewriters import Rewriter, check_rewriter
from tour_pyserini.rewriters.ttt_embed import StateShift
from tour_pyserini.runtime import AUTO, resolve_runtime, resolve_runtime_precision
from tour_pyserini.teachers import Teacher, TeacherSpec, check_shared_teacher_options, options_for
from tour_pyserini.teachers.bm25_math import K1, B
from tour_pyserini.teachers.cross_encoder import RUNTIME

log = logging.getLogger(__name__)

STORE_NEEDS_PAIRWISE = (
    "--score-store keeps the scores of a --teacher whose pair scores stand alone "
    "(cross-encoder, llm, monot5, openai, bm25, dense, ensemble, oracle)"
)


@dataclass(frozen=True)
class TeacherInfo:
    """What a run says of the teacher that ranked it: its label, and whether it read relevance judgements."""

    label: str
    oracle: bool


@dataclass(frozen=True)
class SearchConfig:
    """What a searcher is opened from: the index and its knobs, the query encoder, the rewriter with its own
    parameters, and the teacher (a spec such as ``bm25`` or ``cross-encoder:PATH``, parsed when the search is
    planned) it asks."""

    index: str
    encoder: str | None = None  # default: the one the index was built with
    encoder_settings: EncoderSettings = EncoderSettings()  # class, pooling, prefix, ... as the flags give them
    encoded_queries: str | None = None  # Pyserini's pre-encoded queries instead of an encoder
    encoder_precision: str | None = None  # the query encoder's arithmetic: auto (None), fp32, bf16 or int8
    encoder_runtime: str = AUTO  # what runs the query encoder: auto (resolve_runtime), torch, onnx or openvino
    rewriter: str | None = "none"  # None: no rewriter; a teacher is opened for the caller to ask (rewards, training)
    rewriter_options: Mapping[str, object] = field(default_factory=dict)  # parameters the rewriter declares
    teacher: str | TeacherSpec | None = None
    teacher_max_length: int | None = None
    teacher_precision: str | None = None
    teacher_options: Mapping[str, object] = field(default_factory=dict)  # values of the flags teachers declare
    score_store: str | None = None
    threads: int | None = None  # torch's own for models, 1 for Faiss when None
    device: str = "cpu"
    ef_search: int | None = None
    nprobe: int | None = None
    bm25_k1: float = K1
    bm25_b: float = B


@dataclass(frozen=True)
class SearchPlan:
    """A search checked and resolved: what :func:`open_searcher` builds from (dense indexes; a BM25 index needs
    only its ``config``)."""

    config: SearchConfig
    kind: str  # "dense" or "bm25"
    rewriter: type[Rewriter] | None = None
    rewriter_config: Any = None  # the rewriter's Config, checked
    opened: OpenIndexes = field(default_factory=OpenIndexes)  # the index (and any a teacher reads), opened once
    encoder: EncoderSpec | None = None  # None: pre-encoded queries
    encoder_precision: str = "fp32"
    encoder_runtime: str = "torch"  # auto resolved
    start: StateShift | None = None  # the TTT-Embed state the rewriter searches with or starts from, read
    teacher: TeacherSpec | None = None  # the config's teacher spec, parsed and its kind known

    @property
    def index(self) -> OpenIndex:
        return self.opened.get(self.config.index)


def plan_teachers(specs: Sequence[str | TeacherSpec], config: SearchConfig) -> tuple[TeacherSpec, ...]:
    """``specs`` parsed (an unknown kind refused), and ``config``'s teacher flags and precision checked against
    them: the teachers of one search, or of a server that shares one set of teacher flags among them."""
    parsed = tuple(TeacherSpec.parse(spec) for spec in specs)
    for spec in parsed:
        spec.teacher_class()
    check_shared_teacher_options([str(spec) for spec in parsed], config.teacher_options)
    runtime = config.teacher_options.get(RUNTIME.name)
    if config.teacher_precision or runtime:
        resolve_runtime_precision(
            config.teacher_precision or "auto",
            runtime or RUNTIME.default,
            config.device,
            "--teacher-precision",
            RUNTIME.option,
        )
    return parsed


def plan_search(config: SearchConfig, opened: OpenIndexes | None = None) -> SearchPlan:
    """Everything about ``config`` that can be checked before a model or the JVM loads, resolved into the plan
    that building consumes; ``opened``: dense indexes already open (a server's), shared with this plan."""
    teacher = next(iter(plan_teachers([config.teacher] if config.teacher else [], config)), None)
    if config.score_store:
        from tour_pyserini.teachers.store import check_store_path

        if not config.teacher:
            raise UserError(STORE_NEEDS_PAIRWISE)
        check_store_path(config.score_store)
    if index_kind(config.index) == "bm25":
        check_readable(config.index)
        if config.rewriter != "none" or config.teacher:
            raise UserError("--rewriter and --teacher need a dense index; this one is BM25")
        if config.ef_search is not None or config.nprobe is not None:
            raise UserError("--ef-search and --nprobe apply to dense indexes; this one is BM25")
        return SearchPlan(config, "bm25")
    rewriter, rewriter_config = None, None
    if config.rewriter is not None:
        rewriter, rewriter_config = check_rewriter(
            config.rewriter, dict(config.rewriter_options), teacher=bool(config.teacher)
        )
    opened = OpenIndexes() if opened is None else opened
    index = opened.get(config.index)
    set_search_params(index.index, ef_search=config.ef_search, nprobe=config.nprobe, where=config.index)
    for option in rewriter.options if rewriter else ():  # what a rewriter searches deeper than the index holds
        if (
            option.name in ("depth", "prf_depth")
            and index.meta is not None
            and getattr(rewriter_config, option.name) > index.meta.num_docs
        ):
            raise ParamError(
                option.name,
                option.option,
                f"{getattr(rewriter_config, option.name)} is larger than the index ({index.meta.num_docs} documents)",
            )
    state = getattr(rewriter_config, "state", None)
    start = StateShift.load(state, rewriter_config.task) if state else None
    spec, runtime = None, "torch"
    if config.encoded_queries:
        if (
            config.encoder
            or config.encoder_settings != EncoderSettings()
            or config.encoder_precision
            or config.encoder_runtime != AUTO
        ):
            raise UserError("--encoded-queries replaces the query encoder: give no --encoder or encoder flags")
        check_encoded_queries(config.encoded_queries, dimension=index.index.d)
        if start:
            raise UserError(
                "--state: a TTT-Embed state needs the encoder its queries were encoded with, and "
                "--encoded-queries names none"
            )
    else:  # the encoder's flags, its class and its pairing with the index: before the encoder loads
        spec = index_query_encoder(index.directory, index.meta, config.encoder, config.encoder_settings)
        if start:  # a TTT-Embed state of another encoder
            start.state.check_encoder(encoder_identity(spec), f"--state {state}")
        runtime = resolve_runtime(
            config.encoder_runtime,
            config.device,
            spec.path,
            "--encoder-runtime",
            f"the query encoder {spec.name}",
            exportable=spec.encoder_class in EXPORTABLE,
        )
        check_exportable(spec, runtime)
    check_device(config.device)
    precision = resolve_query_precision(config.encoder_precision, config.device, runtime)
    return SearchPlan(config, "dense", rewriter, rewriter_config, opened, spec, precision, runtime, start, teacher)


@dataclass
class OpenSearch:
    """A plan opened: its searcher (``TourSearcher``, or ``Bm25Searcher`` for a BM25 index) and its teacher."""

    searcher: Any
    teacher: Teacher | None = None

    @property
    def info(self) -> TeacherInfo | None:
        return None if self.teacher is None else TeacherInfo(self.teacher.label, self.teacher.oracle)


def open_searcher(plan: SearchPlan | SearchConfig, encoders: QueryEncoders | None = None):
    """The searcher ``plan`` describes (planned here from a bare config), and its teacher's :class:`TeacherInfo`
    (None without a teacher)."""
    opened = open_search(plan, encoders)
    return opened.searcher, opened.info


def open_search(plan: SearchPlan | SearchConfig, encoders: QueryEncoders | None = None) -> OpenSearch:
    """The searcher and the teacher ``plan`` describes (planned here from a bare config). Each model loads once:
    the query encoder and the index are the searcher's and every teacher's that reads them; ``encoders``: query
    encoders already loaded (a server's), shared with this plan's."""
    plan = plan_search(plan) if isinstance(plan, SearchConfig) else plan
    config = plan.config
    threads = config.threads or 1
    if plan.kind == "bm25":
        from tour_pyserini.search.bm25 import Bm25Searcher

        return OpenSearch(Bm25Searcher.from_index(config.index, k1=config.bm25_k1, b=config.bm25_b, threads=threads))
    if config.threads:  # the encoder and a cross-encoder teacher share torch's process-wide thread pool
        import torch

        torch.set_num_threads(config.threads)
    from tour_pyserini.search.searcher import TourSearcher

    encoders = QueryEncoders() if encoders is None else encoders
    teacher = None
    if plan.teacher:  # first: a teacher's own input is refused before the query encoder loads
        teacher = open_teacher(plan.teacher, config, encoders, plan.opened)
    rewriter = build_rewriter(plan, teacher)
    if plan.encoder is None:
        encoder = QueryEncoder.from_encoded(config.encoded_queries)
    else:  # the one a teacher built already, where it reads the same encoder
        encoder = encoders.get(plan.encoder, config.device, plan.encoder_precision, plan.encoder_runtime)
    searcher = TourSearcher.from_open_index(plan.index, encoder, rewriter=rewriter, threads=threads)
    if teacher is not None and teacher.oracle:
        log.warning(
            "ORACLE teacher — what it ranks or judges reads the relevance judgements (an upper bound, not a system)"
        )
    return OpenSearch(searcher, teacher)


def build_rewriter(plan: SearchPlan, teacher) -> Rewriter | None:
    """The plan's rewriter from its checked config, with the teacher, score store and state it uses."""
    if plan.rewriter is None:
        return None
    if not plan.rewriter.needs_teacher:
        if plan.start is not None:  # ttt-embed searches with the state read in planning
            return plan.rewriter(config=plan.rewriter_config, shift=plan.start)
        return plan.rewriter(config=plan.rewriter_config)
    extra: dict[str, Any] = {}
    if plan.config.score_store:
        extra["store"] = open_score_store(plan.config.score_store, teacher)
    if plan.start is not None:
        extra["start"] = plan.start
    return plan.rewriter(teacher, config=plan.rewriter_config, **extra)


def open_teacher(
    spec: TeacherSpec, config: SearchConfig, encoders: QueryEncoders | None = None, opened: OpenIndexes | None = None
) -> Teacher:
    """The teacher ``spec`` (planned: :func:`plan_teachers`) over ``config``'s index, with the teacher flags of
    ``config`` it reads; ``encoders`` and ``opened``: what the search has loaded, for the teacher to share."""
    from tour_pyserini.teachers import TeacherContext, get_teacher

    context = TeacherContext(
        index_dir=config.index,
        max_length=config.teacher_max_length,
        device=config.device,
        precision=config.teacher_precision,
        options=options_for(str(spec), config.teacher_options),
        encoders=encoders or QueryEncoders(),
        indexes=opened or OpenIndexes(),
    )
    return get_teacher(spec, context)


def open_score_store(path: str, teacher, room=None):
    """``teacher``'s store at ``path``; ``room``: what may be written (:class:`~tour_pyserini.teachers.ScoreStore`)."""
    from tour_pyserini.teachers import ScoreStore

    if teacher is None or not teacher.pairwise:
        raise UserError(STORE_NEEDS_PAIRWISE)
    return ScoreStore(path, teacher.fingerprint, room)


__all__ = [
    "OpenSearch",
    "SearchConfig",
    "SearchPlan",
    "TeacherInfo",
    "open_search",
    "open_searcher",
    "open_teacher",
    "plan_search",
    "plan_teachers",
]
