"""--score-store: searches that share a store score each (query, document) pair once and rank as without it."""

from __future__ import annotations

import json
import sqlite3

import pytest

from tour_pyserini.errors import UserError
from tour_pyserini.search.__main__ import main as search_main
from tour_pyserini.teachers import ScoreStore
from tour_pyserini.teachers.cross_encoder import CrossEncoderTeacher

pytestmark = pytest.mark.slow


def stored_pairs(path) -> int:
    return sqlite3.connect(path).execute("SELECT COUNT(*) FROM scores").fetchone()[0]


def test_tour_reuses_the_pairs_reranking_stored_and_ranks_the_same(dense_index, bm25_index, mini_scifact, tmp_path):
    store = tmp_path / "bm25.sqlite"
    base = ["--index", str(dense_index), "--topics", str(mini_scifact["topics"]), "--hits", "50", "--reranker", "bm25"]
    tour = ["--rewriter", "tour-soft", "--k", "10"]
    search_main([*base, "--rewriter", "rerank", "--k", "10", "--score-store", str(store),
                 "--output", str(tmp_path / "rerank.trec")])  # fmt: skip
    assert stored_pairs(store) == 10 * 40  # the fixture's 40 queries, 10 candidates each
    search_main([*base, *tour, "--output", str(tmp_path / "alone.trec"), "--trace", str(tmp_path / "alone.jsonl")])
    search_main([*base, *tour, "--score-store", str(store), "--output", str(tmp_path / "shared.trec"),
                 "--trace", str(tmp_path / "shared.jsonl")])  # fmt: skip
    assert (tmp_path / "shared.trec").read_text() == (tmp_path / "alone.trec").read_text()
    # the budget counts stored pairs too; only the pairs re-ranking never saw were added
    calls = sum(json.loads(line)["teacher_calls"] for line in (tmp_path / "shared.jsonl").read_text().splitlines())
    assert 10 * 40 < stored_pairs(store) == calls


def test_a_store_of_another_teacher_or_without_a_teacher_is_refused(dense_index, bm25_index, mini_scifact, tmp_path):
    store = tmp_path / "other.sqlite"
    ScoreStore(store, "cross-encoder:old max_length 128 weights 0123456789abcdef").close()
    base = ["--index", str(dense_index), "--topics", str(mini_scifact["topics"]), "--output", str(tmp_path / "r.trec")]
    with pytest.raises(UserError, match="holds scores of teacher"):
        search_main([*base, "--reranker", "bm25", "--rewriter", "rerank", "--k", "5", "--score-store", str(store)])
    with pytest.raises(UserError, match="--score-store keeps the scores of a --reranker"):
        search_main([*base, "--rewriter", "rocchio", "--score-store", str(tmp_path / "none.sqlite")])
    assert not (tmp_path / "r.trec").exists()


def test_a_cross_encoders_fingerprint_names_its_weights_and_length(cross_encoder_dir):
    short, full = CrossEncoderTeacher(cross_encoder_dir, max_length=128), CrossEncoderTeacher(cross_encoder_dir)
    assert short.fingerprint.startswith(short.label) and "max_length 128" in short.fingerprint
    assert short.fingerprint != full.fingerprint
    assert short.fingerprint.split("weights ")[1] == full.fingerprint.split("weights ")[1]  # the same weights' hash
