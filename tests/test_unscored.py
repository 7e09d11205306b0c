"""A teacher that gives no score for some pairs (an API answering nothing usable): those pairs rank below the
scored ones, a query it scored none of keeps the retriever's ranking and says so, and a search in which it
scored most pairs none stops, resumable, unless told to go on."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
import pytest
from openai_server import start_server, url

from tour_pyserini.commands.search import main as search_main
from tour_pyserini.errors import UserError
from tour_pyserini.files import read_qrels, read_topics
from tour_pyserini.results import StopReason
from tour_pyserini.rewriters import Identity
from tour_pyserini.rewriters.rerank import Rerank
from tour_pyserini.rewriters.tour import TourSoft
from tour_pyserini.rewriters.updates import fill_unscored
from tour_pyserini.teachers import ScoreRequest, Teacher
from tour_pyserini.teachers.oracle import OracleTeacher


def test_fill_unscored_puts_missing_scores_one_below_the_lowest():
    np.testing.assert_array_equal(fill_unscored(np.array([2.0, np.nan, -1.5, np.nan])), [2.0, -2.5, -1.5, -2.5])
    np.testing.assert_array_equal(fill_unscored(np.array([0.5, 1.0])), [0.5, 1.0])
    assert np.isnan(fill_unscored(np.array([np.nan, np.nan]))).all()


class Patchy(Teacher):
    """The oracle's grades, but no score (NaN) for every pair of the ``silent`` queries and for every second
    candidate of the others."""

    needs_text = False
    label = "patchy"

    def __init__(self, oracle: Teacher, silent: set[str]):
        self.oracle, self.silent = oracle, silent

    @classmethod
    def from_spec(cls, argument, context):
        raise NotImplementedError

    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        out = []
        for request, scores in zip(requests, self.oracle.score(requests)):
            scores = np.array(scores, dtype=np.float64)
            scores[:: 1 if request.qid in self.silent else 2] = np.nan
            out.append(scores + np.arange(len(scores)) * -1e-3)  # no ties: the teacher's order is one order
        return out


@pytest.mark.slow
@pytest.mark.parametrize("rewriter", [lambda t: Rerank(t, depth=10), lambda t: TourSoft(t, depth=10, iterations=2)])
def test_unscored_pairs_rank_below_and_a_query_without_scores_keeps_the_retriever_ranking(
    rewriter, searcher, mini_scifact
):
    topics = read_topics(mini_scifact["topics"])[:4]
    texts, qids = [t.text for t in topics], [t.qid for t in topics]
    teacher = Patchy(OracleTeacher(read_qrels(mini_scifact["qrels"])), {qids[0]})
    base = searcher.retrieve(texts, qids, 20, rewriter=Identity())
    got = searcher.retrieve(texts, qids, 20, rewriter=rewriter(teacher))
    silent = got[0]
    assert [(h.docid, h.score) for h in silent.hits] == [(h.docid, h.score) for h in base[0].hits]
    assert (
        silent.trace.stop_reason == StopReason.NOT_RERANKED
        and silent.trace.unscored >= 10
        and not silent.trace.judgments
    )
    for result in got[1:]:
        assert result.trace.stop_reason != StopReason.NOT_RERANKED and result.trace.unscored > 0
        head = [h.docid for h in result.hits[:10]]
        judged = [d in result.trace.judgments for d in head]
        assert judged == sorted(judged, reverse=True)  # every scored candidate above every unscored one


def _search(dense_index, topics, out, server, *extra):
    search_main(
        [
            "--index",
            str(dense_index),
            "--topics",
            str(topics),
            "--output",
            str(out),
            "--hits",
            "10",
            "--batch-size",
            "2",
            "--rewriter",
            "rerank",
            "--depth",
            "5",
            "--teacher",
            f"openai:{url(server)}",
            "--teacher-model",
            "judge-1",
            "--teacher-judge",
            "logprobs",
            *extra,
        ]
    )


@pytest.mark.slow
def test_a_search_whose_teacher_scores_nothing_stops_resumable_unless_allowed(
    dense_index, mini_scifact, tmp_path, capsys
):
    lines = mini_scifact["topics"].read_text().splitlines(keepends=True)
    first, topics = tmp_path / "first.tsv", tmp_path / "topics.tsv"
    first.write_text("".join(lines[:2]))
    topics.write_text("".join(lines[:4]))
    server = start_server()
    try:
        store = tmp_path / "scores.sqlite"
        _search(dense_index, first, tmp_path / "first.trec", server, "--score-store", str(store))
        reference = tmp_path / "reference.trec"
        _search(dense_index, topics, reference, server)
        server.body = "{}"  # the server now answers nothing usable: the first batch is in the store, the second not
        out = tmp_path / "run.trec"
        with pytest.raises(
            UserError,
            match=r"teacher openai:judge-1 gave no score for 10 of the 10 pairs it was "
            r"asked in a batch \(2 of its 2 queries would keep the retriever's "
            r"order\); the search stops, .*run.trec.partial keeps 2 finished "
            r"queries: run the same command again",
        ):
            _search(dense_index, topics, out, server, "--score-store", str(store))
        assert not out.exists()
        server.body = None
        capsys.readouterr()
        _search(dense_index, topics, out, server, "--score-store", str(store))
        assert "resuming" in capsys.readouterr().out
        assert out.read_bytes() == reference.read_bytes()

        server.body = "{}"
        plain, allowed, trace = tmp_path / "plain.trec", tmp_path / "allowed.trec", tmp_path / "trace.jsonl"
        search_main(
            [
                "--index",
                str(dense_index),
                "--topics",
                str(topics),
                "--output",
                str(plain),
                "--hits",
                "10",
                "--batch-size",
                "2",
            ]
        )
        _search(dense_index, topics, allowed, server, "--allow-unscored", "--trace", str(trace))
        assert allowed.read_text() == plain.read_text()  # the retriever's ranking and scores, under the same tag
        records = [json.loads(line) for line in trace.read_text().splitlines()]
        assert all(r["stop_reason"] == StopReason.NOT_RERANKED and r["unscored"] == 5 for r in records)
        assert "pairs without a score 20, not re-ranked 4/4" in capsys.readouterr().out
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_a_teacher_with_oracle_in_its_path_is_no_oracle(dense_index, mini_scifact, cross_encoder_dir, tmp_path):
    import shutil

    model = tmp_path / "nq-oracle-ce"
    shutil.copytree(cross_encoder_dir, model)
    topics = tmp_path / "topics.tsv"
    topics.write_text("".join(mini_scifact["topics"].read_text().splitlines(keepends=True)[:2]))
    out = tmp_path / "run.trec"
    search_main(
        [
            "--index",
            str(dense_index),
            "--topics",
            str(topics),
            "--output",
            str(out),
            "--hits",
            "5",
            "--rewriter",
            "rerank",
            "--depth",
            "5",
            "--teacher",
            f"cross-encoder:{model}",
        ]
    )
    assert {line.split()[-1] for line in out.read_text().splitlines()} == {"tour_pyserini"}


@pytest.mark.slow
def test_ttt_rewards_skip_unscored_pairs_and_refuse_a_teacher_that_scored_most_none(
    searcher, dense_index, mini_scifact
):
    from tour_pyserini.ttt.allocation import Pair
    from tour_pyserini.ttt.pipeline import judge_rewards
    from tour_pyserini.ttt.rewards import TaskSource

    topics = read_topics(mini_scifact["topics"])[:4]
    oracle = OracleTeacher(read_qrels(mini_scifact["qrels"]))
    source = TaskSource("mini", str(dense_index), str(mini_scifact["topics"]))
    pairs = [Pair(0, t.qid, rank) for t in topics for rank in range(4)]
    rewards = judge_rewards(searcher, Patchy(oracle, set()), topics, pairs, source, max_depth=4)
    assert rewards.num_pairs == 8  # every second candidate has no score: no reward, not a made-up one
    with pytest.raises(UserError, match="teacher patchy gave no score for 10 of the 16 pairs it was asked"):
        judge_rewards(searcher, Patchy(oracle, {topics[0].qid}), topics, pairs, source, max_depth=4)
