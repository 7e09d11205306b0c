"""TourSearcher: Pyserini's FaissSearcher with a query rewriter in front of it."""

from __future__ import annotations

import functools
import gc
import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from tour_pyserini._java import import_pyserini
from tour_pyserini.encoders import EncoderSpec
from tour_pyserini.encoders.query import QueryEncoder
from tour_pyserini.errors import UserError, warn_once
from tour_pyserini.files.topics import check_queries
from tour_pyserini.index import faiss_index
from tour_pyserini.index.docstore import DocStore
from tour_pyserini.index.faiss_index import OpenIndex, OpenIndexes
from tour_pyserini.index.query_side import index_query_encoder
from tour_pyserini.results import Hit, SearchResult, Trace, timed
from tour_pyserini.rewriters import Candidates, Identity, QueryBatch, Rewriter, StoppableIndex
from tour_pyserini.search.api import PyseriniSearch, check_k


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a block allocates many acyclic objects."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@functools.cache
def opened_faiss_searcher() -> type:
    """Pyserini's ``FaissSearcher`` over an index already opened (:class:`~tour_pyserini.index.faiss_index.OpenIndex`:
    memory-mapped, so processes on one machine, Ray workers, share one copy of the vectors in the page cache)."""
    searcher_class: Any = import_pyserini("pyserini.search.faiss").FaissSearcher  # a class of the module loaded

    class OpenedFaissSearcher(searcher_class):
        def __init__(self, opened: OpenIndex, query_encoder):
            self.opened = opened
            super().__init__(str(opened.directory), query_encoder)

        def load_index(self, index_dir: str):
            return self.opened.index, self.opened.docids

    return OpenedFaissSearcher


log = logging.getLogger(__name__)


class _KeepingVectors:
    """The searcher as a rewriter sees it, except that every hit carries its exact index vector: what
    ``return_vector=True`` hands back with the final hits, whichever rewriter ranked them."""

    def __init__(self, index: TourSearcher):
        self.index = index

    def __getattr__(self, name: str):
        return getattr(self.index, name)

    def search_vectors(self, vectors: np.ndarray, depth: int, return_vector: bool = False) -> list[list[Hit]]:
        return self.index.search_vectors(vectors, depth, True)


class DimensionMismatchError(UserError):
    """Query vectors and index vectors have different sizes."""


