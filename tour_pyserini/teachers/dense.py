"""The dense teacher: the retriever itself (or another bi-encoder index) scoring candidates by similarity."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tour_pyserini.encoders import encoder_identity
from tour_pyserini.encoders.query import QueryEncoder
from tour_pyserini.errors import UserError
from tour_pyserini.index import faiss_index
from tour_pyserini.index.layout import index_fingerprint
from tour_pyserini.index.query_side import query_encoder_spec
from tour_pyserini.teachers.base import TEACHERS, ScoreRequest, Teacher, TeacherContext


@TEACHERS.register
class DenseTeacher(Teacher):
    """``dense`` or ``dense:INDEX_DIR``: the inner product of the query text's encoding with each candidate's
    index vector (by default the index being searched, with the encoder it was built with).

    Alone it re-ranks nothing (it is the retriever's own first ranking); its use is as a part of a
    fusion, e.g. ``fusion:bm25+dense``, where it anchors the teacher to the original query. It opens its
    own copy of the index: memory for a second index of that size.
    """

    name = "dense"
    usage = "dense[:DIR]"
    needs_text = False

    def __init__(self, index_dir: str | Path, encoder: str | None = None):
        self.index_dir = Path(index_dir)
        self.query_encoder = QueryEncoder.build(query_encoder_spec(self.index_dir, encoder))
        self.index = faiss_index.read(self.index_dir / "index")  # memory-mapped, as the searcher opens it
        if self.query_encoder.dimension != self.index.d:
            raise UserError(f"the dense teacher's encoder makes {self.query_encoder.dimension}-d vectors but index "
                            f"{self.index_dir} holds {self.index.d}-d vectors")  # fmt: skip
        self.docids = faiss_index.read_docids(self.index_dir)
        self.rows = {docid: row for row, docid in enumerate(self.docids)}

    @classmethod
    def from_spec(cls, argument: str | None, context: TeacherContext) -> DenseTeacher:
        index_dir = argument or context.index_dir
        if index_dir is None:
            raise UserError("the dense teacher needs a dense index: dense:DIR")
        return cls(index_dir)

    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        queries = self.query_encoder.encode([r.query for r in requests]).astype(np.float64)
        out = []
        for q, request in zip(queries, requests):
            missing = [d for d in request.docids if d not in self.rows]
            if missing:
                raise UserError(f"document {missing[0]!r} is not in the dense teacher's index {self.index_dir}")
            rows = np.array([self.rows[d] for d in request.docids], dtype=np.int64)
            out.append(self.index.reconstruct_batch(rows).astype(np.float64) @ q)
        return out

    @property
    def label(self) -> str:
        return f"dense:{self.index_dir.name}"

    @property
    def fingerprint(self) -> str:
        """The index's content (its vectors) and the query encoder's identity, weights hashed."""
        identity = encoder_identity(self.query_encoder.spec)
        weights = (identity["weights_sha256"] or identity["name"])[:16]
        return (f"dense index {index_fingerprint(self.index_dir)} query encoder {identity['pooling']} pooling, "
                f"l2_norm {identity['l2_norm']}, max_length {identity['max_length']}, weights {weights}")  # fmt: skip
