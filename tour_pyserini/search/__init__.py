"""Searchers: :class:`TourSearcher` (dense, with a query rewriter) and :class:`Bm25Searcher` (Lucene).

``python -m tour_pyserini.search`` runs either over a topics file and writes a TREC run.
"""

from tour_pyserini.search.bm25 import Bm25Searcher
from tour_pyserini.search.searcher import DimensionMismatchError, TourSearcher

__all__ = ["Bm25Searcher", "DimensionMismatchError", "TourSearcher"]
