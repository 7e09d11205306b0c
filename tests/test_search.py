"""TourSearcher over a real Faiss index of real SciFact abstracts, and the BM25 searcher over Lucene."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tour_pyserini.errors import UserError
from tour_pyserini.eval import evaluate
from tour_pyserini.files import read_qrels, read_topics
from tour_pyserini.files.sameness import diff_runs
from tour_pyserini.index import DocStore, IndexMeta, MissingIndexError
from tour_pyserini.rewriters import Identity, get_rewriter
from tour_pyserini.search import Bm25Searcher, DimensionMismatchError, TourSearcher

pytestmark = pytest.mark.slow


def test_index_layout_and_docstore(dense_index, mini_scifact):
    meta = IndexMeta.read(dense_index)
    assert meta.kind == "dense" and meta.num_docs == mini_scifact["num_docs"] and meta.dimension == 384
    assert meta.encoder["pooling"] == "mean" and meta.encoder["l2_norm"] is True
    assert len((dense_index / "docid").read_text().split()) == meta.num_docs
    store = DocStore(dense_index / "docstore.sqlite")
    assert len(store) == meta.num_docs
    first = (dense_index / "docid").read_text().split()[0]
    doc = store[first]
    assert doc.docid == first and doc.title and doc.text
    with pytest.raises(UserError, match="not-a-doc"):
        store.get([first, "not-a-doc"])


def test_docstore_lookups_from_many_threads_at_once(dense_index):
    """A server's and a batch search's threads share one store: every lookup still gets its own documents."""
    store = DocStore(dense_index / "docstore.sqlite")
    docids = (dense_index / "docid").read_text().split()
    chunks = [docids[i : i + 20] for i in range(0, len(docids), 20)] * 10
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(store.get, chunks))
    assert [[d.docid for d in docs] for docs in got] == chunks


def test_document_vectors_are_unit_length(searcher, mini_scifact):
    topic = read_topics(mini_scifact["topics"])[0]
    hits = searcher.search_vectors(searcher.encode([topic.text]), 5, return_vector=True)[0]
    norms = [np.linalg.norm(h.vector) for h in hits]
    assert np.allclose(norms, 1.0, atol=1e-5)
    q = searcher.encode([topic.text])[0]
    assert np.allclose([q @ h.vector for h in hits], [h.score for h in hits], atol=1e-5)


def test_candidate_arrays_are_the_hits_of_the_same_search(searcher, mini_scifact):
    texts = [t.text for t in read_topics(mini_scifact["topics"])][:5]
    vectors = searcher.encode(texts)
    hits = searcher.search_vectors(vectors, 20, return_vector=True)
    arrays = searcher.search_candidates(vectors, 20)
    for ranking, found in zip(hits, arrays):
        assert found.docids == [h.docid for h in ranking]
        assert found.scores.tolist() == [h.score for h in ranking]
        assert np.array_equal(found.vectors, np.stack([h.vector for h in ranking]))


def test_search_matches_pyserini_faiss_searcher_exactly(searcher, mini_scifact):
    topics = read_topics(mini_scifact["topics"])
    texts, qids = [t.text for t in topics], [t.qid for t in topics]
    ours = searcher.batch_search(texts, qids, k=50)
    theirs = searcher.faiss.batch_search(texts, qids, k=50)  # Pyserini's own encoding and search
    # texts of one length are encoded together (vectors within ~1e-7 of Pyserini's one at a time)
    diff = diff_runs(
        {q: {h.docid: h.score for h in hits} for q, hits in ours.items()},
        {q: {r.docid: r.score for r in hits} for q, hits in theirs.items()},
    )
    assert diff.same, diff.summary()
    one = searcher.search(texts[0], k=50)  # alone: Pyserini's vector bit for bit, so its ranking exactly
    assert [(h.docid, h.score) for h in one] == [(r.docid, r.score) for r in theirs[qids[0]]]


def test_texts_of_one_length_are_encoded_together_as_pyserini_encodes_each(searcher, mini_scifact):
    import torch

    from tour_pyserini.encoders.query import same_length_groups

    texts = [t.text for t in read_topics(mini_scifact["topics"])]
    texts += [texts[0]]  # a repeat: at least one group of two
    tokenizer = searcher.faiss.query_encoder.tokenizer
    groups = same_length_groups(tokenizer, texts)
    assert sorted(i for g in groups for i in g) == list(range(len(texts)))
    assert any(len(g) > 1 for g in groups)
    for group in groups:
        assert len({len(tokenizer(texts[i])["input_ids"]) for i in group}) == 1
    with torch.inference_mode():
        each = np.vstack([searcher.faiss.query_encoder.encode(t) for t in texts])
    together = searcher.encode(texts)
    np.testing.assert_allclose(together, each, rtol=0, atol=1e-6)
    assert np.array_equal(searcher.encode(texts[:1])[0], each[0])  # alone: Pyserini's vector bit for bit


def test_dense_effectiveness_on_the_fixture(searcher, mini_scifact):
    """Mean pooling + L2 norm is what makes MiniLM work; a wrong pooling drops this far."""
    topics = read_topics(mini_scifact["topics"])
    results = searcher.batch_search([t.text for t in topics], [t.qid for t in topics], k=100)
    run = {qid: {h.docid: h.score for h in hits} for qid, hits in results.items()}
    ndcg = evaluate(read_qrels(mini_scifact["qrels"]), run, ["nDCG@10"]).means["nDCG@10"]
    assert ndcg > 0.7  # measured 0.8 on this slice


def test_retrieve_fills_traces(searcher, mini_scifact):
    topics = read_topics(mini_scifact["topics"])[:3]
    results = searcher.retrieve([t.text for t in topics], [t.qid for t in topics], k=10)
    assert [r.qid for r in results] == [t.qid for t in topics]
    for r in results:
        assert len(r.hits) == 10
        assert r.trace.seconds["encode"] > 0 and r.trace.seconds["search"] > 0
        assert r.trace.iterations == 0 and r.trace.teacher_calls == 0


def test_k_beyond_the_collection_returns_every_document_once(searcher, mini_scifact):
    hits = searcher.search("protein folding", k=mini_scifact["num_docs"] + 50)
    assert len(hits) == mini_scifact["num_docs"] == len({h.docid for h in hits})


def test_rewriter_registry():
    assert isinstance(get_rewriter("none"), Identity)
    with pytest.raises(ValueError, match="unknown rewriter .tuor.; choose one of: avg-prf, dart, none, refit, rerank"):
        get_rewriter("tuor")


def test_bad_input_errors(searcher, tmp_path):
    with pytest.raises(ValueError, match="query 'q' has empty text"):
        searcher.search("   ")
    with pytest.raises(DimensionMismatchError, match="do not match the index dimension 384"):
        searcher.search_vectors(np.ones((1, 768), dtype=np.float32), 5)
    with pytest.raises(ValueError, match="NaN or infinite"):
        searcher.search_vectors(np.full((1, 384), np.nan, dtype=np.float32), 5)
    with pytest.raises(MissingIndexError, match="does not exist"):
        TourSearcher.from_index(tmp_path / "nope")


def test_encoder_dimension_must_match_the_index(tmp_path):
    """A real 8-d Faiss index: the 384-d bundled encoder is refused with both sizes named."""
    import faiss

    index = faiss.IndexFlatIP(8)
    index.add(np.eye(8, dtype=np.float32))
    faiss.write_index(index, str(tmp_path / "index"))
    (tmp_path / "docid").write_text("".join(f"d{i}\n" for i in range(8)))
    with pytest.raises(DimensionMismatchError, match="makes 384-d vectors but index .* holds 8-d vectors"):
        TourSearcher.from_index(tmp_path)


def test_bm25_searcher(bm25_index, dense_index, mini_scifact):
    bm25 = Bm25Searcher.from_index(bm25_index)
    topics = read_topics(mini_scifact["topics"])
    results = bm25.retrieve([t.text for t in topics], [t.qid for t in topics], k=100)
    assert all(0 < len(r.hits) <= 100 for r in results)  # BM25 only returns documents sharing a term
    assert all(np.all(np.diff([h.score for h in r.hits]) <= 0) for r in results)
    run = {r.qid: {h.docid: h.score for h in r.hits} for r in results}
    assert evaluate(read_qrels(mini_scifact["qrels"]), run, ["nDCG@10"]).means["nDCG@10"] > 0.6
    with pytest.raises(MissingIndexError, match="dense index, not a Lucene one"):
        Bm25Searcher.from_index(dense_index)
    with pytest.raises(MissingIndexError, match="BM25 index, not a dense one"):
        TourSearcher.from_index(bm25_index)


def test_search_leaves_the_encoder_threads_alone(searcher):
    """faiss and torch can share OpenMP: a 1-thread search must not drop teachers and encoders to 1 thread."""
    import torch

    before = torch.get_num_threads()
    searcher.search("protein folding", k=5)
    assert torch.get_num_threads() == before


def test_retrieve_vectors_runs_any_rewriter_on_precomputed_vectors(searcher, mini_scifact):
    from tour_pyserini.rewriters.prf import Rocchio

    topics = read_topics(mini_scifact["topics"])[:6]
    texts, qids = [t.text for t in topics], [t.qid for t in topics]
    vectors = searcher.encode(texts)
    for rewriter in (None, Rocchio(prf_depth=5)):
        encoded = searcher.retrieve(texts, qids, 20, rewriter=rewriter)
        precomputed = searcher.retrieve_vectors(texts, qids, vectors, 20, rewriter=rewriter)
        assert [[h.docid for h in r.hits] for r in encoded] == [[h.docid for h in r.hits] for r in precomputed]
        assert all(r.trace.seconds["encode"] > 0 for r in encoded)  # one trace per query, encoding included
        assert all(r.trace.seconds["encode"] == 0 for r in precomputed)
    assert isinstance(searcher.rewriter, Identity)  # a per-call rewriter never replaces the searcher's own


def test_batch_search_threads_apply_to_that_call_only(searcher):
    searcher.batch_search(["protein folding"], ["q1"], k=5, threads=2)
    assert searcher.threads == 1


def test_both_searchers_speak_pyserinis_k(searcher, bm25_index):
    """``search(query, k)`` and ``batch_search(queries, qids, k, threads)`` on both searchers, as Pyserini's
    ``FaissSearcher`` and ``LuceneSearcher`` spell them."""
    from tour_pyserini.search import Bm25Searcher

    bm25 = Bm25Searcher.from_index(bm25_index)
    for engine in (searcher, bm25):
        hits = engine.search("protein folding", 7)
        docids = [h.docid for h in hits]
        assert len(hits) == 7
        assert [h.docid for h in engine.batch_search(["protein folding"], ["q1"], 7, 1)["q1"]] == docids


@pytest.mark.parametrize("k", [0, -3, "3", 2.5, True])
def test_a_k_that_is_not_a_positive_integer_is_one_line_on_both_searchers(searcher, bm25_index, k):
    """Lucene's k=0 was a Java exception and its k="3" or 2.5 searched anyway, TourSearcher's k="3" a TypeError:
    both searchers share one check."""
    bm25 = Bm25Searcher.from_index(bm25_index)
    for engine in (searcher, bm25):
        with pytest.raises(UserError, match=rf"^k must be a positive integer, got {re.escape(repr(k))}$"):
            engine.search("protein folding", k)
        with pytest.raises(UserError, match="k must be a positive integer"):
            engine.batch_search(["protein folding"], ["q1"], k=k)


@pytest.mark.slow
def test_a_search_command_checks_each_input_once(dense_index, mini_scifact, tmp_path, monkeypatch):
    """The outputs once, each batch's queries once, each batch's vectors once where they come in (plus the index's
    own check of what each search is asked), the search planned once."""
    import tour_pyserini.commands.search as command
    import tour_pyserini.files.resumable as resumable
    import tour_pyserini.search.searcher as searcher

    calls: dict[str, int] = {}

    def counted(module, name):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counted(resumable, "check_outputs")
    counted(searcher, "check_queries")
    counted(command, "plan")
    counted(searcher.TourSearcher, "_check_vectors")
    topics = mini_scifact["topics"]
    command.main(
        [
            "--index",
            str(dense_index),
            "--topics",
            str(topics),
            "--batch-size",
            "16",
            "--hits",
            "10",
            "--output",
            str(tmp_path / "run.trec"),
            "--trace",
            str(tmp_path / "trace.jsonl"),
        ]
    )
    batches = -(-len(topics.read_text().splitlines()) // 16)
    # each batch: its encoded vectors, then the one search of the retriever's ranking
    assert calls == {"check_outputs": 1, "plan": 1, "check_queries": batches, "_check_vectors": 2 * batches}