class TourSearcher(PyseriniSearch):
    """Dense search over a real ``pyserini.search.faiss.FaissSearcher`` with a pluggable query rewriter.

    Parameters
    ----------
    faiss_searcher : FaissSearcher
        Pyserini's searcher; its ``query_encoder`` encodes query texts.
    rewriter : Rewriter, optional
        Turns encoded queries into final rankings; the identity (one plain search) by default.
    docstore : DocStore, optional
        docid -> text, for rewriters whose teachers read candidate documents.
    encoder : EncoderSpec, optional
        What encodes the queries; ``from_index`` sets it.
    query_encoder : QueryEncoder, optional
        The query encoder ready-made (its precision, pre-encoded queries); default: one around the
        FaissSearcher's own, for ``encoder``.
    threads : int
        Faiss threads per search call.
    encode_threads : int, optional
        Torch threads for query encoding; default: torch's own default when the searcher is made.

    Examples
    --------
    >>> searcher = TourSearcher.from_index("indexes/scifact.minilm")
    >>> hits = searcher.search("0-dimensional biomaterials show inductive properties.", k=10)
    >>> hits[0].docid, hits[0].score
    """

    def __init__(
        self,
        faiss_searcher,
        *,
        rewriter: Rewriter | None = None,
        docstore: DocStore | None = None,
        encoder: EncoderSpec | None = None,
        query_encoder: QueryEncoder | None = None,
        threads: int = 1,
        encode_threads: int | None = None,
    ):

        self.faiss = faiss_searcher
        self.rewriter = rewriter or Identity()
        self.docstore = docstore
        self.query_encoder = query_encoder or QueryEncoder(faiss_searcher.query_encoder, encoder, encode_threads)
        self.threads = threads

    @property
    def encoder(self) -> EncoderSpec | None:
        """What encodes the queries (TTT-Embed states check it); None when unknown."""
        return self.query_encoder.spec

    @classmethod
    def from_index(
        cls,
        index_dir: str | Path,
        *,
        encoder: str | EncoderSpec | QueryEncoder | None = None,
        rewriter: Rewriter | None = None,
        threads: int = 1,
        ef_search: int | None = None,
        nprobe: int | None = None,
        device: str = "cpu",
    ) -> TourSearcher:
        """Open a dense index built by ``python -m tour_pyserini.index`` (or any FaissSearcher directory, such as
        one ``pyserini.index.faiss`` wrote), memory-mapped.

        ``encoder`` (a name, a spec, or a ready :class:`QueryEncoder` such as pre-encoded queries) defaults
        to the one the index was built with, else the bundled MiniLM; it runs on ``device`` through torch, as
        Pyserini's ``FaissSearcher`` runs it (``SearchSpec.encoder_runtime`` chooses another). ``ef_search``
        (HNSW) and ``nprobe`` (IVF) override the values stored in the index.
        """
        index_dir = Path(index_dir)
        opened = OpenIndexes().get(index_dir)
        faiss_index.set_search_params(opened.index, ef_search=ef_search, nprobe=nprobe, where=str(index_dir))
        if isinstance(encoder, QueryEncoder):
            query_encoder = encoder
        else:
            query_encoder = QueryEncoder.build(index_query_encoder(index_dir, opened.meta, encoder), device)
        return cls.from_open_index(opened, query_encoder, rewriter=rewriter, threads=threads)

    @classmethod
    def from_open_index(
        cls, opened: OpenIndex, query_encoder: QueryEncoder, *, rewriter: Rewriter | None = None, threads: int = 1
    ) -> TourSearcher:
        """The searcher of an index already opened and checked, with a query encoder already built (a search's
        plan makes both once)."""
        if not faiss_index.exact_vectors(opened.index):
            warn_once(
                __name__,
                f"{opened.directory} keeps no exact vectors ({faiss_index.index_type(opened.index)}): rewriters "
                "update queries with vectors decoded from its codes",
            )
        if query_encoder.dimension != opened.index.d:
            made_by = f"encoder {query_encoder.spec.name!r}" if query_encoder.spec else "the pre-encoded queries"
            raise DimensionMismatchError(
                f"{made_by} makes {query_encoder.dimension}-d vectors but index "
                f"{opened.directory} holds {opened.index.d}-d vectors"
            )
        return cls(
            opened_faiss_searcher()(opened, query_encoder.pyserini),
            rewriter=rewriter,
            docstore=opened.docstore,
            query_encoder=query_encoder,
            threads=threads,
        )

    @property
    def dimension(self) -> int:
        return self.faiss.dimension

    @property
    def num_docs(self) -> int:
        return self.faiss.num_docs

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors (n, d), float32, by Pyserini's query encoder as ``FaissSearcher.batch_search`` computes
        them, but a batch's texts together (:class:`QueryEncoder`): a text alone gets Pyserini's vector bit for
        bit, a text in a batch one within about 2e-7."""
        return self._check_vectors(self.query_encoder.encode(texts))

    def _check_vectors(self, vectors: np.ndarray) -> np.ndarray:
        """Query vectors as a search takes them in (encoded, given, or moved by a rewriter): (n, d) float32 of the
        index's dimension, finite."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim == 1:
            vectors = vectors.reshape(1, -1)
        if vectors.ndim != 2 or vectors.shape[1] != self.dimension:
            raise DimensionMismatchError(
                f"query vectors of shape {vectors.shape} do not match the index dimension {self.dimension}"
            )
        if not np.isfinite(vectors).all():
            raise UserError("query vectors contain NaN or infinite values")
        return vectors

    def search_vectors(self, vectors: np.ndarray, depth: int, return_vector: bool = False) -> list[list[Hit]]:
        """The top-``depth`` of the whole index for each row of ``vectors`` (n, d): the :class:`VectorIndex`
        method every rewriter's final ranking uses; each hit becomes one :class:`Hit` (not a Pyserini result
        object first)."""
        scores, rows, candidates = self._faiss_search(vectors, depth, return_vector)
        docids = self.faiss.docids
        rankings = []
        # Creating k hits per query would otherwise trigger many cyclic-GC passes over every live hit
        # of the batch (measured: batched TOUR ran 20% slower than one query at a time)
        with gc_paused():
            for q, (row_ids, row_scores) in enumerate(zip(rows.tolist(), scores.tolist())):
                hits = [Hit(docids[i], s) for i, s in zip(row_ids, row_scores) if i != -1]
                if candidates is not None:
                    for hit, vector in zip(hits, candidates[q]):
                        hit.vector = vector
                rankings.append(hits)
        return rankings

    def search_candidates(self, vectors: np.ndarray, depth: int) -> list[Candidates]:
        """The same search as arrays, with each candidate's exact vector: what TOUR's iterations read."""
        scores, rows, candidates = self._faiss_search(vectors, depth, True)
        docids = self.faiss.docids
        found = []
        for row_ids, row_scores, row_vectors in zip(rows, scores, candidates):
            n = int((row_ids != -1).sum())  # approximate indexes may return fewer than depth
            found.append(Candidates([docids[i] for i in row_ids[:n].tolist()], row_scores[:n], row_vectors[:n]))
        return found

    def _faiss_search(self, vectors: np.ndarray, depth: int, reconstruct: bool):
        """Faiss's scores, rows and (with ``reconstruct``) exact vectors of each row's top ``depth``.

        Each row's result is the same whether it is searched alone or in a batch: Faiss switches to
        a BLAS kernel (different rounding) for batches of ``distance_compute_blas_threshold`` queries
        or more, so that threshold is raised for the call when a batch would reach it.
        """
        import faiss

        vectors = self._check_vectors(vectors)
        # faiss and torch may share one OpenMP runtime: restore its thread count after the search, or
        # encoders and cross-encoder teachers would silently run on `threads` threads from then on
        omp_threads = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(self.threads)
        threshold = faiss.cvar.distance_compute_blas_threshold
        faiss.cvar.distance_compute_blas_threshold = max(threshold, len(vectors) + 1)
        params = faiss_index.search_parameters(self.faiss.index, depth)
        try:
            if reconstruct:
                return self.faiss.index.search_and_reconstruct(vectors, depth, params=params)
            scores, rows = self.faiss.index.search(vectors, depth, params=params)
            return scores, rows, None
        finally:
            faiss.cvar.distance_compute_blas_threshold = threshold
            faiss.omp_set_num_threads(omp_threads)

    def retrieve(
        self,
        queries: Sequence[str],
        qids: Sequence[str],
        k: int = 10,
        *,
        rewriter: Rewriter | None = None,
        traces: Sequence[Trace] | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> list[SearchResult]:
        """Encode, rewrite and search a batch of queries: the top ``k`` of each, with its trace, in order.

        ``rewriter`` overrides the searcher's own for this call; ``traces`` and ``stop`` as for
        :meth:`retrieve_vectors`.
        """
        check_queries(queries, qids)
        traces = [Trace() for _ in qids] if traces is None else list(traces)
        with timed(traces, "encode"):
            vectors = self.encode(queries)
        index = self if stop is None else StoppableIndex(self, stop)
        return self._rewrite(queries, qids, vectors, k, rewriter, traces, self.query_encoder, index)

    def retrieve_vectors(
        self,
        texts: Sequence[str],
        qids: Sequence[str],
        vectors: np.ndarray,
        k: int = 10,
        *,
        rewriter: Rewriter | None = None,
        traces: Sequence[Trace] | None = None,
        encoded_by: QueryEncoder | None = None,
        stop: Callable[[], bool] | None = None,
    ) -> list[SearchResult]:
        """Rewrite and search queries already encoded (n, d): e.g. encoded once and searched many ways.

        ``texts`` are what teachers read; ``traces`` (one per query, fresh by default) collect what
        the rewriter did, on top of anything already recorded in them (the encoding time). ``encoded_by``: the
        query encoder that made ``vectors`` (``self.query_encoder`` for :meth:`encode`'s), so that a teacher
        sharing it takes the vectors instead of encoding the texts again. ``stop``: asked before each search the
        rewriter makes; once true, the call raises :class:`~tour_pyserini.rewriters.Abandoned` (a server's client
        has gone).
        """
        check_queries(texts, qids)
        vectors = self._check_vectors(vectors)
        return self._rewrite(
            texts, qids, vectors, k, rewriter, traces, encoded_by, self if stop is None else StoppableIndex(self, stop)
        )

    def _rewrite(self, texts, qids, vectors, k, rewriter, traces, encoded_by, index) -> list[SearchResult]:
        """The rewriter's rankings of queries already checked, and vectors already checked (:meth:`_check_vectors`)."""
        k = check_k(k)
        batch = QueryBatch(list(qids), list(texts), vectors, list(traces) if traces is not None else None, encoded_by)
        return (rewriter or self.rewriter).rewrite(batch, index, k)

    # Pyserini's FaissSearcher API: its parameters by its names and positions, its return values; ``threads``
    # alone differs in its default (None: the searcher's own, which ``from_index`` sets; Pyserini's is 1)
    def search(
        self,
        query: str | np.ndarray,
        k: int = 10,
        threads: int | None = None,
        remove_dups: bool = False,
        return_vector: bool = False,
        *,
        qid: str = "q",
    ):
        """The top ``k`` of one query (a text, or a vector (1, d) or (d,) searched as it is), ranked by the
        searcher's rewriter, as ``FaissSearcher.search``: a list of hits (``docid``, ``score``); with
        ``return_vector``, ``(query vector (1, d), [PrfDenseSearchResult(docid, score, vectors)])``: the vector the
        search started from and each hit's exact index vector, what Pyserini's PRF classes read. ``remove_dups``
        keeps each docid's first hit. ``qid`` is what a TTT-Embed query state and teachers know the query by.
        """
        if isinstance(query, np.ndarray):
            vectors = self._check_vectors(query)
            if len(vectors) != 1:
                raise UserError(f"search takes one query vector, got {len(vectors)}: use batch_search")
            queries: np.ndarray | list[str] = vectors
        else:
            queries = [query]
        vectors, found = self._pyserini_search(queries, [qid], k, threads, return_vector)
        hits = found[qid]
        if return_vector:
            return (query if isinstance(query, np.ndarray) else vectors), hits
        if remove_dups:
            first: dict[str, Hit] = {}
            for hit in hits:
                first.setdefault(hit.docid, hit)
            hits = list(first.values())
        return hits

    def batch_search(
        self,
        queries: Sequence[str] | np.ndarray,
        q_ids: Sequence[str],
        k: int = 10,
        threads: int | None = None,
        return_vector: bool = False,
    ):
        """The top ``k`` of many queries (texts, or vectors (n, d)), keyed by qid, as ``FaissSearcher.batch_search``:
        ``{qid: hits}``; with ``return_vector``, ``(query vectors (n, d), {qid: [PrfDenseSearchResult]})``.
        ``threads`` applies to this call only."""
        vectors, found = self._pyserini_search(queries, list(q_ids), k, threads, return_vector)
        if return_vector:
            return (queries if isinstance(queries, np.ndarray) else vectors), found
        return found

    def _pyserini_search(self, queries, qids: list[str], k, threads: int | None, return_vector: bool):
        """(the query vectors, {qid: hits}) for ``search`` and ``batch_search``."""
        if isinstance(queries, np.ndarray):
            if (rewriter := self.rewriter).needs_teacher:
                raise UserError(
                    f"rewriter {rewriter.name!r} asks a teacher about the query texts: search with texts, not vectors"
                )
            vectors, texts, encoded_by = self._check_vectors(queries), qids, None  # no teacher reads the texts
            if len(vectors) != len(qids):
                raise ValueError(f"{len(vectors)} query vectors but {len(qids)} qids")
        else:
            texts = list(queries)
            if not all(isinstance(t, str) for t in texts):
                raise UserError(
                    "queries are texts or an array of query vectors (Pyserini's dict queries are not supported)"
                )
            check_queries(texts, qids)
            vectors, encoded_by = self.encode(texts), self.query_encoder
        saved = self.threads
        self.threads = saved if threads is None else threads
        try:
            index = _KeepingVectors(self) if return_vector else self
            results = self._rewrite(texts, qids, vectors, k, None, None, encoded_by, index)
        finally:
            self.threads = saved
        if not return_vector:
            return vectors, {r.qid: r.hits for r in results}
        result_class = import_pyserini("pyserini.search.faiss").PrfDenseSearchResult
        return vectors, {
            r.qid: [result_class(h.docid, h.score, v) for h, v in zip(r.hits, self._hit_vectors(r.hits))]
            for r in results
        }

    def _hit_vectors(self, hits: list[Hit]) -> list[np.ndarray]:
        """Each hit's exact index vector: the one it came with, else read from the index by its docid."""
        missing = [h.docid for h in hits if h.vector is None]
        read: dict[str, np.ndarray] = {}
        if missing:
            wanted = set(missing)
            rows = {d: i for i, d in enumerate(self.faiss.docids) if d in wanted}
            read = dict(zip(missing, faiss_index.rows(self.faiss.index, np.array([rows[d] for d in missing]))))
        return [read[h.docid] if h.vector is None else h.vector for h in hits]
