"""Building an index of either kind: staging, timing, peak memory, metadata, reuse."""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tour_pyserini.encoders import same_encoder, setting_differences
from tour_pyserini.errors import UserError
from tour_pyserini.files.digest import file_sha256
from tour_pyserini.files.staging import check_place, output_lock, staged_directory
from tour_pyserini.index.corpus import corpus_file
from tour_pyserini.index.faiss_index import FaissIndexSpec
from tour_pyserini.index.layout import IndexMeta, unreadable_reason


def corpus_identity(corpus: Path) -> dict:
    """What an index records of its corpus file: absolute path, size, modification time and SHA-256."""
    stat = corpus.stat()
    return {
        "path": str(corpus.resolve()),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "sha256": file_sha256(corpus),
    }


def _part(shard: dict | None) -> str:
    if shard is None:
        return "the whole collection"
    merged = FaissIndexSpec(**shard["faiss_index"]).describe()
    return f"shard {shard['id']} of {shard['of']} (batch size {shard.get('batch_size')}, to merge as {merged})"


def _weights(identity: dict) -> str:
    sha = identity.get("weights_sha256")
    return f"{identity['name']} (weights {sha[:12] if sha else 'unhashed'})"


@dataclass(frozen=True)
class IndexRequest:
    """What the index command asks for, checked against what an existing index records before it is reused."""

    kind: str  # "dense" or "bm25"
    collection: str | None = None  # None when the vectors come from another index
    encoder: dict | None = None  # encoder_identity(), dense only
    faiss_index: FaissIndexSpec | None = None  # dense only
    from_index: str | None = None
    prebuilt: bool = True  # whether prebuilt vectors may stand in for encoding
    shard: dict | None = None  # Shard.to_json() of a shard of the collection; None: the whole of it

    def __post_init__(self) -> None:
        if self.collection is None and self.from_index is None:
            raise ValueError("an index request names its collection or the index its vectors come from")

    def differences(self, meta: IndexMeta) -> list[str]:
        """``"WHAT RECORDED, asked ASKED"`` for each thing the existing index was built with otherwise."""
        if meta.kind != self.kind:
            return [f"kind {meta.kind}, asked {self.kind}"]
        found: list[str] = []
        recorded = meta.extra.get("shard")
        if recorded != self.shard:  # a shard is never reused as the whole index, nor as another shard
            found.append(f"{_part(recorded)}, asked {_part(self.shard)}")
        if self.collection is not None:
            found += self._corpus_differences(meta, self.collection)
        elif self.from_index is not None:
            source = meta.extra.get("from_index")
            if source is None or Path(source).resolve() != Path(self.from_index).resolve():
                found.append(f"vectors from {source or meta.collection}, asked {self.from_index}")
        if self.encoder is not None and meta.encoder is not None:
            if not same_encoder(
                {
                    **self.encoder,
                    "name": meta.encoder["name"],  # the settings alike: the weights
                    "weights_sha256": meta.encoder.get("weights_sha256"),
                },
                self.encoder,
            ):
                found.append(f"encoder {_weights(meta.encoder)}, asked {_weights(self.encoder)}")
            found += setting_differences(meta.encoder, self.encoder)
        if self.faiss_index is not None:
            asked = self.faiss_index.to_json()
            if meta.dimension:  # defaults resolved as a build resolves them for this index's documents
                asked = self.faiss_index.resolved(meta.num_docs, meta.dimension).to_json()
            recorded = meta.faiss_index
            if recorded.get("type") != asked["type"]:
                found.append(f"--faiss-index {recorded.get('type')}, asked {asked['type']}")
            else:
                found += [
                    f"{key} {recorded.get(key)}, asked {value}"
                    for key, value in asked.items()
                    if value is not None and recorded.get(key) != value
                ]
        if not self.prebuilt and meta.extra.get("prebuilt"):
            found.append(f"vectors of prebuilt/{meta.extra['prebuilt']}, asked encoding (--no-prebuilt)")
        return found

    def _corpus_differences(self, meta: IndexMeta, collection: str) -> list[str]:
        corpus = corpus_file(collection)
        recorded = meta.corpus
        if recorded is None:  # indexes built before corpora were recorded: the collection as it was named
            same = Path(meta.collection).resolve() == Path(collection).resolve()
            return [] if same else [f"collection {meta.collection}, asked {collection}"]
        same_path = recorded["path"] == str(corpus.resolve())
        stat = corpus.stat()
        if same_path and (stat.st_size, stat.st_mtime_ns) == (recorded["size"], recorded["mtime_ns"]):
            return []  # untouched since: not read again
        now = file_sha256(corpus)
        if now == recorded["sha256"]:  # the same documents (a moved checkout, a copy): the same index
            return []
        if not same_path:
            return [f"collection {recorded['path']}, asked {corpus.resolve()}"]
        return [f"{corpus} as it was (SHA-256 {recorded['sha256'][:12]}), asked it as it is now ({now[:12]})"]


def check_count(corpus: Path, *, indexer: str, indexed: int, expected: int) -> None:
    """Fail when an index does not hold every document it was given (the indexer's log says why)."""
    if indexed != expected:
        raise UserError(
            f"{corpus}: {indexer} indexed {indexed} of {expected} documents; no index was written "
            "(see the indexer's messages above)"
        )


def build_index(
    output: str | Path, write: Callable[[Path], IndexMeta], overwrite: bool = False, request: IndexRequest | None = None
) -> IndexMeta:
    """Run ``write(tmp_dir)`` and move the finished index to ``output``.

    An existing index at ``output`` is reused unless ``overwrite``, and only if it records what ``request``
    asks for; a failed build leaves nothing behind, and an overwritten index stays whole until its
    replacement is. The output is locked while it is checked and built: a second writer is refused. Build
    time and the peak resident memory (this process's, or its indexer's, whichever is larger) are recorded in
    the metadata.
    """
    output = Path(output)
    check_place(output)
    with output_lock(output):  # a second index command on this output is refused while this one runs
        if output.exists() and not overwrite:
            return _reused(output, request)
        start = time.perf_counter()
        with staged_directory(output, "the index") as tmp:
            meta = write(tmp)
            meta.build_seconds = round(time.perf_counter() - start, 2)
            meta.peak_rss_mb = round(
                max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
                / 1024,
                1,
            )
            meta.write(tmp)
    return meta


def _reused(output: Path, request: IndexRequest | None) -> IndexMeta:
    """The metadata of the index at ``output``, if it records what ``request`` asks for; else one line."""
    meta = IndexMeta.read(output)
    if meta is None:
        raise UserError(f"{output} exists but was not built by tour_pyserini; pass --overwrite")
    if meta.kind == "bm25" and (reason := unreadable_reason(output)):
        raise UserError(f"{output} was {reason}; pass --overwrite to rebuild it")
    if request is not None and (differences := request.differences(meta)):
        raise UserError(f"{output} was built with {'; '.join(differences)}; pass --overwrite to rebuild it")
    return meta
