"""Searchers: :class:`TourSearcher` (dense, with a query rewriter) and :class:`Bm25Searcher` (Lucene).

``python -m tour_pyserini.search`` runs either over a topics file and writes a TREC run. Attributes
load lazily, so the BM25 searcher never imports the rewriters.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_LAZY = {
    "Bm25Searcher": "tour_pyserini.search.bm25",
    "DimensionMismatchError": "tour_pyserini.search.searcher",
    "TourSearcher": "tour_pyserini.search.searcher",
}
__all__ = ["Bm25Searcher", "DimensionMismatchError", "TourSearcher"]

if TYPE_CHECKING:
    from tour_pyserini.search.bm25 import Bm25Searcher
    from tour_pyserini.search.searcher import DimensionMismatchError, TourSearcher


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
