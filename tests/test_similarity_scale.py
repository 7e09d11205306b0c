"""TOUR's scale rule: hyperparameters stated for unit vectors give the same search when every document vector
is s_c times longer and every query s_q times longer, and unit-length encoders are untouched."""

from __future__ import annotations

import numpy as np
import pytest

from tour_pyserini.results import Hit
from tour_pyserini.rewriters import get_rewriter
from tour_pyserini.rewriters.base import Candidates, QueryBatch
from tour_pyserini.rewriters.updates import SimilarityScale

S_Q, S_C = 2.0, 4.0  # powers of two: scaled arithmetic is exact, so runs must agree bit for bit


class ArrayIndex:
    """The fixture index's real vectors, times ``scale``, in a real exact Faiss index."""

    def __init__(self, vectors: np.ndarray, docids: list[str], docstore, scale: float):
        import faiss

        self.vectors = (vectors * scale).astype(np.float32)
        self.docids, self.docstore, self.encoder = docids, docstore, None
        self.index = faiss.IndexFlatIP(self.vectors.shape[1])
        self.index.add(self.vectors)

    @property
    def num_docs(self) -> int:
        return len(self.docids)

    @property
    def dimension(self) -> int:
        return self.vectors.shape[1]

    def search_vectors(self, vectors, depth, return_vector=False):
        scores, rows = self.index.search(np.ascontiguousarray(vectors, dtype=np.float32), depth)
        return [
            [Hit(self.docids[r], float(s), self.vectors[r] if return_vector else None) for s, r in zip(ss, rr)]
            for ss, rr in zip(scores, rows)
        ]

    def search_candidates(self, vectors, depth):
        scores, rows = self.index.search(np.ascontiguousarray(vectors, dtype=np.float32), depth)
        return [Candidates([self.docids[r] for r in rr], ss, self.vectors[rr]) for ss, rr in zip(scores, rows)]


def test_scale_of_unit_vectors_is_exactly_one_and_of_long_ones_their_norms():
    rng = np.random.default_rng(0)
    C = rng.normal(size=(20, 8))
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    q = C[0] * (1 + 1e-7)
    assert SimilarityScale.of(q, C) == SimilarityScale(1.0, 1.0)
    assert SimilarityScale.of(q * 13.37, C * 9.012) == SimilarityScale(13.4, 9.01)
    scale = SimilarityScale(2.0, 4.0)
    assert (scale.temperature(0.5), scale.lr(0.2), scale.clip(1.0), scale.weight_decay(0.01)) == (4.0, 0.8, 0.5, 0.0025)


@pytest.mark.parametrize("rewriter", ["tour-hard", "tour-soft"])
def test_longer_vectors_give_the_same_search_under_the_rule(rewriter, searcher, dense_index, bm25_index, mini_scifact):
    from tour_pyserini.files import read_topics
    from tour_pyserini.index.faiss_index import read_vectors
    from tour_pyserini.teachers import TeacherContext, get_teacher

    vectors, docids = read_vectors(dense_index)
    topics = read_topics(mini_scifact["topics"])[:12]
    queries = searcher.encode([t.text for t in topics]).astype(np.float64)
    teacher = get_teacher("bm25", TeacherContext(index_dir=str(dense_index)))
    options = dict(
        depth=10, iterations=3, lr=0.5, lam=0.5, smoothing=0.05, retriever_temperature=0.05, early_stop=False
    )

    def run(scale_rule: str, s_q: float, s_c: float):
        tour = get_rewriter(rewriter, teacher=teacher, similarity_scale=scale_rule, **options)
        index = ArrayIndex(vectors, docids, searcher.docstore, s_c)
        batch = QueryBatch([t.qid for t in topics], [t.text for t in topics], queries * s_q)
        return [[h.docid for h in r.hits] for r in tour.rewrite(batch, index, hits=30)]

    unit = run("norms", 1.0, 1.0)
    assert unit == run("fixed", 1.0, 1.0)  # unit-length vectors: the rule changes nothing
    assert run("norms", S_Q, S_C) == unit
    assert run("fixed", S_Q, S_C) != unit  # without it, the same numbers mean another search
