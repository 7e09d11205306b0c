"""Which encoder a search of a dense index encodes its queries with, as the index records it."""

from __future__ import annotations

from pathlib import Path

from tour_pyserini.encoders import DEFAULT_ENCODER, EncoderSpec
from tour_pyserini.encoders.pairing import check_pair
from tour_pyserini.index.layout import IndexMeta, MissingIndexError, check_faiss_file, index_kind


def query_encoder_spec(index_dir: str | Path, encoder: str | EncoderSpec | None = None) -> EncoderSpec:
    """``encoder`` (a name is pooled as the index records when it names the index's own encoder), else the
    encoder the index was built with, else the bundled MiniLM; refused in one line when the index is not a
    dense one, or when a trained query encoder is paired with another document encoder than the index's."""
    index_dir = Path(index_dir)
    if index_kind(index_dir) != "dense":
        raise MissingIndexError(f"{index_dir} is a BM25 index, not a dense one")
    check_faiss_file(index_dir / "index")
    meta = IndexMeta.read(index_dir)
    if not isinstance(encoder, EncoderSpec):
        built_with = (meta.encoder or {}) if meta else {}
        same = encoder is None or encoder == built_with.get("name")
        encoder = EncoderSpec.resolve(
            encoder or built_with.get("name", DEFAULT_ENCODER),
            pooling=built_with.get("pooling") if same else None,
            l2_norm=built_with.get("l2_norm") if same else None,
        )
    check_pair(encoder, meta.encoder if meta else None, index_dir)
    return encoder
