"""From a :class:`~tour_pyserini.pipeline.spec.SearchSpec` to a checked :class:`Plan`: everything about a search
that can be refused is refused here, before any model, the JVM or Ray starts, and resolved into what building
consumes (nothing is read, resolved or checked again).

A plan is made in two parts: the index's (the index opened, memory-mapped, with its metadata; the query encoder's
spec, runtime and precision), which a server makes once per index, and the rewriter's (its typed config, the
teacher, the TTT-Embed state), which a server makes for each request: :meth:`Plan.with_rewriter`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tour_pyserini.devices import check_device
from tour_pyserini.encoders import EncoderSettings, EncoderSpec, encoder_identity
from tour_pyserini.encoders.exported import EXPORTABLE, check_exportable
from tour_pyserini.encoders.query import check_encoded_queries, resolve_query_precision
from tour_pyserini.errors import UserError
from tour_pyserini.index.faiss_index import OpenIndex, set_search_params
from tour_pyserini.index.layout import IndexKind, check_readable, index_kind
from tour_pyserini.index.query_side import index_query_encoder
from tour_pyserini.pipeline.resources import Resources
from tour_pyserini.pipeline.spec import SearchSpec
from tour_pyserini.rewriters import Rewriter, check_rewriter
from tour_pyserini.rewriters.base import check_candidates
from tour_pyserini.rewriters.ttt_embed import StateShift
from tour_pyserini.runtime import AUTO, resolve_runtime
from tour_pyserini.teachers import TeacherSpec, check_teacher_settings

STORE_NEEDS_PAIRWISE = (
    "--score-store keeps the scores of a --teacher whose pair scores stand alone "
    "(cross-encoder, llm, monot5, openai, bm25, dense, ensemble, oracle)"
)


@dataclass(frozen=True)
class Plan:
    """A search checked and resolved: what :func:`~tour_pyserini.pipeline.build` assembles. ``resources``: what the
    plan's index, encoder, teacher and store are shared through."""

    spec: SearchSpec
    kind: IndexKind
    resources: Resources = field(compare=False)
    num_docs: int = 0
    rewriter: type[Rewriter] | None = None  # None: a BM25 index
    rewriter_config: Any = None  # the rewriter's Config, checked
    encoder: EncoderSpec | None = None  # None: pre-encoded queries, or a BM25 index
    encoder_precision: str = "fp32"
    encoder_runtime: str = "torch"  # auto resolved
    start: StateShift | None = field(default=None, compare=False)  # the TTT-Embed state the rewriter uses, read
    teacher: TeacherSpec | None = None  # the spec's teacher, its kind known

    @property
    def index(self) -> OpenIndex:
        return self.resources.indexes.get(self.spec.index)

    @property
    def asked_teacher(self) -> TeacherSpec:
        """The teacher of a plan whose rewriter asks one (or whose caller asks it itself)."""
        if self.teacher is None:
            raise ValueError(f"the search of {self.spec.index} was planned with no teacher")
        return self.teacher

    @property
    def dense_rewriter(self) -> type[Rewriter]:
        """The rewriter of a dense index's plan, which every such plan has (a BM25 index's has none)."""
        if self.rewriter is None:
            raise ValueError(f"the plan of BM25 index {self.spec.index} has no rewriter")
        return self.rewriter

    def with_rewriter(
        self,
        rewriter: str,
        options: Mapping[str, Any],
        teacher: str | TeacherSpec | None = None,
        *,
        score_store: str | None = None,
        asks_teacher: bool = False,
    ) -> Plan:
        """This plan's index and encoder with another rewriter (``options`` by its parameters' names), teacher (one
        of the teachers planned: :func:`plan_teachers`) and score store, checked: a teacher exactly when the
        rewriter asks one (or ``asks_teacher``: the caller asks it itself), every option the rewriter's own and in
        range, no option counting more candidates than the index holds, the state's encoder this plan's. What a
        server checks of each request."""
        spec = replace(self.spec, rewriter=rewriter, rewriter_options=options, teacher=teacher, score_store=score_store)
        parsed = spec.teacher_spec
        if self.kind == IndexKind.BM25:
            if rewriter != "none" or spec.teacher:
                raise UserError("--rewriter and --teacher need a dense index; this one is BM25")
            return replace(self, spec=spec)
        cls, config = check_rewriter(rewriter, dict(options), teacher=bool(spec.teacher) and not asks_teacher)
        check_candidates(cls, config, self.num_docs)
        start = None
        if state := getattr(config, "state", None):
            start = self.resources.state(state, config.task)
            if self.encoder is not None:
                start.state.check_encoder(encoder_identity(self.encoder), f"--state {state}")
            else:
                raise UserError(
                    "--state: a TTT-Embed state needs the encoder its queries were encoded with, and "
                    "--encoded-queries names none"
                )
        return replace(self, spec=spec, rewriter=cls, rewriter_config=config, start=start, teacher=parsed)


