"""From a search's typed configuration to a ready searcher: the rewriter, its teacher, the index's knobs.

Shared by the search command and by each distributed worker, which opens its own searcher from the same
:class:`SearchConfig`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tour_pyserini.devices import check_device, resolve_precision
from tour_pyserini.encoders import EncoderSettings, encoder_identity
from tour_pyserini.encoders.query import QueryEncoder, check_encoded_queries, resolve_query_precision
from tour_pyserini.errors import UserError
from tour_pyserini.index.faiss_index import set_search_params
from tour_pyserini.index.layout import IndexMeta, check_faiss_file, check_readable, index_kind
from tour_pyserini.index.query_side import query_encoder_spec
from tour_pyserini.rewriters import check_rewriter, get_rewriter

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
    parameters, and the teacher (a spec such as ``bm25`` or ``cross-encoder:PATH``) it asks."""

    index: str
    encoder: str | None = None  # default: the one the index was built with
    encoder_settings: EncoderSettings = EncoderSettings()  # class, pooling, prefix, ... as the flags give them
    encoded_queries: str | None = None  # Pyserini's pre-encoded queries instead of an encoder
    encoder_precision: str | None = None  # the query encoder's arithmetic: auto (None), fp32 or bf16
    rewriter: str = "none"
    rewriter_options: Mapping[str, object] = field(default_factory=dict)  # parameters the rewriter declares
    teacher: str | None = None
    teacher_max_length: int | None = None
    teacher_precision: str | None = None
    teacher_options: Mapping[str, object] = field(default_factory=dict)  # values of the flags teachers declare
    score_store: str | None = None
    threads: int | None = None  # torch's own for models, 1 for Faiss when None
    device: str = "cpu"
    ef_search: int | None = None
    nprobe: int | None = None
    bm25_k1: float = 0.9
    bm25_b: float = 0.4


def check_config(config: SearchConfig) -> dict:
    """Everything about ``config`` that can be checked before a model or the JVM loads; returns the
    rewriter's options, checked."""
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
        return {}
    options = dict(config.rewriter_options)
    check_rewriter(config.rewriter, options, teacher=bool(config.teacher))
    index = check_faiss_file(Path(config.index) / "index")
    set_search_params(index, ef_search=config.ef_search, nprobe=config.nprobe, where=config.index)
    meta = IndexMeta.read(config.index)
    for param, flag in (("depth", "--k"), ("prf_depth", "--prf-depth")):
        if meta is not None and options.get(param, 0) > meta.num_docs:
            raise UserError(f"{flag} {options[param]} is larger than the index ({meta.num_docs} documents)")
    if config.encoded_queries:
        if config.encoder or config.encoder_settings != EncoderSettings() or config.encoder_precision:
            raise UserError("--encoded-queries replaces the query encoder: give no --encoder or encoder flags")
        check_encoded_queries(config.encoded_queries, dimension=index.d)
        if options.get("state"):
            raise UserError("--state: a TTT-Embed state needs the encoder its queries were encoded with, and "
                            "--encoded-queries names none")  # fmt: skip
    else:  # the encoder's flags, its class and its pairing with the index: before the encoder loads
        spec = query_encoder_spec(config.index, config.encoder, config.encoder_settings)
        if options.get("state"):  # a TTT-Embed state of another encoder
            from tour_pyserini.ttt.state import State

            State.load(options["state"]).check_encoder(encoder_identity(spec), f"--state {options['state']}")
    check_device(config.device)
    resolve_query_precision(config.encoder_precision, config.device)
    if config.teacher_precision:
        resolve_precision(config.teacher_precision, config.device, "--teacher-precision")
    return options


def open_searcher(config: SearchConfig, options: dict | None = None):
    """The searcher ``config`` describes, and its teacher's :class:`TeacherInfo` (None without a teacher).
    ``options`` are the rewriter's as :func:`check_config` returned them (checked here when not given)."""
    options = dict(check_config(config) if options is None else options)
    threads = config.threads or 1
    if index_kind(config.index) == "bm25":
        from tour_pyserini.search.bm25 import Bm25Searcher

        return Bm25Searcher.from_index(config.index, k1=config.bm25_k1, b=config.bm25_b, threads=threads), None
    if config.threads:  # the encoder and a cross-encoder teacher share torch's process-wide thread pool
        import torch

        torch.set_num_threads(config.threads)
    from tour_pyserini.search.searcher import TourSearcher
    from tour_pyserini.teachers import get_teacher

    teacher = get_teacher(config.teacher, teacher_context(config)) if config.teacher else None
    if config.score_store:
        options["store"] = open_score_store(config.score_store, teacher)
    rewriter = get_rewriter(config.rewriter, teacher=teacher, **options)
    if config.encoded_queries:
        encoder = QueryEncoder.from_encoded(config.encoded_queries)
    else:
        encoder = QueryEncoder.build(
            query_encoder_spec(config.index, config.encoder, config.encoder_settings),
            config.device,
            resolve_query_precision(config.encoder_precision, config.device),
        )
    searcher = TourSearcher.from_index(config.index, encoder=encoder, rewriter=rewriter, threads=threads,
                                       ef_search=config.ef_search, nprobe=config.nprobe,
                                       device=config.device)  # fmt: skip
    if teacher is not None and teacher.oracle:
        print("warning: ORACLE teacher — these results read the relevance judgements (an upper bound, "
              "not a system); the run tag is marked 'oracle'", file=sys.stderr)  # fmt: skip
    return searcher, TeacherInfo(teacher.label, teacher.oracle) if teacher else None


def teacher_context(config: SearchConfig):
    """What the teacher spec may refer to, from the search's configuration."""
    from tour_pyserini.teachers import TeacherContext

    return TeacherContext(index_dir=config.index, max_length=config.teacher_max_length, device=config.device,
                          precision=config.teacher_precision, options=config.teacher_options)  # fmt: skip


def open_score_store(path: str, teacher):
    from tour_pyserini.teachers import ScoreStore

    if teacher is None or not teacher.pairwise:
        raise UserError(STORE_NEEDS_PAIRWISE)
    return ScoreStore(path, teacher.fingerprint)
