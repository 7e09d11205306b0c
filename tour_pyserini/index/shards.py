"""Sharded dense builds: a shard encodes the documents ``pyserini.encode --shard-id I --shard-num N`` would,
and merging every shard of a build yields the index one process builds from the whole collection.

A shard is a flat FaissSearcher directory (``index`` + ``docid``) whose metadata records which shard it is
and the index type it is to be merged into. Merging checks that the shards are all ``N`` shards of one
corpus, encoded alike (encoder, settings, batch size, fields), appends their vectors and docids in shard
order, writes the document store from the corpus, and builds the recorded index type over the vectors, as
a one-process build does after encoding.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tour_pyserini.encoders import EncoderSpec, describe, encoder_identity, same_encoder
from tour_pyserini.errors import UserError
from tour_pyserini.index import faiss_index
from tour_pyserini.index.build import IndexRequest, check_count, corpus_identity
from tour_pyserini.index.corpus import check_corpus, corpus_file, read_jsonl_corpus
from tour_pyserini.index.dense import FLAT, encode_corpus, rebuild_faiss_index
from tour_pyserini.index.docstore import DocStore
from tour_pyserini.index.faiss_index import FaissIndexSpec
from tour_pyserini.index.layout import DOCSTORE_FILE, IndexMeta, check_faiss_file, index_kind

log = logging.getLogger(__name__)

CHUNK = 100_000  # vectors copied at a time while merging


@dataclass(frozen=True)
class Shard:
    """Shard ``id`` (0-based) of ``of``, as Pyserini's ``JsonlCollectionIterator`` cuts a collection."""

    id: int
    of: int

    def check(self) -> Shard:
        if self.of < 1:
            raise UserError(f"--shards must be positive, got {self.of}")
        if not 0 <= self.id < self.of:
            raise UserError(f"--shard must be in [0, {self.of - 1}] for --shards {self.of}, got {self.id}")
        return self

    def rows(self, num_docs: int) -> tuple[int, int]:
        """The documents ``[start, end)`` of this shard: ``int(n / N)`` each, the rest to the last one."""
        size = int(num_docs / self.of)  # Pyserini's own expression, float division included
        start = self.id * size
        return start, num_docs if self.id == self.of - 1 else min(start + size, num_docs)

    def check_size(self, num_docs: int) -> Shard:
        """A collection of fewer documents than shards would leave shards empty: refused before encoding."""
        if num_docs < self.of:
            raise UserError(f"--shards {self.of} is more than the collection's {num_docs} documents")
        return self

    def record(self, spec: FaissIndexSpec, batch_size: int) -> dict:
        """What a shard's metadata records of it (``extra["shard"]``): which shard, its batch size (the merge
        needs every shard's), and the index type it is to be merged into; a kept shard is reused only if all
        are as asked."""
        return {"id": self.id, "of": self.of, "batch_size": batch_size, "faiss_index": spec.to_json()}


def shard_request(
    collection: str | Path, encoder: EncoderSpec, shard: Shard, spec: FaissIndexSpec, batch_size: int
) -> IndexRequest:
    """What a finished shard must record to be reused for this shard of this build."""
    return IndexRequest(
        "dense", collection=str(collection), encoder=encoder_identity(encoder), shard=shard.record(spec, batch_size)
    )


def write_dense_shard(
    collection: str | Path,
    out_dir: Path,
    encoder: EncoderSpec,
    shard: Shard,
    batch_size: int = 64,
    fields: tuple[str, ...] = ("title", "text"),
    *,
    faiss_spec: FaissIndexSpec = FLAT,
    device: str = "cpu",
    progress: Callable[[int], None] | None = None,
) -> IndexMeta:
    """Encode shard ``shard`` of ``collection`` into a flat FaissSearcher directory ``out_dir`` (no document
    store: the merge writes the whole collection's). ``faiss_spec`` is recorded for the merge."""
    corpus = corpus_file(collection)
    check = check_corpus(corpus)
    faiss_spec.check_size(check.num_docs)
    start, end = shard.check_size(check.num_docs).rows(check.num_docs)
    if start % batch_size:  # padding differs with a batch's other documents: vectors equal to rounding
        log.info(
            "shard %d of %d starts at document %d, not a multiple of --batch-size %d: its batches are not "
            "one process's, and its vectors may differ from one process's in the last bits",
            shard.id,
            shard.of,
            start,
            batch_size,
        )
    indexed, dimension = encode_corpus(
        corpus,
        out_dir,
        encoder,
        batch_size,
        fields,
        check,
        device=device,
        shard=(shard.id, shard.of),
        progress=progress,
    )
    check_count(corpus, indexer="Faiss", indexed=indexed, expected=end - start)
    return IndexMeta(
        kind="dense",
        collection=str(collection),
        num_docs=indexed,
        corpus=corpus_identity(corpus),
        encoder=encoder_identity(encoder),
        dimension=dimension,
        extra={
            "batch_size": batch_size,
            "fields": list(fields),
            "shard": shard.record(faiss_spec, batch_size),
            "rows": [start, end],
            "corpus_docs": check.num_docs,
        },
    )


