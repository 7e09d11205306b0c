"""What both searchers answer as Pyserini's searchers do: ``search(query, k)`` and
``batch_search(queries, qids, k, threads)``, built on each searcher's own ``retrieve``."""

from __future__ import annotations

import numbers
from abc import ABC, abstractmethod
from collections.abc import Sequence

from tour_pyserini.errors import UserError
from tour_pyserini.results import Hit, SearchResult


def check_k(k) -> int:
    """``k``, how many hits a query gets, as an int (Lucene takes no numpy integer); anything but a positive
    integer (0, "3", 2.5, True) is one line here, not a Java exception, a TypeError or a search for another
    number of hits from inside a searcher."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise UserError(f"k must be a positive integer, got {k!r}")
    return int(k)


class PyseriniSearch(ABC):
    """``search`` and ``batch_search`` for a searcher with ``retrieve(queries, qids, k)`` and ``threads``."""

    threads: int

    @abstractmethod
    def retrieve(self, queries: Sequence[str], qids: Sequence[str], k: int = 10) -> list[SearchResult]:
        """The top ``k`` of each query, with its trace, in order."""

    def search(self, query: str, k: int = 10, *, qid: str = "q") -> list[Hit]:
        """The top ``k`` of one query."""
        return self.retrieve([query], [qid], k)[0].hits

    def batch_search(
        self, queries: Sequence[str], qids: Sequence[str], k: int = 10, threads: int | None = None
    ) -> dict[str, list[Hit]]:
        """The top ``k`` of many queries, keyed by qid, as Pyserini's ``batch_search`` returns them; ``threads``
        applies to this call only."""
        saved = self.threads
        self.threads = saved if threads is None else threads
        try:
            return {r.qid: r.hits for r in self.retrieve(queries, qids, k)}
        finally:
            self.threads = saved
