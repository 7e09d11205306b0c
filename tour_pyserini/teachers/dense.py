"""The dense teacher: the retriever itself (or another bi-encoder index) scoring candidates by similarity."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tour_pyserini.encoders import encoder_identity
from tour_pyserini.encoders.query import QueryEncoder
from tour_pyserini.errors import UserError
from tour_pyserini.index.faiss_index import OpenIndex
from tour_pyserini.index.layout import MissingIndexError, index_fingerprint, index_kind
from tour_pyserini.index.query_side import index_query_encoder
from tour_pyserini.teachers.base import TEACHERS, ScoreRequest, Teacher, TeacherContext


@TEACHERS.register
class DenseTeacher(Teacher):
    """``dense`` or ``dense:INDEX_DIR``: the inner product of the query's encoding with each candidate's index
    vector (by default the index being searched, with the encoder it was built with).

    Alone it re-ranks nothing (it is the retriever's own first ranking); its use is as a part of a fusion or an
    ensemble, e.g. ``fusion:bm25+dense``, where it anchors the teacher to the original query. It shares what the
    search opened (:class:`TeacherContext`): the index, and the query encoder when it is the searcher's, in which
    case the query's vector is the one the searcher computed, not a second encoding of its text.
    """

    name = "dense"
    usage = "dense[:DIR]"
    needs_text = False

    def __init__(self, index: OpenIndex, query_encoder: QueryEncoder):
        self.opened = index
        self.index_dir = index.directory
        self.query_encoder = query_encoder
        if query_encoder.dimension != index.index.d:
            raise UserError(
                f"the dense teacher's encoder makes {query_encoder.dimension}-d vectors but index "
                f"{self.index_dir} holds {index.index.d}-d vectors"
            )

    @classmethod
    def from_spec(cls, argument: str | None, context: TeacherContext) -> DenseTeacher:
        index_dir = argument or context.index_dir
        if index_dir is None:
            raise UserError("the dense teacher needs a dense index: dense:DIR")
        if index_kind(index_dir) != "dense":
            raise MissingIndexError(f"the dense teacher needs a dense index, and {index_dir} is a BM25 one")
        opened = context.indexes.get(index_dir)
        return cls(opened, context.encoders.get(index_query_encoder(opened.directory, opened.meta)))

    @classmethod
    def of(cls, index_dir: str | Path, context: TeacherContext | None = None) -> DenseTeacher:
        """The dense teacher of ``index_dir`` with its own encoder (or ``context``'s shared ones)."""
        return cls.from_spec(str(index_dir), context or TeacherContext())

    def query_vectors(self, requests: Sequence[ScoreRequest]) -> np.ndarray:
        """Each request's query vector: the searcher's where this teacher's encoder made it, else encoded here (the
        requests without one together, as one batch)."""
        own = [r.vector if r.encoded_by is self.query_encoder else None for r in requests]
        missing = [i for i, v in enumerate(own) if v is None]
        encoded = dict(zip(missing, self.query_encoder.encode([requests[i].query for i in missing]))) if missing else {}
        return np.stack([encoded[i] if v is None else v for i, v in enumerate(own)]).astype(np.float64)

    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        rows_of = self.opened.rows
        out = []
        for q, request in zip(self.query_vectors(requests), requests):
            missing = [d for d in request.docids if d not in rows_of]
            if missing:
                raise UserError(f"document {missing[0]!r} is not in the dense teacher's index {self.index_dir}")
            rows = np.array([rows_of[d] for d in request.docids], dtype=np.int64)
            out.append(self.opened.index.reconstruct_batch(rows).astype(np.float64) @ q)
        return out

    @property
    def label(self) -> str:
        return f"dense:{self.index_dir.name}"

    @property
    def fingerprint(self) -> str:
        """The index's content (its vectors) and the query encoder's identity, weights hashed."""
        if self.query_encoder.spec is None:  # an encoder of pre-encoded queries has none
            raise ValueError("the dense teacher's fingerprint names its query encoder, whose spec is unknown")
        identity = encoder_identity(self.query_encoder.spec)
        weights = (identity["weights_sha256"] or identity["name"])[:16]
        return (
            f"dense index {index_fingerprint(self.index_dir)} query encoder {identity['pooling']} pooling, "
            f"l2_norm {identity['l2_norm']}, max_length {identity['max_length']}, weights {weights}"
        )