@dataclass(frozen=True)
class ShardSet:
    """Every shard of one build, checked, in shard order: what a merge writes and what its output records."""

    directories: tuple[Path, ...]
    metas: tuple[IndexMeta, ...]
    faiss_spec: FaissIndexSpec

    @property
    def first(self) -> IndexMeta:
        return self.metas[0]

    @property
    def corpus(self) -> Path:
        return Path(self.first.corpus_record["path"])

    def request(self) -> IndexRequest:
        """What the merged index records, as the index command would ask for it from the collection."""
        return IndexRequest(
            "dense",
            collection=str(self.corpus),
            encoder=self.first.encoder,
            faiss_index=self.faiss_spec,
            prebuilt=False,
        )


def _shard_meta(directory: Path) -> IndexMeta:
    if not directory.is_dir():
        raise UserError(f"--merge {directory}: no such directory")
    meta = IndexMeta.read(directory)
    if meta is None or "shard" not in meta.extra:
        raise UserError(
            f"--merge {directory}: not a shard (build one with index --collection ... --shard I --shards N)"
        )
    if index_kind(directory) != "dense":
        raise UserError(f"--merge {directory}: its index files are missing")
    check_faiss_file(directory / "index")  # readable, and as many docids as vectors
    return meta


def _built_with(meta: IndexMeta) -> dict:
    """What shards of one build share, each as the index command names it."""
    shard = meta.extra["shard"]
    return {
        "corpus": f"corpus SHA-256 {meta.corpus_record['sha256'][:12]}",
        "shards": f"--shards {shard['of']}",
        "batch": f"--batch-size {meta.extra['batch_size']}",
        "fields": f"fields {meta.extra['fields']}",
        "dimension": f"dimension {meta.dimension}",
        "faiss": f"--faiss-index {FaissIndexSpec(**shard['faiss_index']).describe()}",
    }


def check_shards(directories: Sequence[str | Path]) -> ShardSet:
    """The shards in ``directories`` (any order), checked to be all the shards of one build, encoded alike, from
    a corpus that is still as it was; else one line naming what differs."""
    metas = [(Path(d), _shard_meta(Path(d))) for d in directories]
    (first_dir, first), *others = metas
    for directory, meta in others:
        differences = [
            f"{mine} ({directory}) and {theirs} ({first_dir})"
            for (mine, theirs) in zip(_built_with(meta).values(), _built_with(first).values())
            if mine != theirs
        ]
        if not same_encoder(meta.dense_encoder, first.dense_encoder):
            differences.append(
                f"encoder {describe(meta.dense_encoder)} ({directory}) and {describe(first.dense_encoder)} "
                f"({first_dir})"
            )
        if differences:
            raise UserError(f"--merge: shards of different builds: {'; '.join(differences)}")
    count = first.extra["shard"]["of"]
    by_id: dict[int, tuple[Path, IndexMeta]] = {}
    for directory, meta in metas:
        shard_id = meta.extra["shard"]["id"]
        if shard_id in by_id:
            raise UserError(f"--merge: shard {shard_id} of {count} is given twice ({by_id[shard_id][0]}, {directory})")
        by_id[shard_id] = directory, meta
    if missing := sorted(set(range(count)) - set(by_id)):
        raise UserError(
            f"--merge: shard{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of "
            f"{count} missing (build with index --collection ... --shard I --shards {count})"
        )
    asked = IndexRequest("dense", collection=first.corpus_record["path"], shard=first.extra["shard"])
    if stale := asked.differences(first):
        raise UserError(f"--merge: the shards were encoded from {'; '.join(stale)}")
    ordered = [by_id[i] for i in range(count)]
    return ShardSet(
        tuple(d for d, _ in ordered),
        tuple(m for _, m in ordered),
        FaissIndexSpec(**first.extra["shard"]["faiss_index"]),
    )


def merge_shards(shards: ShardSet, out_dir: Path) -> IndexMeta:
    """Write into ``out_dir`` the index a one-process build of the shards' collection writes: the vectors and
    docids appended in shard order (as ``FaissRepresentationWriter`` adds them), the document store, then the
    shards' index type over the vectors."""
    import faiss

    first = shards.first
    merged = faiss.IndexFlatIP(first.dense_dimension)
    with open(out_dir / "docid", "wb") as docids:
        for directory in shards.directories:
            index = faiss_index.read(directory / "index")
            for start in range(0, index.ntotal, CHUNK):
                merged.add(index.reconstruct_n(start, min(CHUNK, index.ntotal - start)))
            with open(directory / "docid", "rb") as f:
                shutil.copyfileobj(f, docids)
    faiss.write_index(merged, str(out_dir / "index"))
    corpus = corpus_file(shards.corpus)
    n_docs = DocStore.build(out_dir / DOCSTORE_FILE, read_jsonl_corpus(corpus))
    check_count(corpus, indexer="the merge", indexed=merged.ntotal, expected=n_docs)
    del merged
    return IndexMeta(
        kind="dense",
        collection=first.collection,
        num_docs=n_docs,
        corpus=corpus_identity(corpus),
        encoder=first.encoder,
        dimension=first.dimension,
        faiss_index=rebuild_faiss_index(out_dir, shards.faiss_spec),
        extra={"batch_size": first.extra["batch_size"], "fields": first.extra["fields"]},
    )
