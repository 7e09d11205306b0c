"""Rewriters on a real Faiss index of SciFact abstracts: Pyserini parity, invariants, oracle upper bounds."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_cli import run_module

from tour_pyserini.commands.search import main as search_main
from tour_pyserini.encoders import bundled_model_dir
from tour_pyserini.errors import UserError
from tour_pyserini.eval import evaluate
from tour_pyserini.files import read_qrels, read_topics
from tour_pyserini.files.runs import read_run
from tour_pyserini.files.sameness import diff_runs
from tour_pyserini.rewriters import Identity, get_rewriter
from tour_pyserini.rewriters.prf import AveragePrf, Rocchio
from tour_pyserini.rewriters.rerank import Rerank
from tour_pyserini.rewriters.tour import TourHard, TourSoft
from tour_pyserini.teachers import TeacherContext, get_teacher

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def topics(mini_scifact):
    return read_topics(mini_scifact["topics"])


@pytest.fixture(scope="module")
def bm25_teacher(dense_index, bm25_index):
    return get_teacher("bm25", TeacherContext(index_dir=str(dense_index)))


def run_with(searcher, rewriter, topics, hits=100, batch_size=None):
    batch_size = batch_size or len(topics)
    results = []
    for i in range(0, len(topics), batch_size):
        chunk = topics[i : i + batch_size]
        results += searcher.retrieve([t.text for t in chunk], [t.qid for t in chunk], hits, rewriter=rewriter)
    return results


def as_run(results):
    return {r.qid: {h.docid: h.score for h in r.hits} for r in results}


@pytest.mark.parametrize("method, rewriter", [("rocchio", "rocchio"), ("avg", "avg-prf")])
def test_prf_runs_equal_pyserini_cli(method, rewriter, dense_index, mini_scifact, tmp_path):
    ours, theirs = tmp_path / "ours.trec", tmp_path / "pyserini.trec"
    flags = ["--prf-depth", "5"] + (["--rocchio-bottomk", "1", "--rocchio-alpha", "0.8"] if method == "rocchio" else [])
    search_main(
        [
            "--index",
            str(dense_index),
            "--topics",
            str(mini_scifact["topics"]),
            "--output",
            str(ours),
            "--hits",
            "100",
            "--rewriter",
            rewriter,
            *flags,
        ]
    )
    proc = run_module(
        "tour_pyserini",
        "run-pyserini",
        "pyserini.search.faiss",
        "--index",
        str(dense_index),
        "--topics",
        str(mini_scifact["topics"]),
        "--encoder",
        str(bundled_model_dir()),
        "--encoder-class",
        "auto",
        "--pooling",
        "mean",
        "--l2-norm",
        "--output",
        str(theirs),
        "--hits",
        "100",
        "--prf-method",
        method,
        *flags,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Pyserini encodes one text at a time, we encode texts of one length together: the same run up to
    # ties within 1e-5 (a query's vector differs by about 1e-7)
    diff = diff_runs(read_run(ours), read_run(theirs))
    assert diff.same, diff.summary()


def test_prf_iterations_change_the_query(searcher, topics):
    once = as_run(run_with(searcher, Rocchio(prf_depth=5), topics))
    twice = as_run(run_with(searcher, Rocchio(prf_depth=5, iterations=2), topics))
    assert once != twice
    avg = run_with(searcher, AveragePrf(prf_depth=3), topics[:2])
    assert all(r.trace.iterations == 1 for r in avg)


def test_rerank_never_changes_recall_at_its_own_k(searcher, topics, bm25_teacher, mini_scifact):
    qrels = read_qrels(mini_scifact["qrels"])
    base = run_with(searcher, Identity(), topics)
    for k in (10, 20):
        reranked = run_with(searcher, Rerank(bm25_teacher, depth=k), topics)
        for b, r in zip(base, reranked):
            assert {h.docid for h in b.hits[:k]} == {h.docid for h in r.hits[:k]}
            assert [h.docid for h in b.hits[k:]] == [h.docid for h in r.hits[k:]]
            assert r.trace.teacher_calls == k
        metric = f"R@{k}"
        assert evaluate(qrels, as_run(reranked), [metric]).means == evaluate(qrels, as_run(base), [metric]).means
    assert as_run(reranked) != as_run(base)


@pytest.mark.parametrize("cls", [TourHard, TourSoft])
@pytest.mark.parametrize("preset", ["passage", "odqa"])
def test_batched_tour_equals_one_query_at_a_time(cls, preset, searcher, topics, bm25_teacher):
    rewriter = cls(bm25_teacher, preset=preset, depth=20)
    texts, qids = [t.text for t in topics], [t.qid for t in topics]
    vectors = searcher.encode(texts)
    # the rewriting loop: bit for bit the same in a batch as alone
    batched = searcher.retrieve_vectors(texts, qids, vectors, 100, rewriter=rewriter)
    alone = [
        searcher.retrieve_vectors(texts[i : i + 1], qids[i : i + 1], vectors[i : i + 1], 100, rewriter=rewriter)[0]
        for i in range(len(qids))
    ]
    # end to end: texts of one length are encoded together, so a batch's vectors may differ from a text
    # encoded alone by rounding (about 1e-7): the same steps, the same run up to ties within 1e-5
    encoded, encoded_alone = run_with(searcher, rewriter, topics), run_with(searcher, rewriter, topics, batch_size=1)
    for a, b, c, d in zip(batched, alone, encoded, encoded_alone):
        assert [h.docid for h in a.hits] == [h.docid for h in b.hits]
        assert [h.score for h in a.hits] == [h.score for h in b.hits]
        steps = [(r.trace.iterations, r.trace.teacher_calls, r.trace.stop_reason) for r in (a, b, c, d)]
        assert steps[0] == steps[1] and steps[2] == steps[3]
    diff = diff_runs(as_run(encoded), as_run(encoded_alone))
    assert diff.same, diff.summary()
    if preset == "odqa":  # T = 3: some queries stop before any update, others take steps
        iterations = {r.trace.iterations for r in batched}
        assert 0 in iterations and max(iterations) >= 1


@pytest.mark.parametrize("cls", [TourHard, TourSoft])
def test_oracle_tour_raises_recall_beyond_reranking(cls, searcher, topics, mini_scifact):
    """TOUR pulls relevant documents from outside the initial top-k; re-ranking at k cannot."""
    qrels = read_qrels(mini_scifact["qrels"])
    oracle = get_teacher(f"oracle:{mini_scifact['qrels']}")
    k = 10
    metric = [f"R@{k}"]
    base = evaluate(qrels, as_run(run_with(searcher, Identity(), topics)), metric).means[metric[0]]
    rerank = evaluate(qrels, as_run(run_with(searcher, Rerank(oracle, depth=k), topics)), metric).means[metric[0]]
    tour_run = as_run(run_with(searcher, cls(oracle, preset="odqa", depth=k), topics))
    tour = evaluate(qrels, tour_run, metric).means[metric[0]]
    assert rerank == pytest.approx(base)
    assert tour > base + 0.01


@pytest.mark.parametrize("cls", [TourHard, TourSoft])
def test_union_final_ranking_beats_both_at_no_extra_teacher_calls(cls, searcher, topics, mini_scifact):
    """Ranking every scored candidate: per query, an oracle's R@k is at least TOUR's and re-ranking's."""
    qrels = read_qrels(mini_scifact["qrels"])
    oracle = get_teacher(f"oracle:{mini_scifact['qrels']}")
    k, metric = 10, "R@10"
    paper = run_with(searcher, cls(oracle, preset="odqa", depth=k), topics)
    union = run_with(searcher, cls(oracle, preset="odqa", depth=k, final="union"), topics)
    rerank = run_with(searcher, Rerank(oracle, depth=k), topics)
    assert [u.trace.teacher_calls for u in union] == [p.trace.teacher_calls for p in paper]
    values = [evaluate(qrels, as_run(r), [metric]).per_query[metric] for r in (union, paper, rerank)]
    assert all(values[0][q] >= max(values[1][q], values[2][q]) for q in values[0])
    assert sum(values[0].values()) > sum(values[2].values())
    with pytest.raises(ValueError, match="needs the cache"):
        cls(oracle, final="union", use_cache=False)
    with pytest.raises(ValueError, match="^final must be one of search, union, got 'all'"):
        cls(oracle, final="all")


