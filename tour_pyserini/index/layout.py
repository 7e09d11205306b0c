"""What an index directory holds, how to tell its kind, and the errors for one that is missing."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tour_pyserini.errors import UserError

META_FILE = "tour_pyserini.json"
DOCSTORE_FILE = "docstore.sqlite"


class MissingIndexError(FileNotFoundError):
    """An index directory is missing or is not an index this project can search."""


@dataclass
class IndexMeta:
    """Written by ``python -m tour_pyserini.index`` next to the index files."""

    kind: str  # "dense" or "bm25"
    collection: str
    num_docs: int
    corpus: dict | None = None  # corpus_identity() of the corpus file: absolute path, size, mtime, SHA-256
    encoder: dict | None = None  # EncoderSpec.to_json() + weights_sha256 for dense indexes
    dimension: int | None = None
    faiss_index: dict = field(default_factory=lambda: {"type": "flat"})  # FaissIndexSpec.to_json(), dense only
    build_seconds: float = 0.0
    peak_rss_mb: float = 0.0
    extra: dict = field(default_factory=dict)

    def write(self, index_dir: Path) -> None:
        (index_dir / META_FILE).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def read(cls, index_dir: Path) -> IndexMeta | None:
        path = Path(index_dir) / META_FILE
        return cls(**json.loads(path.read_text())) if path.exists() else None


def check_faiss_file(path: Path):
    """The index in a Faiss file, opened memory-mapped (milliseconds whatever its size), so that one that cannot
    be read (truncated, corrupt) is the user's error, named before any model loads."""
    import faiss

    try:
        return faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC)
    except RuntimeError as e:
        reason = str(e).strip().splitlines()[-1].split("Error: ")[-1]
        raise UserError(f"{path} cannot be read as a Faiss index ({reason})") from None


def index_kind(index_dir: str | Path) -> str:
    """``"dense"`` for a FaissSearcher directory (``index`` + ``docid``), ``"bm25"`` for a Lucene index."""
    index_dir = Path(index_dir)
    if not index_dir.is_dir():
        raise MissingIndexError(f"index directory {str(index_dir)!r} does not exist")
    if (index_dir / "index").is_file() and (index_dir / "docid").is_file():
        return "dense"
    if any(index_dir.glob("segments_*")):
        return "bm25"
    raise MissingIndexError(
        f"{str(index_dir)!r} is neither a Faiss index (files 'index' and 'docid') nor a Lucene index "
        "(segments_*); build one with `python -m tour_pyserini.index`"
    )


def index_fingerprint(index_dir: str | Path) -> str:
    """An index's identity by content (16 hex digits), for what is computed from it: the names and sizes of
    its Lucene segment files or of its Faiss index and docids, with the corpus SHA-256 and the encoder its
    metadata records. Not its path: a moved index keeps it; a rebuilt one of another corpus does not."""
    index_dir = Path(index_dir)
    files = sorted(p for p in index_dir.iterdir() if p.is_file() and (p.name.startswith(("_", "segments_"))
                                                                       or p.name in ("index", "docid")))  # fmt: skip
    meta = IndexMeta.read(index_dir)
    encoder = {k: v for k, v in (meta.encoder or {}).items() if k != "name"} if meta else None
    identity = {"files": [[p.name, p.stat().st_size] for p in files],
                "corpus": (meta.corpus or {}).get("sha256") if meta else None, "encoder": encoder}  # fmt: skip
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
