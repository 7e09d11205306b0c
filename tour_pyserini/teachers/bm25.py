"""The BM25 teacher: Lucene BM25 scores of the candidates, through Pyserini's index reader."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tour_pyserini._java import import_pyserini
from tour_pyserini.errors import UserError
from tour_pyserini.index.layout import IndexMeta, MissingIndexError, index_kind
from tour_pyserini.teachers.base import TEACHERS, ScoreRequest, Teacher, TeacherContext


def sibling_bm25_index(index_dir: str | Path) -> Path:
    """The BM25 index built from the same collection as ``index_dir``, found beside it."""
    index_dir = Path(index_dir)
    meta = IndexMeta.read(index_dir)
    if meta is not None:
        for candidate in sorted(index_dir.parent.iterdir()):
            other = IndexMeta.read(candidate) if candidate.is_dir() else None
            if other and other.kind == "bm25" and other.collection == meta.collection:
                return candidate
    raise MissingIndexError(
        f"no BM25 index of the collection of {index_dir} beside it; build one with "
        f"`python -m tour_pyserini.index --bm25 --collection {meta.collection if meta else 'DIR'} --output DIR` "
        "or name it: bm25:DIR"
    )


@TEACHERS.register
class Bm25Teacher(Teacher):
    """BM25 (k1 0.9, b 0.4) of the query against each candidate, as Anserini computes it."""

    kind = "bm25"
    needs_text = False

    def __init__(self, index_dir: str | Path):
        if index_kind(index_dir) != "bm25":
            raise MissingIndexError(f"the bm25 teacher needs a Lucene index, and {index_dir} is a dense one")
        self.index_dir = Path(index_dir)
        self.reader = import_pyserini("pyserini.index.lucene").LuceneIndexReader(str(index_dir))

    @classmethod
    def from_spec(cls, argument: str | None, context: TeacherContext) -> Bm25Teacher:
        if argument:
            return cls(argument)
        if context.index_dir is None:
            raise UserError("the bm25 teacher needs a Lucene index: bm25:DIR")
        return cls(sibling_bm25_index(context.index_dir))

    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        score = self.reader.compute_query_document_score
        return [np.array([score(d, r.query) for d in r.docids], dtype=float) for r in requests]
