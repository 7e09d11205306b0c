"""Faiss index types: exact flat, HNSW graphs and IVF-PQ, how they are built, opened and tuned at search time.

Rewriters update queries with candidate *vectors*, so every index type here returns exact ones:
``IndexFlatIP`` and ``IndexHNSWFlat`` store the vectors themselves, and IVF-PQ is wrapped in
``IndexRefineFlat``, whose refinement store keeps the exact float32 vectors beside the compressed codes:
the search ranks candidates by their PQ codes, re-scores ``REFINE_FACTOR`` times as many as asked for with
the exact vectors, and ``reconstruct`` returns exact vectors too. Every index is opened memory-mapped, so
processes on one machine share one copy in the page cache and only the pages a search touches are read.
:func:`write_streamed` writes a flat or IVF-PQ file from vectors given in chunks, for collections larger than
memory.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.index.docstore import DocStore
from tour_pyserini.index.layout import DOCSTORE_FILE, IndexMeta, MissingIndexError, check_faiss_file, index_kind

if TYPE_CHECKING:
    import faiss

INDEX_TYPES = ("flat", "hnsw", "ivfpq")
REFINE_FACTOR = 4  # IVF-PQ re-scores 4x the requested candidates exactly: PQ ranking errors mostly vanish
TRAIN_POINTS_PER_LIST = 64


@dataclass(frozen=True)
class FaissIndexSpec:
    """How to build one index; flags as in ``pyserini.index.faiss`` where it has them (``--M``, ``--efC``,
    ``--pq-m``, ``--pq-nbits``). ``None`` means a default derived from the collection (see :meth:`resolved`)."""

    type: str = "flat"
    M: int = 32  # HNSW neighbours per node (Pyserini's default, 256, is sized for 8.8M MS MARCO passages)
    ef_construction: int = 100
    ef_search: int = 128  # stored in the file; --ef-search overrides it per search
    nlist: int | None = None  # IVF lists: 4·sqrt(n), at most n/39 (Faiss wants 39 training points per list)
    nprobe: int | None = None  # IVF lists visited per query: nlist/16, at least 32
    pq_m: int | None = None  # PQ sub-quantisers: dimension/8 (8 dimensions per code byte)
    pq_nbits: int = 8

    def check(self) -> FaissIndexSpec:
        """Values that are wrong whatever the collection; checked before any model loads."""
        if self.type not in INDEX_TYPES:
            raise UserError(f"--faiss-index must be one of {', '.join(INDEX_TYPES)}, got {self.type!r}")
        for name in ("M", "ef_construction", "ef_search", "nlist", "nprobe", "pq_m", "pq_nbits"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise UserError(f"{name} must be positive, got {value}")
        return self

    @property
    def ivfpq_shape(self) -> tuple[int, int, int]:
        """``(nlist, nprobe, pq_m)`` of an IVF-PQ spec whose defaults are filled in (:meth:`resolved`)."""
        if self.nlist is None or self.nprobe is None or self.pq_m is None:
            raise ValueError(f"IVF-PQ spec {self.describe()!r} is not resolved for a collection yet")
        return self.nlist, self.nprobe, self.pq_m

    def lists(self, num_docs: int) -> int:
        return self.nlist or max(1, min(round(4 * math.sqrt(num_docs)), num_docs // 39))

    def check_size(self, num_docs: int) -> FaissIndexSpec:
        """Whether ``num_docs`` vectors can train this index: known from the corpus, before anything is encoded."""
        self.check()
        if self.type == "ivfpq" and (num_docs < 2**self.pq_nbits or num_docs < self.lists(num_docs)):
            raise UserError(
                f"IVF-PQ with {self.lists(num_docs)} lists and {self.pq_nbits}-bit codes needs at least "
                f"{max(2**self.pq_nbits, self.lists(num_docs))} documents to train; the collection has {num_docs}"
            )
        return self

    def resolved(self, num_docs: int, dimension: int) -> FaissIndexSpec:
        """The spec with every default filled in for ``num_docs`` vectors of ``dimension``, checked."""
        self.check_size(num_docs)
        if self.type != "ivfpq":
            return self
        nlist = self.lists(num_docs)
        pq_m = self.pq_m or max(1, dimension // 8)
        if dimension % pq_m:
            raise UserError(f"--pq-m {pq_m} must divide the vector dimension {dimension}")
        # SciFact (132 lists), recall@100 against flat: 0.67 at nprobe 8, 0.82 at 16, 0.93 at 32, 0.98 at 64
        nprobe = min(self.nprobe or max(32, nlist // 16), nlist)
        return FaissIndexSpec(**{**asdict(self), "nlist": nlist, "pq_m": pq_m, "nprobe": nprobe})

    def describe(self) -> str:
        """``"ivfpq, pq_nbits 4"``: the type and the parameters set (defaults not yet resolved are left out)."""
        return ", ".join([self.type] + [f"{k} {v}" for k, v in self.to_json().items() if k != "type" and v is not None])

    def to_json(self) -> dict:
        keys = {
            "flat": ("type",),
            "hnsw": ("type", "M", "ef_construction", "ef_search"),
            "ivfpq": ("type", "nlist", "nprobe", "pq_m", "pq_nbits"),
        }
        return {k: v for k, v in asdict(self).items() if k in keys[self.type]}


def empty_index(spec: FaissIndexSpec, d: int) -> faiss.Index:
    """The untrained, empty Faiss index of a resolved ``spec`` (:meth:`FaissIndexSpec.resolved`)."""
    import faiss

    if spec.type == "flat":
        return faiss.IndexFlatIP(d)
    if spec.type == "hnsw":
        graph = faiss.IndexHNSWFlat(d, spec.M, faiss.METRIC_INNER_PRODUCT)
        graph.hnsw.efConstruction = spec.ef_construction
        graph.hnsw.efSearch = spec.ef_search
        return graph
    return empty_ivfpq(spec, d)


def empty_ivfpq(spec: FaissIndexSpec, d: int) -> faiss.IndexRefine:
    """IVF-PQ wrapped in a flat refinement store; the factory makes each index own its parts."""
    import faiss

    nlist, nprobe, pq_m = spec.ivfpq_shape
    factory = f"IVF{nlist},PQ{pq_m}x{spec.pq_nbits},RFlat"
    index = faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT)
    ivf = faiss.extract_index_ivf(index)
    ivf.nprobe = nprobe
    # k-means of the lists on at most 64 points each (Faiss: 256): 4x faster, and the lists only
    # choose where to look, since candidates are re-scored exactly
    ivf.cp.max_points_per_centroid = TRAIN_POINTS_PER_LIST
    ivfpq = faiss.downcast_index(ivf)
    # the factory and downcast_index return the concrete classes, which faiss's stubs type as Index
    if not isinstance(index, faiss.IndexRefine) or not isinstance(ivfpq, faiss.IndexIVFPQ):
        raise TypeError(f"faiss built {factory!r} as {type(index).__name__} over {type(ivfpq).__name__}")
    # each PQ codebook has 2^nbits centroids: Faiss warns below 39 points each, which every collection
    # under 10,000 documents is; the bench measures the recall instead
    ivfpq.pq.cp.min_points_per_centroid = 1
    # the factory's default; 10x the training time, unused by search (an attribute faiss's stubs lack)
    ivfpq.do_polysemous_training = False  # type: ignore[attr-defined]
    index.k_factor = REFINE_FACTOR
    return index


def build(vectors, spec: FaissIndexSpec, chunk: int = 100_000):
    """A Faiss inner-product index of ``vectors``, rows in docid order: an (n, d) float32 array, or another
    Faiss index keeping exact vectors, read ``chunk`` rows at a time (a memory-mapped source is never copied
    into memory whole: the build holds the new index and one chunk)."""
    import faiss

    n, d = (vectors.ntotal, vectors.d) if isinstance(vectors, faiss.Index) else vectors.shape
    spec = spec.resolved(n, d)
    index = empty_index(spec, d)
    if spec.type == "ivfpq":
        index.train(rows(vectors, training_sample(n, spec)))
    for start in range(0, n, chunk):
        index.add(rows(vectors, np.arange(start, min(n, start + chunk))))
    return index


def write_streamed(
    chunks: Callable[[], Iterable[np.ndarray]], n: int, d: int, spec: FaissIndexSpec, path: str | Path
) -> dict:
    """Build a flat or IVF-PQ index of ``n`` vectors of dimension ``d`` straight into the Faiss file ``path``,
    for collections whose vectors do not fit in memory: ``chunks()`` yields the rows in docid order (float32
    arrays of any number of rows) and is called once per pass, giving the same rows each time (a generator
    over a file, or one that makes them again). The file is the one ``faiss.write_index(build(vectors, spec))``
    writes, byte for byte when the chunks are :func:`build`'s; memory holds one chunk and, for IVF-PQ, the
    compressed codes (d/8 + 8 bytes a document), never the exact store, which is written to disk as it comes.
    IVF-PQ makes three passes (the training sample, the codes, the exact store), flat one. Returns the seconds
    of each pass (wall and CPU)."""
    import time

    import faiss

    spec = spec.resolved(n, d)
    if spec.type not in ("flat", "ivfpq"):
        raise UserError(f"a streamed build writes flat or IVF-PQ indexes; {spec.type} holds its vectors in memory")
    seconds: dict[str, float] = {}

    def checked():
        done = 0
        for chunk in chunks():
            chunk = np.ascontiguousarray(chunk, dtype=np.float32)
            if chunk.ndim != 2 or chunk.shape[1] != d or done + len(chunk) > n:
                raise ValueError(f"chunk of shape {chunk.shape} after {done} rows; expected {n} rows of {d}")
            yield done, chunk
            done += len(chunk)
        if done != n:
            raise ValueError(f"the chunks gave {done} rows, not {n}")

    def timed(name, start, cpu):
        seconds[f"{name}_wall_s"] = round(time.perf_counter() - start, 2)
        seconds[f"{name}_cpu_s"] = round(time.process_time() - cpu, 2)

    def header(fourcc: bytes, ntotal: int) -> bytes:  # Faiss's index header, inner product, trained
        return struct.pack("<4siqqq?i", fourcc, d, ntotal, 1 << 20, 1 << 20, True, faiss.METRIC_INNER_PRODUCT)

    with open(path, "wb") as out:
        if spec.type == "ivfpq":
            index = empty_ivfpq(spec, d)
            start, cpu = time.perf_counter(), time.process_time()
            wanted, filled = training_sample(n, spec), 0
            sample = np.empty((len(wanted), d), dtype=np.float32)
            for at, chunk in checked():
                lo, hi = np.searchsorted(wanted, [at, at + len(chunk)])
                sample[filled : filled + hi - lo] = chunk[wanted[lo:hi] - at]
                filled += hi - lo
            index.train(sample)
            del sample
            timed("train", start, cpu)
            start, cpu = time.perf_counter(), time.process_time()
            base = index.base_index
            for _, chunk in checked():
                base.add(chunk)
            timed("add", start, cpu)
            start, cpu = time.perf_counter(), time.process_time()
            out.write(header(b"IxRF", n))
            # faiss's stubs lack its Python callback writer
            faiss.write_index(base, faiss.PyCallbackIOWriter(out.write))  # type: ignore[attr-defined]
            k_factor = index.k_factor
            del index, base
        else:
            start, cpu = time.perf_counter(), time.process_time()
        # the exact store: a flat index, its vectors as one vector of n * d floats
        out.write(header(b"IxFI", n) + struct.pack("<q", n * d))
        for _, chunk in checked():
            out.write(chunk.tobytes())
        if spec.type == "ivfpq":
            out.write(struct.pack("<f", k_factor))
        timed("write", start, cpu)
    return seconds


def training_sample(n: int, spec: FaissIndexSpec, seed: int = 0) -> np.ndarray:
    """Sorted row ids of the vectors IVF-PQ trains on: enough for the lists and for the PQ codebooks."""
    nlist, _, _ = spec.ivfpq_shape
    size = min(n, max(TRAIN_POINTS_PER_LIST * nlist, 256 * 2**spec.pq_nbits))
    return np.sort(np.random.default_rng(seed).choice(n, size, replace=False))


def rows(vectors, ids: np.ndarray) -> np.ndarray:
    """Rows ``ids`` of an array or of a Faiss index, as float32."""
    import faiss

    if isinstance(vectors, faiss.Index):
        return vectors.reconstruct_batch(ids.astype(np.int64))
    return np.ascontiguousarray(vectors[ids], dtype=np.float32)


def read(path: str | Path):
    """Open an index file memory-mapped (flat codes and refinement vectors stay on disk until touched)."""
    import faiss

    return faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC)


def read_vectors(index_dir: str | Path) -> tuple[np.ndarray, list[str]]:
    """Every document vector (N, d) float32 of a FaissSearcher directory (``index`` + ``docid``), read back
    from its Faiss file (exact where the index keeps exact vectors), and the docids in row order."""
    import faiss

    index = faiss.read_index(str(Path(index_dir) / "index"))
    return index.reconstruct_n(0, index.ntotal), read_docids(index_dir)[: index.ntotal]


def read_docids(index_dir: str | Path) -> list[str]:
    """The docids of a FaissSearcher directory, one per index row, as Pyserini's ``load_docids`` reads them."""
    return [line.rstrip() for line in (Path(index_dir) / "docid").read_text(encoding="utf-8").splitlines()]


