"""tour-pyserini: test-time query optimisation for Pyserini dense retrieval.

Importing this package does no work: the JVM, torch and Pyserini load only when a searcher or an
index is built. The main entry points::

    from tour_pyserini import TourSearcher
    searcher = TourSearcher.from_index("indexes/scifact.minilm")
    hits = searcher.search("0-dimensional biomaterials show inductive properties.", k=10)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

_LAZY = {
    "TourSearcher": "tour_pyserini.search.searcher",
    "Bm25Searcher": "tour_pyserini.search.bm25",
    "Hit": "tour_pyserini.results",
    "SearchResult": "tour_pyserini.results",
    "Trace": "tour_pyserini.results",
    "Rewriter": "tour_pyserini.rewriters",
    "get_rewriter": "tour_pyserini.rewriters",
    "read_topics": "tour_pyserini.files",
    "read_qrels": "tour_pyserini.files",
    "evaluate": "tour_pyserini.eval",
    "choose": "tour_pyserini.commands.choose",
}
__all__ = [
    "Bm25Searcher",
    "Hit",
    "Rewriter",
    "SearchResult",
    "TourSearcher",
    "Trace",
    "choose",
    "evaluate",
    "get_rewriter",
    "read_qrels",
    "read_topics",
]

if TYPE_CHECKING:
    from tour_pyserini.commands.choose import choose
    from tour_pyserini.eval import evaluate
    from tour_pyserini.files import read_qrels, read_topics
    from tour_pyserini.results import Hit, SearchResult, Trace
    from tour_pyserini.rewriters import Rewriter, get_rewriter
    from tour_pyserini.search.bm25 import Bm25Searcher
    from tour_pyserini.search.searcher import TourSearcher


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tour_pyserini' has no attribute {name!r}")