def test_traces_account_for_the_work(searcher, topics, bm25_teacher):
    results = run_with(searcher, TourHard(bm25_teacher, preset="odqa", depth=10, early_stop=False), topics[:5])
    for r in results:
        t = r.trace
        assert t.iterations == 3 and t.stop_reason == "max iterations" and len(t.losses) == 3
        assert 10 <= t.teacher_calls <= 40 and t.teacher_calls + t.cache_hits == 40  # 3 iterations + final list
        assert all(t.seconds[p] > 0 for p in ("encode", "search", "teacher", "update"))
    nocache = run_with(
        searcher, TourHard(bm25_teacher, preset="odqa", depth=10, early_stop=False, use_cache=False), topics[:5]
    )
    assert all(r.trace.teacher_calls == 40 and r.trace.cache_hits == 0 for r in nocache)
    assert as_run(nocache) == as_run(results)  # the cache changes cost, never results


def test_fixed_positives_and_lambda_ablations(searcher, topics, bm25_teacher):
    a = as_run(run_with(searcher, TourHard(bm25_teacher, depth=20, fixed_positives=3), topics[:10]))
    b = as_run(run_with(searcher, TourHard(bm25_teacher, depth=20), topics[:10]))
    assert a != b
    retriever_only = run_with(searcher, TourHard(bm25_teacher, depth=20, lam=0.0), topics[:10])
    for r in retriever_only:  # lambda 0: the final list is in retriever order
        assert all(x.score >= y.score for x, y in zip(r.hits, r.hits[1:]))
        scores = np.array([h.score for h in r.hits[:20]])
        assert np.all(np.diff(scores) <= 0)


