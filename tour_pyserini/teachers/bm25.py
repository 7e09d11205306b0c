"""The BM25 teacher: Anserini's BM25 scores of the candidates, for all pairs of a call at once.

``bm25`` computes the scores from the index's term matrix (:mod:`tour_pyserini.index.bm25_matrix`):
the term frequencies of every (candidate, query term) of a call come from one sorted lookup, and
Lucene's formula is applied to them as arrays. ``bm25-anserini`` asks Anserini for each pair
(``computeQueryDocumentScore``, one Lucene search per pair) and is the reference the first equals.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

import numpy as np

from tour_pyserini._java import import_pyserini
from tour_pyserini.errors import UserError
from tour_pyserini.index.bm25 import K1, B
from tour_pyserini.index.bm25_matrix import load_term_matrix
from tour_pyserini.index.docstore import DocStore
from tour_pyserini.index.layout import (
    DOCSTORE_FILE,
    META_FILE,
    IndexMeta,
    MissingIndexError,
    check_readable,
    index_fingerprint,
    index_kind,
)
from tour_pyserini.teachers.base import TEACHERS, ScoreRequest, Teacher, TeacherContext
from tour_pyserini.teachers.bm25_math import document_scores, idf, norm_inverse_table, term_scores


def sibling_bm25_index(index_dir: str | Path) -> Path:
    """The BM25 index built from the same collection as ``index_dir``, found beside it. Only Lucene indexes are
    read; one whose metadata is damaged is passed over (it cannot be shown to match), and named if none matches."""
    index_dir = Path(index_dir)
    meta = IndexMeta.read(index_dir)
    damaged = []
    if meta is not None:
        for candidate in sorted(index_dir.parent.iterdir()):
            if not (candidate.is_dir() and any(candidate.glob("segments_*"))):
                continue
            try:
                other = IndexMeta.read(candidate)
            except UserError:
                damaged.append(candidate.name)
                continue
            if other and other.kind == "bm25" and other.collection == meta.collection:
                return candidate
    raise MissingIndexError(
        f"no BM25 index of the collection of {index_dir} beside it"
        + (f" (passed over, their {META_FILE} damaged: {', '.join(damaged)})" if damaged else "")
        + f"; build one with `python -m tour_pyserini.index --bm25 --collection {meta.collection if meta else 'DIR'} "
        "--output DIR` or name it: bm25:DIR"
    )


SEPARATOR = "tourpyserinisep"  # a made-up word the analyzer keeps as it is


class _LuceneIndexTeacher(Teacher):
    """A teacher that reads a Lucene index: ``KIND:DIR``, or the BM25 index beside the dense one."""

    needs_text = False

    def __init__(self, index_dir: str | Path):
        if index_kind(index_dir) != "bm25":
            raise MissingIndexError(f"the {self.name} teacher needs a Lucene index, and {index_dir} is a dense one")
        self.index_dir = Path(index_dir)

    @classmethod
    def from_spec(cls, argument: str | None, context: TeacherContext) -> _LuceneIndexTeacher:
        if argument:
            return cls(argument)
        if context.index_dir is None:
            raise UserError(f"the {cls.name} teacher needs a Lucene index: {cls.name}:DIR")
        return cls(sibling_bm25_index(context.index_dir))

    @property
    def fingerprint(self) -> str:
        """The kind, BM25's parameters and the index's content: a store filled from one index is refused by another."""
        return f"{self.name} k1 {K1} b {B} index {index_fingerprint(self.index_dir)}"


@TEACHERS.register
class Bm25Teacher(_LuceneIndexTeacher):
    """BM25 (k1 0.9, b 0.4) of the query against each candidate, equal to Anserini's to the last float bit.

    Queries are analysed by Anserini's default analyzer, as Anserini does; the rest is array math on
    the index's term matrix, which (with arrays derived from it) is the teacher's only state.
    """

    name = "bm25"
    usage = "bm25[:DIR]"

    def __init__(self, index_dir: str | Path):
        super().__init__(index_dir)
        matrix = load_term_matrix(self.index_dir)
        self.rows = {docid: i for i, docid in enumerate(matrix.docids)}
        self.columns = {term: j for j, term in enumerate(matrix.terms)}
        # every stored (document, term) as one sorted key, so a batch's tf lookups are one searchsorted
        tf = matrix.tf
        self.keys = np.repeat(np.arange(tf.shape[0], dtype=np.int64), np.diff(tf.indptr)) * len(self.columns)
        self.keys += tf.indices
        self.tf = tf.data
        self.idf = idf(matrix.df, matrix.doc_count)
        # one more row, holding no term: a document of the collection Lucene left out because it has no text
        self.empty_row = len(matrix.docids)
        self.norm_inverse = np.append(norm_inverse_table(matrix.sum_total_tf, matrix.doc_count)[matrix.norms], 0.0)

    @cached_property
    def analyzer(self):
        # on first use: the JVM starts only once a query is scored, after the score store is checked
        return import_pyserini("pyserini.pyclass").autoclass("io.anserini.analysis.AnalyzerUtils")

    def analyse(self, queries: Sequence[str]) -> list[list[str]]:
        """Each query's tokens as Anserini's default analyzer makes them, in one call into the JVM for all.

        The analyzer works token by token and never joins tokens across a line break, so the queries
        joined by lines holding a separator word analyse to their tokens one after the other; should
        a query hold the separator word itself, each query is analysed alone.
        """
        tokens = list(self.analyzer.analyze(f"\n{SEPARATOR}\n".join(queries)).toArray())
        if tokens.count(SEPARATOR) != len(queries) - 1:
            return [list(self.analyzer.analyze(query).toArray()) for query in queries]
        bounds = [-1] + [i for i, token in enumerate(tokens) if token == SEPARATOR] + [len(tokens)]
        return [tokens[a + 1 : b] for a, b in zip(bounds[:-1], bounds[1:])]

    def query_terms(self, queries: Sequence[str]) -> list[Counter]:
        """Analysed terms of each query found in the index, with their counts (Anserini's boosts); others score 0."""
        return [Counter(t for t in tokens if t in self.columns) for tokens in self.analyse(queries)]

    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        if not requests:
            return []
        # the call's (request, distinct query term) slots: a column and a weight boost * idf each
        terms = self.query_terms([request.query for request in requests])
        n_terms = np.array([len(t) for t in terms], dtype=np.int64)
        columns = np.array([self.columns[t] for ts in terms for t in ts], dtype=np.int64)
        weights = np.array([c for ts in terms for c in ts.values()], dtype=np.float32) * self.idf[columns]
        rows = self._rows(requests)
        sizes = [len(request.docids) for request in requests]
        # the grid of each candidate with each slot of its own request, flattened
        per_pair = np.repeat(n_terms, sizes)
        pair = np.repeat(np.arange(len(rows)), per_pair)
        first_slot = np.repeat(np.cumsum(n_terms) - n_terms, sizes)
        slot = first_slot[pair] + np.arange(len(pair)) - np.repeat(np.cumsum(per_pair) - per_pair, per_pair)
        tf = self._lookup(rows[pair] * len(self.columns) + columns[slot])
        scores = term_scores(weights[slot], tf, self.norm_inverse[rows[pair]])
        return np.split(document_scores(scores, pair, len(rows)), np.cumsum(sizes)[:-1])

    def _lookup(self, keys: np.ndarray) -> np.ndarray:
        """Term frequencies of (document, term) keys; 0 for pairs the index does not hold."""
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        return np.where(self.keys[at] == keys, self.tf[at], 0)

    def _rows(self, requests: Sequence[ScoreRequest]) -> np.ndarray:
        """Each candidate's row; a document of the index's collection that Lucene left out (it has no text: the
        indexer skips empty documents) is the row of no term, whose BM25 is 0 for every query."""
        docids = [d for request in requests for d in request.docids]
        rows = np.array([self.rows.get(d, -1) for d in docids], dtype=np.int64)
        for i in np.flatnonzero(rows < 0):
            if self.docstore is None or docids[i] not in self.docstore:
                raise UserError(
                    f"document {docids[i]!r} is not in the BM25 index {self.index_dir}: "
                    "the teacher's index must hold the collection being searched"
                )
            rows[i] = self.empty_row
        return rows

    @cached_property
    def docstore(self) -> DocStore | None:
        """The index's collection, every document of it (Lucene's index lacks the empty ones)."""
        path = self.index_dir / DOCSTORE_FILE
        return DocStore(path) if path.exists() else None


@TEACHERS.register
class AnseriniBm25Teacher(_LuceneIndexTeacher):
    """The same BM25 scores, one Lucene search per pair through Anserini's ``computeQueryDocumentScore``.

    Tens of times slower per pair than ``bm25``; kept as the reference ``bm25`` is checked against.
    """

    name = "bm25-anserini"
    usage = "bm25-anserini[:DIR]"

    def __init__(self, index_dir: str | Path):
        super().__init__(index_dir)
        check_readable(index_dir)
        self.reader = import_pyserini("pyserini.index.lucene").LuceneIndexReader(str(index_dir))

    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        score = self.reader.compute_query_document_score
        return [np.array([score(d, r.query) for d in r.docids], dtype=float) for r in requests]
