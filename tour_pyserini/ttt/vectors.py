"""Document vectors of a dense index, by docid, read from its own Faiss file (the index is not changed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.index.faiss_index import read_vectors


class DocVectors:
    """The stored vector of every document of a FaissSearcher directory (``index`` + ``docid``)."""

    def __init__(self, index_dir: str | Path):
        self.index_dir = Path(index_dir)
        self.matrix, docids = read_vectors(self.index_dir)
        self.row = {docid: i for i, docid in enumerate(docids)}

    def get(self, docids: list[str]) -> np.ndarray:
        """Vectors (k, d) float32 of ``docids``, in order; an unknown docid is a UserError."""
        try:
            return self.matrix[[self.row[d] for d in docids]]
        except KeyError as e:
            raise UserError(f"document {e.args[0]!r} is not in index {self.index_dir}") from None
