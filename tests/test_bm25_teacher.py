"""The vectorised BM25 teacher: Lucene's formula against hand-computed values, and Anserini's own scores."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tour_pyserini.errors import UserError
from tour_pyserini.teachers import ScoreRequest
from tour_pyserini.teachers.bm25_math import (
    byte4_to_int,
    document_scores,
    idf,
    int_to_byte4,
    norm_inverse_table,
    term_scores,
)


@pytest.mark.parametrize(
    "length, norm, decoded",
    [
        (0, 0, 0),
        (23, 23, 23),  # below 24 tokens the norm is the length itself
        (24, 24, 24),
        (31, 31, 31),  # 24 + 7: still exact (three mantissa bits, no shift)
        (100, 57, 96),  # 100 - 24 = 76 = 0b1001100: mantissa 0b1001, shift 3 -> 24 + (4 << 3 | 1); 72 + 24
        (103, 57, 96),  # the same bucket
        (104, 58, 104),
        (1000, 87, 984),  # 976 = 0b1111010000: mantissa 0b1111, shift 6 -> 24 + (7 << 3 | 7); 960 + 24
    ],
)
def test_length_norm_hand_computed(length, norm, decoded):
    assert int_to_byte4([length]).tolist() == [norm]
    assert byte4_to_int([norm]).tolist() == [decoded]


def test_length_norm_round_trips_every_byte_and_never_rounds_up():
    every = np.arange(256)
    assert (int_to_byte4(byte4_to_int(every)) == every).all()
    lengths = np.arange(5000)
    decoded = byte4_to_int(int_to_byte4(lengths))
    assert (decoded <= lengths).all() and (np.diff(decoded) >= 0).all()
    with pytest.raises(ValueError, match="non-negative"):
        int_to_byte4([-1])


def test_idf_hand_computed():
    # log(1 + (10 - 1 + 0.5) / 1.5) = log(7.333...); a term in every document: log(1 + 0.5 / 10.5)
    assert np.allclose(idf(np.array([1, 10]), 10), [1.9924301, 0.0465200], atol=1e-6)
    assert idf(np.array([1]), 10).dtype == np.float32


def test_norm_inverse_table_hand_computed():
    table = norm_inverse_table(sum_total_tf=1000, doc_count=10)  # avgdl 100
    assert table.dtype == np.float32 and table.shape == (256,)
    # 1 / (0.9 (0.6 + 0.4 dl / 100)) at dl = 10 (norm 10) and dl = 96 (norm 57)
    assert np.isclose(table[10], 1 / 0.576, rtol=1e-6)
    assert np.isclose(table[57], 1 / (0.9 * 0.984), rtol=1e-6)


def test_term_scores_are_bm25_saturation():
    # weight * tf / (tf + 1 / norm_inverse): 2 * 3 / (3 + 2) = 1.2; no occurrence scores exactly 0
    assert np.allclose(term_scores(np.array([2.0, 2.0]), np.array([3, 0]), np.array([0.5, 0.5])), [1.2, 0.0])
    assert term_scores(np.array([2.0]), np.array([0]), np.array([0.5]))[0] == 0.0


def test_document_scores_sum_per_document_with_anserini_rounding():
    scores = np.array([1.5, 2.25, 0.5], dtype=np.float32)
    assert document_scores(scores, np.array([0, 0, 2]), 3).tolist() == [3.75, 0.0, 0.5]
    # 1 + 2^-23 is a float, but Anserini's constant 1 is added in float and taken away again: 2 + 2^-23
    # rounds to 2 (float spacing 2^-22 there), so the score it returns is exactly 1
    assert document_scores(np.array([1 + 2**-23], dtype=np.float32), np.array([0]), 1).tolist() == [1.0]


@pytest.mark.slow
def test_length_norm_equals_lucenes_small_float():
    from tour_pyserini._java import import_pyserini

    small_float = import_pyserini("pyserini.pyclass").autoclass("org.apache.lucene.util.SmallFloat")
    lengths = list(range(3000)) + [2**k + d for k in range(12, 31) for d in (-1, 0, 1)]
    lucene = [small_float.intToByte4(n) & 0xFF for n in lengths]
    assert int_to_byte4(lengths).tolist() == lucene
    assert byte4_to_int(np.arange(256)).tolist() == [
        small_float.byte4ToInt(b if b < 128 else b - 256) for b in range(256)
    ]


@pytest.fixture(scope="module")
def teachers(bm25_index):
    from tour_pyserini.teachers.bm25 import AnseriniBm25Teacher, Bm25Teacher

    return Bm25Teacher(bm25_index), AnseriniBm25Teacher(bm25_index)


@pytest.mark.slow
def test_term_matrix_is_the_lucene_index(bm25_index):
    from tour_pyserini._java import import_pyserini
    from tour_pyserini.index.bm25_matrix import MATRIX_FILE, TermMatrix

    assert (bm25_index / MATRIX_FILE).exists()  # written when the index was built
    matrix = TermMatrix.load(bm25_index / MATRIX_FILE)
    reader = import_pyserini("pyserini.index.lucene").LuceneIndexReader(str(bm25_index))
    stats = reader.stats()
    assert (matrix.doc_count, matrix.sum_total_tf, len(matrix.terms)) == (
        stats["non_empty_documents"],
        stats["total_terms"],
        stats["unique_terms"],
    )
    for row in (0, 7, len(matrix.docids) - 1):
        vector = reader.get_document_vector(matrix.docids[row])
        stored = matrix.tf[row]
        assert {matrix.terms[j]: int(f) for j, f in zip(stored.indices, stored.data)} == vector
        assert int_to_byte4([sum(vector.values())])[0] == matrix.norms[row]  # Lucene's norm: the token count
    for term in ("cell", matrix.terms[0], matrix.terms[-1]):
        df, _ = reader.get_term_counts(term, analyzer=None)
        assert matrix.df[matrix.terms.index(term)] == df


def _requests(bm25_index, mini_scifact, teacher):
    """Every fixture query with its BM25 top 20 and 10 random documents, and three queries made to be hard."""
    from tour_pyserini.files import read_topics
    from tour_pyserini.search import Bm25Searcher

    topics = read_topics(mini_scifact["topics"])
    ranked = Bm25Searcher.from_index(bm25_index).retrieve([t.text for t in topics], [t.qid for t in topics], 20)
    docids, rng = list(teacher.rows), random.Random(0)
    requests = [
        ScoreRequest(t.qid, t.text, [h.docid for h in r.hits] + rng.sample(docids, 10)) for t, r in zip(topics, ranked)
    ]
    top = requests[0].docids
    return requests + [
        ScoreRequest("repeated", "cell cells Cell, cell death in the cell", top),  # the term 'cell' five times
        ScoreRequest("absent", "zyxwvutsr cell", top),  # a term no document holds
        ScoreRequest("nothing", "zyxwvutsr the of", top),  # no query term in any candidate: all 0
    ]


@pytest.mark.slow
def test_scores_equal_anserinis_compute_query_document_score(teachers, bm25_index, mini_scifact):
    fast, anserini = teachers
    requests = _requests(bm25_index, mini_scifact, fast)
    assert fast.query_terms(["cell cells Cell, cell death in the cell"])[0]["cell"] == 5
    ours, theirs = fast.score(requests), anserini.score(requests)
    assert sum(len(s) for s in ours) > 1000
    for request, a, b in zip(requests, ours, theirs):
        assert np.abs(a - b).max() <= 1e-5, request.qid
    assert (ours[-1] == 0).all() and (ours[-3] > 0).any()
    assert np.abs(ours[-3] - ours[-2]).max() > 1  # five occurrences weigh five times in the query


@pytest.mark.slow
def test_one_call_for_many_queries_equals_one_call_each(teachers, bm25_index, mini_scifact):
    fast, _ = teachers
    requests = _requests(bm25_index, mini_scifact, fast)
    together = fast.score(requests)
    for request, scores in zip(requests, together):
        assert fast.score([request])[0].tolist() == scores.tolist()
    assert fast.score([]) == [] and fast.score([ScoreRequest("q", "cell", [])])[0].shape == (0,)


@pytest.mark.slow
def test_queries_analysed_together_equal_queries_analysed_alone(teachers, mini_scifact):
    from tour_pyserini.files import read_topics
    from tour_pyserini.teachers.bm25 import SEPARATOR

    fast, _ = teachers
    queries = [t.text for t in read_topics(mini_scifact["topics"])] + ["", "the of", "Line\nbreaks, and 1,000 cells"]
    alone = [list(fast.analyzer.analyze(q).toArray()) for q in queries]
    assert fast.analyse(queries) == alone and sum(map(len, alone)) > 200
    assert fast.analyse([SEPARATOR]) == [[SEPARATOR]]  # the separator survives analysis unchanged
    tricky = [queries[0], f"a query about {SEPARATOR}s", queries[1]]  # holds the separator: analysed alone
    assert fast.analyse(tricky) == [list(fast.analyzer.analyze(q).toArray()) for q in tricky]


@pytest.mark.slow
def test_unknown_candidates_are_refused(teachers):
    with pytest.raises(UserError, match="'no-such-doc' is not in the BM25 index"):
        teachers[0].score([ScoreRequest("q", "cell", ["no-such-doc"])])


@pytest.mark.slow
def test_matrix_is_exported_on_first_use_and_after_a_rebuild(bm25_index, tmp_path):
    import shutil

    from tour_pyserini.index.bm25_matrix import MATRIX_FILE, TermMatrix
    from tour_pyserini.teachers.bm25 import Bm25Teacher

    index = tmp_path / "copy.bm25"
    shutil.copytree(bm25_index, index)
    (index / MATRIX_FILE).unlink()
    request = [ScoreRequest("q", "vitamin D deficiency", list(Bm25Teacher(bm25_index).rows)[:50])]
    expected = Bm25Teacher(bm25_index).score(request)[0]
    assert Bm25Teacher(index).score(request)[0].tolist() == expected.tolist()
    assert (index / MATRIX_FILE).exists()
    stale = TermMatrix.load(index / MATRIX_FILE)
    TermMatrix(**{**stale.__dict__, "commit": "segments_0", "doc_count": 1}).save(index / MATRIX_FILE)
    assert Bm25Teacher(index).score(request)[0].tolist() == expected.tolist()  # another commit: exported again


@pytest.mark.slow
def test_a_query_longer_than_lucenes_clause_limit_searches_as_the_teacher_scores_it(teachers, bm25_index):
    """5,000 words of SciFact abstracts (over 1,024 distinct terms, Lucene's default clause limit): the BM25
    search ranks, with the scores the vectorised teacher gives the same documents."""
    import json
    import random

    from conftest import SCIFACT

    from tour_pyserini.search.bm25 import Bm25Searcher
    from tour_pyserini.teachers import ScoreRequest

    with open(SCIFACT / "corpus.jsonl", encoding="utf-8") as f:
        words = [w for line in list(f)[:300] for w in json.loads(line)["text"].split()]
    query = " ".join(random.Random(0).choices(words, k=5000))
    assert len(set(teachers[0].query_terms([query])[0])) > 1024
    [result] = Bm25Searcher.from_index(bm25_index).retrieve([query], ["long"], k=5)
    assert len(result.hits) == 5
    request = ScoreRequest("long", query, [h.docid for h in result.hits])
    assert np.allclose(teachers[0].score([request])[0], [h.score for h in result.hits], atol=1e-3)


@pytest.mark.slow
def test_a_document_without_text_scores_zero_though_lucene_left_it_out(tmp_path):
    """Anserini's indexer skips an empty document (Cranfield has two), which a dense index still returns: the
    teacher scores it 0, as BM25 scores a document with no term; a docid of no collection is still refused."""
    import json

    from tour_pyserini.index.bm25 import write_bm25_index
    from tour_pyserini.index.build import build_index
    from tour_pyserini.teachers.bm25 import AnseriniBm25Teacher, Bm25Teacher

    docs = [("a", "cell membranes and bone density"), ("empty", ""), ("b", "bone density of the cell")]
    (tmp_path / "corpus.jsonl").write_text(
        "".join(json.dumps({"id": d, "title": "", "text": t}) + "\n" for d, t in docs)
    )
    index = tmp_path / "small.bm25"
    build_index(index, lambda out: write_bm25_index(tmp_path, out_dir=out))
    request = ScoreRequest("q", "bone density", ["a", "empty", "b"])
    scores = Bm25Teacher(index).score([request])[0]
    assert scores[1] == 0.0 and scores[0] > 0 and scores[2] > 0
    assert (
        scores[[0, 2]].tolist()
        == AnseriniBm25Teacher(index).score([ScoreRequest("q", "bone density", ["a", "b"])])[0].tolist()
    )
    with pytest.raises(UserError, match="'elsewhere' is not in the BM25 index"):
        Bm25Teacher(index).score([ScoreRequest("q", "bone", ["elsewhere"])])
