"""What an index directory holds, how to tell its kind, and the errors for one that is missing."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path

from tour_pyserini._java import lucene_major, pyserini_version
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
    lucene_major: int | None = None  # the Lucene that built it (bm25 only): 9 under Pyserini 1.6.0, 10 under 2.x
    build_seconds: float = 0.0
    peak_rss_mb: float = 0.0
    extra: dict = field(default_factory=dict)

    def write(self, index_dir: Path) -> None:
        (index_dir / META_FILE).write_text(json.dumps(asdict(self), indent=2) + "\n")

    def _missing(self, what: str) -> UserError:
        return UserError(
            f"the {self.kind} index of {self.collection} records no {what}: not a dense index built by "
            "python -m tour_pyserini.index"
        )

    @property
    def dense_encoder(self) -> dict:
        """The encoder that built a dense index, which every dense build records."""
        if self.encoder is None:
            raise self._missing("encoder")
        return self.encoder

    @property
    def dense_dimension(self) -> int:
        """The dimension of a dense index's vectors, which every dense build records."""
        if self.dimension is None:
            raise self._missing("vector dimension")
        return self.dimension

    @property
    def corpus_record(self) -> dict:
        """``corpus_identity()`` of the corpus a build read, which every build from a corpus file records."""
        if self.corpus is None:
            raise self._missing("corpus")
        return self.corpus

    @classmethod
    def read(cls, index_dir: str | Path) -> IndexMeta | None:
        """The metadata of ``index_dir`` (None if it has none); a file that is not what we write is one line."""
        path = Path(index_dir) / META_FILE
        if not path.exists():
            return None
        try:
            return cls(**json.loads(path.read_bytes()))
        except (ValueError, TypeError) as e:  # not JSON (or not UTF-8), not an object, or other fields
            reason = str(e).splitlines()[0][:120]
            raise UserError(
                f"{path} is damaged, not the metadata tour_pyserini writes ({reason}); rebuild the "
                f"index (index --output {index_dir} --overwrite)"
            ) from None


def recorded_encoder(index_dir: Path) -> dict:
    """The encoder that built the dense index ``index_dir``, as its metadata records it."""
    meta = IndexMeta.read(index_dir)
    if meta is None or not meta.encoder:
        raise UserError(f"{index_dir} was not built by python -m tour_pyserini.index (no encoder recorded)")
    return meta.encoder


def check_faiss_file(path: Path, docid_count: int | None = None):
    """The index in a Faiss file, opened memory-mapped (milliseconds whatever its size), so that one that cannot
    be read (truncated, corrupt), or whose ``docid`` file beside it lists another number of documents
    (``docid_count`` when the caller has read them; else counted here), is the user's error, named before any
    model loads."""
    import faiss

    try:
        index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC)
    except RuntimeError as e:
        reason = str(e).strip().splitlines()[-1].split("Error: ")[-1]
        raise UserError(f"{path} cannot be read as a Faiss index ({reason})") from None
    docids = Path(path).with_name("docid")
    if docid_count is None and docids.is_file():
        docid_count = count_lines(docids)
    if docid_count is not None and docid_count != index.ntotal:  # Pyserini asserts they agree
        raise UserError(
            f"{docids} lists {docid_count} docids for the {index.ntotal} vectors of {path}: the index "
            "is damaged or its files are mixed up; rebuild it (index --overwrite)"
        )
    return index


def count_lines(path: Path) -> int:
    """Lines of a file as Python's ``readlines`` counts them (a last line without a newline counts)."""
    count, last = 0, b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            count, last = count + chunk.count(b"\n"), chunk[-1:]
    return count + (last != b"\n")


class IndexKind(StrEnum):
    """What an index directory holds: a Faiss index of vectors, or a Lucene index of terms."""

    DENSE = "dense"
    BM25 = "bm25"


def index_kind(index_dir: str | Path) -> IndexKind:
    """``DENSE`` for a FaissSearcher directory (``index`` + ``docid``), ``BM25`` for a Lucene index."""
    index_dir = Path(index_dir)
    if not index_dir.is_dir():
        raise MissingIndexError(f"index directory {str(index_dir)!r} does not exist")
    if (index_dir / "index").is_file() and (index_dir / "docid").is_file():
        return IndexKind.DENSE
    if any(index_dir.glob("segments_*")):
        return IndexKind.BM25
    raise MissingIndexError(
        f"{str(index_dir)!r} is neither a Faiss index (files 'index' and 'docid') nor a Lucene index "
        "(segments_*); build one with `python -m tour_pyserini.index`"
    )


_SEGMENTS_MAGIC = 0x3FD76C17  # Lucene's CodecUtil header


def _vint(data: bytes, at: int) -> tuple[int, int]:
    """Lucene's variable-length int at ``at``: (value, next position)."""
    value = shift = 0
    while True:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7


def lucene_created_major(index_dir: str | Path) -> int | None:
    """The Lucene major version that created a Lucene index, read from its newest ``segments_N`` file without the
    JVM (its header, then the writer's version and ``indexCreatedVersionMajor``); None when it cannot be read."""
    files = sorted(Path(index_dir).glob("segments_*"), key=lambda p: int(p.name.split("_")[1] or "0", 36))
    if not files:
        return None
    data = files[-1].read_bytes()[:256]
    try:
        if int.from_bytes(data[:4], "big") != _SEGMENTS_MAGIC:
            return None
        name_length, at = _vint(data, 4)
        at += name_length + 4 + 16  # codec name, format version, segment id
        at += 1 + data[at]  # the generation suffix
        for _ in range(3):  # the writer's major, minor, bugfix
            _, at = _vint(data, at)
        return _vint(data, at)[0]
    except IndexError:
        return None


def unreadable_reason(index_dir: str | Path) -> str | None:
    """Why the Lucene that the installed Pyserini runs cannot open this Lucene index (None: it can). Lucene reads
    indexes of its own major version and the one before; the version is read from the index's files, else from
    what ``tour_pyserini.json`` records."""
    created = lucene_created_major(index_dir)
    if created is None and (meta := IndexMeta.read(Path(index_dir))) is not None:
        created = meta.lucene_major
    running = lucene_major()
    if created is None or running - 1 <= created <= running:
        return None
    built = "a newer Pyserini" if created > running else "an older Lucene"
    return f"built by Lucene {created} ({built}), which Pyserini {pyserini_version()}'s Lucene {running} cannot read"


def check_readable(index_dir: str | Path) -> None:
    """One line, before the JVM starts, for a Lucene index the installed Pyserini cannot read."""
    if reason := unreadable_reason(index_dir):
        raise UserError(
            f"{index_dir}: {reason}; rebuild it here (tour-pyserini index --bm25 --collection ... "
            f"--output {index_dir} --overwrite) or search it where it was built"
        )


def index_fingerprint(index_dir: str | Path) -> str:
    """An index's identity by content (16 hex digits), for what is computed from it: the names and sizes of
    its Lucene segment files or of its Faiss index and docids, with the corpus SHA-256 and the encoder its
    metadata records. Not its path: a moved index keeps it; a rebuilt one of another corpus does not."""
    index_dir = Path(index_dir)
    files = sorted(
        p
        for p in index_dir.iterdir()
        if p.is_file() and (p.name.startswith(("_", "segments_")) or p.name in ("index", "docid"))
    )
    meta = IndexMeta.read(index_dir)
    encoder = {k: v for k, v in (meta.encoder or {}).items() if k != "name"} if meta else None
    identity = {
        "files": [[p.name, p.stat().st_size] for p in files],
        "corpus": (meta.corpus or {}).get("sha256") if meta else None,
        "encoder": encoder,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
