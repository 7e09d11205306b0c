"""Pyserini's prebuilt indexes by name (``--index wikipedia-dpr-100w.dpr-multi``), through Pyserini's own
catalogue and downloader (cached under ``~/.cache/pyserini``)."""

from __future__ import annotations

from pathlib import Path

from tour_pyserini._java import import_pyserini
from tour_pyserini.errors import UserError


def is_prebuilt_name(name: str) -> bool:
    """Whether ``name`` is in Pyserini's Faiss catalogue (dense indexes; the ones rewriters search). Pyserini 2.x
    fetches its catalogue on the first lookup; offline that is one line."""
    try:
        return name in import_pyserini("pyserini.prebuilt_index_info").FAISS_INDEX_INFO
    except OSError as e:
        raise UserError(
            f"index {name!r}: no such directory, and Pyserini's catalogue of prebuilt indexes could not "
            f"be fetched ({getattr(e, 'reason', e)}); without network, pass an index directory"
        ) from None


def resolve_index(index: str) -> str:
    """A directory as given; a Pyserini prebuilt index name as the directory it is downloaded to."""
    if Path(index).exists() or "/" in index or not is_prebuilt_name(index):
        return index
    try:
        return str(import_pyserini("pyserini.util").download_prebuilt_index(index))
    except (ValueError, OSError) as e:
        raise UserError(
            f"prebuilt index {index!r} could not be downloaded ({e}); without network, copy the "
            "index directory here and pass its path"
        ) from None
