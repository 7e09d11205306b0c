"""BM25 search through Pyserini's real ``LuceneSearcher``: the sparse baseline."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from tour_pyserini._java import allow_long_queries, import_pyserini
from tour_pyserini.files.topics import check_queries
from tour_pyserini.index.bm25 import K1, B
from tour_pyserini.index.layout import MissingIndexError, check_readable, index_kind
from tour_pyserini.results import Hit, SearchResult, Trace, timed
from tour_pyserini.search.api import PyseriniSearch, check_k


class Bm25Searcher(PyseriniSearch):
    """``LuceneSearcher`` with BM25 (k1 0.9, b 0.4 as in Pyserini's BEIR regressions, Anserini's defaults)."""

    def __init__(self, lucene_searcher, threads: int = 1, k1: float = K1, b: float = B):
        self.lucene = lucene_searcher
        self.threads = threads
        self.k1, self.b = k1, b

    @classmethod
    def from_index(cls, index_dir: str | Path, *, k1: float = K1, b: float = B, threads: int = 1) -> Bm25Searcher:
        if index_kind(index_dir) != "bm25":
            raise MissingIndexError(f"{index_dir} is a dense index, not a Lucene one")
        check_readable(index_dir)
        searcher = import_pyserini("pyserini.search.lucene").LuceneSearcher(str(index_dir))
        allow_long_queries()
        searcher.set_bm25(k1, b)
        return cls(searcher, threads, k1, b)

    @contextmanager
    def bm25(self, k1: float | None = None, b: float | None = None) -> Iterator[None]:
        """Search with BM25's ``k1`` and ``b`` (None: the searcher's own) inside the block, then with its own."""
        self.lucene.set_bm25(self.k1 if k1 is None else k1, self.b if b is None else b)
        try:
            yield
        finally:
            self.lucene.set_bm25(self.k1, self.b)

    def retrieve(self, queries: Sequence[str], qids: Sequence[str], k: int = 10) -> list[SearchResult]:
        """The top ``k`` of each query, with its trace, in order."""
        check_queries(queries, qids)
        k = check_k(k)
        traces = [Trace() for _ in qids]
        with timed(traces, "search"):
            results = self.lucene.batch_search(list(queries), list(qids), k, self.threads)
        return [
            SearchResult(qid, [Hit(h.docid, float(h.score)) for h in results[qid]], trace)
            for qid, trace in zip(qids, traces)
        ]
