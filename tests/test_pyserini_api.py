"""TourSearcher speaks Pyserini's FaissSearcher API: its signatures, its return values (query vectors with the hits
for ``return_vector=True``), so that Pyserini's own PRF classes run on top of it."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from tour_pyserini._java import import_pyserini
from tour_pyserini.errors import UserError
from tour_pyserini.files import read_topics
from tour_pyserini.files.sameness import diff_runs
from tour_pyserini.rewriters.prf import AveragePrf, Rocchio
from tour_pyserini.search import TourSearcher

pytestmark = pytest.mark.slow


def faiss_module():
    return import_pyserini("pyserini.search.faiss")


def run_of(found: dict) -> dict:
    return {q: {h.docid: float(h.score) for h in hits} for q, hits in found.items()}


@pytest.fixture(scope="module")
def claims(mini_scifact):
    topics = read_topics(mini_scifact["topics"])[:12]
    return [t.text for t in topics], [t.qid for t in topics]


@pytest.mark.parametrize("method", ["search", "batch_search"])
def test_the_signatures_are_pyserinis(method):
    """Pyserini's parameters by its names, positions, kinds and defaults; ``threads`` defaults to the searcher's own
    (None) instead of 1, which changes no result; anything of ours comes after them, keyword-only."""
    theirs = list(inspect.signature(getattr(faiss_module().FaissSearcher, method)).parameters.values())
    ours = list(inspect.signature(getattr(TourSearcher, method)).parameters.values())
    shape = [(p.name, p.kind, None if p.name == "threads" else p.default) for p in theirs]
    assert [(p.name, p.kind, None if p.name == "threads" else p.default) for p in ours[: len(theirs)]] == shape
    assert {p.name: p.default for p in theirs}["threads"] == 1 and {p.name: p.default for p in ours}["threads"] is None
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in ours[len(theirs) :])


def test_return_vector_gives_what_faiss_searcher_gives(searcher, claims):
    """The query vectors with the hits, each a Pyserini ``PrfDenseSearchResult`` with its index vector: one text
    bit for bit as Pyserini's own searcher over the same index; a batch the same up to the encoder's batching
    (vectors within 1e-6)."""
    texts, qids = claims
    prf_result = faiss_module().PrfDenseSearchResult
    vector, hits = searcher.search(texts[0], 10, return_vector=True)
    their_vector, their_hits = searcher.faiss.search(texts[0], 10, return_vector=True)
    assert isinstance(vector, np.ndarray) and vector.shape == their_vector.shape == (1, searcher.dimension)
    assert np.array_equal(vector, their_vector)
    assert all(type(h) is prf_result for h in hits)
    assert [(h.docid, h.score) for h in hits] == [(h.docid, float(h.score)) for h in their_hits]
    assert all(np.array_equal(h.vectors, t.vectors) for h, t in zip(hits, their_hits))

    vectors, found = searcher.batch_search(texts, q_ids=qids, k=10, threads=1, return_vector=True)
    their_vectors, their_found = searcher.faiss.batch_search(texts, q_ids=qids, k=10, threads=1, return_vector=True)
    assert vectors.shape == their_vectors.shape == (len(texts), searcher.dimension)
    np.testing.assert_allclose(vectors, their_vectors, rtol=0, atol=1e-6)
    assert list(found) == list(their_found) == qids
    assert diff_runs(run_of(found), run_of(their_found)).same
    rows = {d: i for i, d in enumerate(searcher.faiss.docids)}
    for hits in found.values():
        assert all(type(h) is prf_result for h in hits)
        assert all(np.array_equal(h.vectors, searcher.faiss.index.reconstruct(rows[h.docid])) for h in hits)
    plain = searcher.batch_search(texts, qids, 10)
    assert run_of(plain) == run_of(found)


@pytest.mark.parametrize("name", ["DenseVectorRocchioPrf", "DenseVectorAveragePrf"])
def test_pyserinis_own_prf_runs_on_our_searcher_as_our_rewriter_does(searcher, claims, name):
    """Pyserini's PRF classes, fed by our ``return_vector`` output and searching with ``batch_search`` on vectors
    exactly as ``python -m pyserini.search.faiss --prf-method`` does, rank as our own rewriter."""
    texts, qids = claims
    if name == "DenseVectorRocchioPrf":
        prf, depth = faiss_module().DenseVectorRocchioPrf(alpha=0.9, beta=0.1, gamma=0.1, topk=3, bottomk=1), 5
        ours = Rocchio(prf_depth=5, alpha=0.9, beta=0.1, gamma=0.1, topk=3, bottomk=1)
    else:
        prf, depth = faiss_module().DenseVectorAveragePrf(), 3
        ours = AveragePrf(prf_depth=3)
    q_embs, candidates = searcher.batch_search(texts, qids, k=depth, return_vector=True)
    theirs = searcher.batch_search(prf.get_batch_prf_q_emb(qids, q_embs, candidates), qids, k=20)
    mine = {r.qid: r.hits for r in searcher.retrieve(texts, qids, 20, rewriter=ours)}
    assert [[h.docid for h in theirs[q]] for q in qids] == [[h.docid for h in mine[q]] for q in qids]
    np.testing.assert_allclose(
        [[h.score for h in theirs[q]] for q in qids], [[h.score for h in mine[q]] for q in qids], rtol=0, atol=1e-6
    )
    # one query at a time, as Pyserini's search command does with --batch-size 1
    emb_q, found = searcher.search(texts[0], k=depth, return_vector=True)
    prf_emb_q = np.expand_dims(prf.get_prf_q_emb(emb_q[0], found), axis=0).astype("float32")
    one = searcher.search(prf_emb_q, k=20)
    alone = searcher.retrieve(texts[:1], qids[:1], 20, rewriter=ours)[0].hits
    assert [h.docid for h in one] == [h.docid for h in alone]


def test_return_vector_carries_the_vectors_of_a_rewriters_final_hits(searcher, claims):
    """With a rewriter, the hits are its final ranking, each with its exact index vector, and the query vector is
    the one the search started from (searched again, it gives the same ranking)."""
    texts, qids = claims
    rocchio = TourSearcher(
        searcher.faiss, rewriter=Rocchio(prf_depth=5), docstore=searcher.docstore, query_encoder=searcher.query_encoder
    )
    vector, hits = rocchio.search(texts[0], k=15, return_vector=True)
    expected = searcher.retrieve(texts[:1], qids[:1], 15, rewriter=Rocchio(prf_depth=5))[0].hits
    assert [(h.docid, h.score) for h in hits] == [(h.docid, h.score) for h in expected]
    rows = {d: i for i, d in enumerate(searcher.faiss.docids)}
    assert all(np.array_equal(h.vectors, searcher.faiss.index.reconstruct(rows[h.docid])) for h in hits)
    assert [h.docid for h in rocchio.search(vector, k=15)] == [h.docid for h in hits]
    assert rocchio.search(texts[0], 15, remove_dups=True) == expected


def test_vector_queries_and_bad_queries(searcher, claims, bm25_index):
    texts, qids = claims
    vectors = searcher.encode(texts[:2])
    assert [h.docid for h in searcher.search(vectors[0], k=5)] == [h.docid for h in searcher.search(texts[0], k=5)]
    with pytest.raises(UserError, match="one query vector, got 2: use batch_search"):
        searcher.search(vectors, k=5)
    with pytest.raises(UserError, match="Pyserini's dict queries are not supported"):
        searcher.batch_search([{"text": texts[0]}], ["q1"], k=5)
    with pytest.raises(ValueError, match="2 query vectors but 1 qids"):
        searcher.batch_search(vectors, ["q1"], k=5)
    from tour_pyserini.rewriters.rerank import Rerank
    from tour_pyserini.teachers import TeacherContext, get_teacher

    teacher = get_teacher(f"bm25:{bm25_index}", TeacherContext())
    reranking = TourSearcher(
        searcher.faiss,
        rewriter=Rerank(teacher, depth=10),
        docstore=searcher.docstore,
        query_encoder=searcher.query_encoder,
    )
    with pytest.raises(UserError, match="asks a teacher about the query texts: search with texts, not vectors"):
        reranking.batch_search(vectors, qids[:2], k=5)
