"""Qrels evaluation: hand-computed values, trec_eval -c semantics, and the CLI's outputs."""

from __future__ import annotations

import json
import logging
import math

import pytest

from tour_pyserini.commands.eval import main as eval_main
from tour_pyserini.eval import evaluate

QRELS = {"1": {"a": 1, "b": 2}, "2": {"c": 1}}


def test_known_values():
    run = {"1": {"x": 3.0, "b": 2.0, "a": 1.0}, "2": {"c": 1.0}}
    ev = evaluate(QRELS, run, ["RR@10", "R@2", "nDCG@10"])
    assert ev.per_query["RR@10"] == {"1": 0.5, "2": 1.0}
    assert ev.per_query["R@2"] == {"1": 0.5, "2": 1.0}
    # query 1: gains 0, 3 (grade 2), 1 at ranks 1..3; ideal 3, 1 (trec_eval: gain = grade)
    dcg = 2 / math.log2(3) + 1 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert ev.per_query["nDCG@10"]["1"] == pytest.approx(dcg / idcg)
    assert ev.means["RR@10"] == pytest.approx(0.75)


def test_queries_missing_from_the_run_count_as_zero():
    ev = evaluate(QRELS, {"2": {"c": 1.0}, "unjudged": {"z": 1.0}}, ["RR@10"])
    assert ev.per_query["RR@10"] == {"1": 0.0, "2": 1.0}
    assert ev.means["RR@10"] == 0.5 and ev.num_queries == 2


def test_no_common_queries_is_an_error():
    with pytest.raises(ValueError, match="no query in common"):
        evaluate(QRELS, {"9": {"a": 1.0}}, ["RR@10"])


def test_unknown_metric():
    with pytest.raises(ValueError, match="unknown metric 'foo@3'"):
        evaluate(QRELS, {"1": {"a": 1.0}}, ["foo@3"])


def test_cli_json_and_table(tmp_path, capsys):
    qrels, run = tmp_path / "q.txt", tmp_path / "r.trec"
    qrels.write_text("1 0 a 1\n1 0 b 2\n2 0 c 1\n")
    run.write_text("1 Q0 x 1 3.0 t\n1 Q0 b 2 2.0 t\n2 Q0 c 1 1.0 t\n")
    eval_main(["--qrels", str(qrels), "--run", str(run), "--metrics", "RR@10", "R@100", "--json"])
    assert json.loads(capsys.readouterr().out) == {"RR@10": 0.75, "R@100": 0.75}
    eval_main(["--qrels", str(qrels), "--run", str(run), "--metrics", "RR@10", "--per-query"])
    out = capsys.readouterr().out
    assert "r.trec  0.7500" in out and "1    0.5000" in out


def test_a_run_that_shares_no_document_with_the_qrels_is_named(tmp_path, caplog):
    qrels, ours, other = tmp_path / "q.txt", tmp_path / "ours.trec", tmp_path / "other.trec"
    qrels.write_text("1 0 a 1\n2 0 c 1\n")
    ours.write_text("1 Q0 a 1 3.0 t\n2 Q0 x 1 1.0 t\n")
    other.write_text("1 Q0 y 1 3.0 t\n2 Q0 z 1 1.0 t\n")  # another collection's docids
    with caplog.at_level(logging.WARNING, logger="tour_pyserini"):
        eval_main(["--qrels", str(qrels), "--run", str(ours), str(other), "--metrics", "RR@10"])
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [
        f"{other} shares no document with {qrels}, so every query scores 0 (a run of another collection?)"
    ]


@pytest.mark.slow
def test_equals_trec_eval_c_on_a_run_that_omits_queries(searcher, mini_scifact, tmp_path):
    """Real trec_eval (Anserini's, via Pyserini's wrapper) with -c -q on a real run missing a quarter of the queries."""
    import re

    from test_cli import run_module

    from tour_pyserini.files import read_qrels, read_topics
    from tour_pyserini.files.runs import read_run, write_run

    topics = read_topics(mini_scifact["topics"])
    kept = topics[: 3 * len(topics) // 4]
    results = searcher.batch_search([t.text for t in kept], [t.qid for t in kept], k=100)
    run_path = tmp_path / "partial.trec"
    write_run(run_path, results.items())
    measures = {"ndcg_cut_10": "nDCG@10", "recall_100": "R@100", "map": "AP", "recip_rank": "RR"}
    proc = run_module("tour_pyserini", "run-pyserini", "pyserini.eval.trec_eval", "-c", "-q",
                      *[a for m in measures for a in ("-m", m.replace("_cut_", "_cut.").replace("l_1", "l.1"))],
                      str(mini_scifact["qrels"]), str(run_path))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs: dict[tuple[str, str], float] = {}
    for name, qid, value in re.findall(r"^(\w+)\s+(\S+)\s+([0-9.]+)$", proc.stdout, flags=re.MULTILINE):
        theirs[(measures[name], qid)] = float(value)
    ours = evaluate(read_qrels(mini_scifact["qrels"]), read_run(run_path), list(measures.values()))
    assert ours.num_queries == len(topics)
    for metric in measures.values():
        assert round(ours.means[metric], 4) == theirs[(metric, "all")]
        for qid, value in ours.per_query[metric].items():
            if qid in results:
                assert round(value, 4) == theirs[(metric, qid)], (metric, qid)
            else:  # trec_eval -q prints no line for a missing query; -c counts it as 0 in "all"
                assert value == 0.0 and (metric, qid) not in theirs


def test_judge_is_built_once_and_scores_many_runs():
    from tour_pyserini.eval import QrelsJudge

    judge = QrelsJudge(QRELS, ["RR@10", "R@2"], qids=["1", "2"])
    runs = [{"1": {"a": 2.0, "x": 1.0}, "2": {"c": 1.0}}, {"1": {"x": 2.0, "a": 1.0}}]
    for run in runs:
        assert judge.evaluate(run).means == evaluate({q: QRELS[q] for q in ("1", "2")}, run, ["RR@10", "R@2"]).means
        assert judge.aggregate(run) == judge.evaluate(run).means
        assert set(judge.per_query(run)["RR@10"]) == {"1", "2"}
    assert judge.evaluate(runs[0]).per_relation == {}