def test_rewriter_errors(searcher, bm25_teacher, mini_scifact):
    with pytest.raises(ValueError, match="needs a teacher"):
        get_rewriter("tour-hard")
    with pytest.raises(ValueError, match=r"option\(s\) lr do not apply to --rewriter rocchio"):
        get_rewriter("rocchio", lr=0.2)
    with pytest.raises(ValueError, match=r"option\(s\) prf_depth do not apply to --rewriter tour-soft"):
        get_rewriter("tour-soft", teacher=bm25_teacher, prf_depth=3)
    with pytest.raises(UserError, match="^lam must be in"):
        TourHard(bm25_teacher, lam=1.5)
    with pytest.raises(ValueError, match="--preset must be one of passage, odqa, got 'phrase'"):
        TourHard(bm25_teacher, preset="phrase")
    with pytest.raises(UserError, match="^depth 10000 is larger than the index"):
        searcher.retrieve(["protein"], ["q1"], rewriter=TourSoft(bm25_teacher, depth=10_000))


def test_cli_tour_with_trace_and_oracle_label(dense_index, mini_scifact, tmp_path, capsys, caplog):
    out, trace = tmp_path / "tour.trec", tmp_path / "trace.jsonl"
    search_main(
        [
            "--index",
            str(dense_index),
            "--topics",
            str(mini_scifact["topics"]),
            "--output",
            str(out),
            "--hits",
            "50",
            "--rewriter",
            "tour-soft",
            "--teacher",
            f"oracle:{mini_scifact['qrels']}",
            "--depth",
            "10",
            "--iterations",
            "2",
            "--lr",
            "0.5",
            "--trace",
            str(trace),
        ]
    )
    captured = capsys.readouterr()
    assert "ORACLE teacher" in caplog.text and "teacher calls/query" in captured.out  # the log, wherever it is shown
    assert out.read_text().split("\n")[0].endswith(".oracle")
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert len(records) == len(read_topics(mini_scifact["topics"]))
    assert {"qid", "iterations", "teacher_calls", "cache_hits", "stop_reason", "seconds"} <= set(records[0])
    assert records[0]["teacher"] == "oracle"
