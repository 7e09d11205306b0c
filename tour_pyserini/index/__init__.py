"""Dense (Faiss) and BM25 (Lucene) indexes, each with a docid -> text store.

``python -m tour_pyserini.index --collection DIR --output DIR [--bm25]`` builds one.
"""

from tour_pyserini.index.docstore import DocStore, Document
from tour_pyserini.index.layout import IndexKind, IndexMeta, MissingIndexError, index_kind

__all__ = ["DocStore", "Document", "IndexKind", "IndexMeta", "MissingIndexError", "index_kind"]
