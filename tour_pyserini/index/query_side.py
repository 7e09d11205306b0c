"""Which encoder a search of a dense index encodes its queries with, as the index records it.

An index records its encoder's class, pooling, normalisation, prefixes and weights. A search that names no
encoder gets the index's own, run as recorded; one that names the index's encoder gets the recorded
settings too. A class whose queries have a model of their own (DPR's question encoder beside its context
encoder) cannot be inferred: the user names the question encoder, and its class comes from the index.
"""

from __future__ import annotations

from pathlib import Path

from tour_pyserini.encoders import DEFAULT_ENCODER, EncoderSettings, EncoderSpec
from tour_pyserini.encoders.classes import CLASSES, family, infer_class
from tour_pyserini.encoders.pairing import check_pair
from tour_pyserini.encoders.spec import NO_SETTINGS
from tour_pyserini.errors import UserError, warn_once
from tour_pyserini.index.layout import IndexMeta, MissingIndexError, check_faiss_file, index_kind

# classes whose query and document vectors may meet: the same arithmetic, or DPR's question-side variants
_COMPATIBLE = ({"auto", "st-pipeline"}, {"dpr", "bpr", "dkrr"})


def _compatible(query_class: str, document_class: str) -> bool:
    q, d = family(query_class), family(document_class)
    return q == d or any(q in group and d in group for group in _COMPATIBLE)


def query_encoder_spec(
    index_dir: str | Path, encoder: str | EncoderSpec | None = None, settings: EncoderSettings = NO_SETTINGS
) -> EncoderSpec:
    """``encoder`` with ``settings`` (the index's recorded settings fill those not given when it names the
    index's own encoder), else the encoder the index was built with, else the bundled MiniLM; refused in
    one line when the index is not a dense one, when the query class cannot search the index's vectors, or
    when a trained query encoder is paired with another document encoder than the index's."""
    index_dir = Path(index_dir)
    if index_kind(index_dir) != "dense":
        raise MissingIndexError(f"{index_dir} is a BM25 index, not a dense one")
    check_faiss_file(index_dir / "index")
    return index_query_encoder(index_dir, IndexMeta.read(index_dir), encoder, settings)


def index_query_encoder(
    index_dir: Path,
    meta: IndexMeta | None,
    encoder: str | EncoderSpec | None = None,
    settings: EncoderSettings = NO_SETTINGS,
) -> EncoderSpec:
    """:func:`query_encoder_spec` of an index already opened and checked, from its metadata ``meta``."""
    if not isinstance(encoder, EncoderSpec):
        encoder = _resolve(index_dir, (meta.encoder or {}) if meta else {}, encoder, settings)
    check_pair(encoder, meta.encoder if meta else None, index_dir)
    return encoder


def _resolve(index_dir: Path, built: dict, encoder: str | None, settings: EncoderSettings) -> EncoderSpec:
    recorded = built.get("encoder_class")
    paired = recorded is not None and CLASSES[recorded].paired_models
    if encoder is None and paired:
        raise UserError(
            f"index {index_dir} was built by {built['name']}, a {recorded} context encoder; its queries "
            f"need the question encoder that goes with it: name it with --encoder"
        )
    same = encoder is None or encoder == built.get("name")
    inherit = same or paired  # the class (and prefixes) come from the index
    if settings.query_prefix is not None and built and settings.query_prefix != built.get("query_prefix"):
        was = repr(built["query_prefix"]) if built.get("query_prefix") is not None else "no query prefix"
        warn_once(
            __name__,
            f"index {index_dir} was built for queries with {was}; searching with --query-prefix "
            f"{settings.query_prefix!r}",
        )
    name = encoder or built.get("name", DEFAULT_ENCODER)
    klass = settings.encoder_class or (recorded if inherit and recorded else infer_class(name))
    flags = settings.pooling is not None or settings.l2_norm is not None
    if flags and not settings.encoder_class and family(klass) == "auto":  # as a sentence or contriever name does
        klass = "auto"
    inherit_pooling = same and klass == "auto"  # the classes that take --pooling / --l2-norm from flags
    inherit_norm = same and klass in ("auto", "qwen3")
    resolved = EncoderSettings(
        encoder_class=klass,
        pooling=settings.pooling or (built.get("pooling") if inherit_pooling else None),
        l2_norm=built.get("l2_norm") if settings.l2_norm is None and inherit_norm else settings.l2_norm,
        max_length=settings.max_length,
        query_prefix=settings.query_prefix
        if settings.query_prefix is not None
        else (built.get("query_prefix") if inherit else None),
        doc_prefix=built.get("doc_prefix") if same else None,
        tokenizer=settings.tokenizer,
    )
    spec = EncoderSpec.resolve(name, settings=resolved)
    if recorded is not None and not _compatible(spec.encoder_class, recorded):
        raise UserError(
            f"a {spec.encoder_class} query encoder cannot search index {index_dir}: its vectors come "
            f"from Pyserini's {recorded} document encoder (give --encoder-class {recorded}, or "
            "rebuild the index)"
        )
    if same and (
        differ := [
            f"{key} {built[key]}, asked {getattr(spec, key)}"
            for key in ("pooling", "l2_norm")
            if key in built and built[key] != getattr(spec, key)
        ]
    ):
        warn_once(
            __name__,
            f"index {index_dir} was built by {name} with other settings than its queries "
            f"get ({'; '.join(differ)}): query vectors unlike its documents' rank worse",
        )
    return spec