@dataclass
class OpenIndex:
    """A dense index directory opened: its Faiss index (memory-mapped), docids in row order, and metadata."""

    directory: Path
    index: Any
    docids: list[str]
    meta: IndexMeta | None

    @cached_property
    def rows(self) -> dict[str, int]:
        """docid -> row, built on first use (teachers that look candidates up by docid)."""
        return {docid: row for row, docid in enumerate(self.docids)}

    @cached_property
    def docstore(self) -> DocStore | None:
        """The index's document store (docid -> text), opened once; None for an index built without one."""
        path = self.directory / DOCSTORE_FILE
        return DocStore(path) if path.exists() else None


class OpenIndexes:
    """The dense indexes one process searches and scores with, each opened and checked once, whoever asks
    first: the searcher and every teacher that reads the same index's vectors (the dense teacher, a residual
    cross-encoder, an ensemble's parts) share one copy."""

    def __init__(self) -> None:
        self._open: dict[Path, OpenIndex] = {}

    def get(self, directory: str | Path) -> OpenIndex:
        """The dense index in ``directory``; a missing directory or a BM25 index is one line."""
        key = Path(directory).resolve()
        if key not in self._open:
            if index_kind(directory) != "dense":
                raise MissingIndexError(f"{directory} is a BM25 index, not a dense one")
            docids = read_docids(key) if (key / "docid").is_file() else []
            index = check_faiss_file(key / "index", len(docids))
            self._open[key] = OpenIndex(Path(directory), index, docids, IndexMeta.read(key))
        return self._open[key]