def plan_teachers(specs: Sequence[str | TeacherSpec], spec: SearchSpec) -> tuple[TeacherSpec, ...]:
    """``specs`` parsed (an unknown kind refused), and ``spec``'s teacher flags and precision checked against them:
    the teachers of one search, or of a server that shares one set of teacher flags among them."""
    parsed = tuple(TeacherSpec.parse(s) for s in specs)
    for teacher in parsed:
        teacher.teacher_class()
    check_teacher_settings([str(t) for t in parsed], spec.teacher_options, spec.teacher_precision, spec.device)
    return parsed


def plan(spec: SearchSpec, resources: Resources | None = None, *, asks_teacher: bool = False) -> Plan:
    """Everything about ``spec`` that can be checked before a model or the JVM loads, resolved into the plan that
    building consumes; ``resources``: what other plans of this process have opened (a server's), shared with this
    one; ``asks_teacher``: the caller asks the teacher itself (rewards, training), with any rewriter."""
    resources = Resources() if resources is None else resources
    plan_teachers([spec.teacher] if spec.teacher else [], spec)
    if spec.score_store:
        from tour_pyserini.teachers.store import check_store_path

        if not spec.teacher:
            raise UserError(STORE_NEEDS_PAIRWISE)
        check_store_path(spec.score_store)
    return index_part(spec, resources).with_rewriter(
        spec.rewriter, spec.rewriter_options, spec.teacher, score_store=spec.score_store, asks_teacher=asks_teacher
    )


def plan_index(spec: SearchSpec, resources: Resources) -> Plan:
    """The index's part of the plan, searching with no rewriter (a server's, once per index); :meth:`Plan.with_rewriter`
    adds one."""
    return index_part(spec, resources).with_rewriter("none", {})


def index_part(spec: SearchSpec, resources: Resources) -> Plan:
    """The index opened and its knobs set, the query encoder resolved: a plan without its rewriter yet."""
    base = replace(spec, rewriter="none", rewriter_options={}, teacher=None, score_store=None)
    if index_kind(spec.index) == IndexKind.BM25:
        check_readable(spec.index)
        if spec.ef_search is not None or spec.nprobe is not None:
            raise UserError("--ef-search and --nprobe apply to dense indexes; this one is BM25")
        return Plan(base, IndexKind.BM25, resources)
    index = resources.indexes.get(spec.index)
    set_search_params(index.index, ef_search=spec.ef_search, nprobe=spec.nprobe, where=spec.index)
    encoder, runtime = None, "torch"
    if spec.encoded_queries:
        if (
            spec.encoder
            or spec.encoder_settings != EncoderSettings()
            or spec.encoder_precision
            or spec.encoder_runtime != AUTO
        ):
            raise UserError("--encoded-queries replaces the query encoder: give no --encoder or encoder flags")
        check_encoded_queries(spec.encoded_queries, dimension=index.index.d)
    else:  # the encoder's flags, its class and its pairing with the index: before the encoder loads
        encoder = index_query_encoder(index.directory, index.meta, spec.encoder, spec.encoder_settings)
        runtime = resolve_runtime(
            spec.encoder_runtime,
            spec.device,
            encoder.path,
            "--encoder-runtime",
            f"the query encoder {encoder.name}",
            exportable=encoder.encoder_class in EXPORTABLE,
        )
        check_exportable(encoder, runtime)
    check_device(spec.device)
    precision = resolve_query_precision(spec.encoder_precision, spec.device, runtime)
    num_docs = index.meta.num_docs if index.meta is not None else len(index.docids)
    return Plan(
        base,
        IndexKind.DENSE,
        resources,
        num_docs,
        encoder=encoder,
        encoder_precision=precision,
        encoder_runtime=runtime,
    )