def index_type(index) -> str:
    """``flat``, ``hnsw`` or ``ivfpq`` for the indexes built here; Faiss's class name for any other."""
    import faiss

    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexRefine):
        return index_type(index.base_index)
    if isinstance(index, faiss.IndexFlat):
        return "flat"
    if isinstance(index, faiss.IndexHNSW):
        return "hnsw"
    if isinstance(index, faiss.IndexIVFPQ):
        return "ivfpq"
    return type(index).__name__


def exact_vectors(index) -> bool:
    """Whether ``reconstruct`` returns the vectors that were added (not a lossy decoding of codes)."""
    import faiss

    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexRefine):
        return isinstance(faiss.downcast_index(index.refine_index), faiss.IndexFlat)
    if isinstance(index, faiss.IndexHNSW):
        return isinstance(faiss.downcast_index(index.storage), faiss.IndexFlat)
    return isinstance(index, faiss.IndexFlat)


def search_parameters(index, depth: int):
    """Per-call parameters so that a search returns ``depth`` hits: an HNSW walk keeps only ``efSearch``
    candidates and would return fewer than ``depth`` when ``efSearch`` is smaller. None for other types."""
    import faiss

    graph = faiss.downcast_index(index)
    if isinstance(graph, faiss.IndexHNSW) and graph.hnsw.efSearch < depth:
        return faiss.SearchParametersHNSW(efSearch=depth)  # type: ignore[attr-defined]  # missing from faiss's stubs
    return None


def set_search_params(index, *, ef_search: int | None = None, nprobe: int | None = None, where: str = "") -> None:
    """Apply ``--ef-search`` (HNSW) and ``--nprobe`` (IVF) to an opened index; a knob the index does not
    have is the user's error."""
    import faiss

    for flag, name, value, kind in (
        ("--ef-search", "efSearch", ef_search, "HNSW"),
        ("--nprobe", "nprobe", nprobe, "IVF"),
    ):
        if value is None:
            continue
        if value < 1:
            raise UserError(f"{flag} must be positive, got {value}")
        try:
            faiss.ParameterSpace().set_index_parameter(index, name, value)
        except RuntimeError:
            raise UserError(
                f"{flag} applies to {kind} indexes; {where or 'this index'} is {index_type(index)}"
            ) from None
