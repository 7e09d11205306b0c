"""tour-pyserini choose: every method on the user's training queries through the experiment runner, the best one
named with the commands that run it; bad input refused in one line before any model loads."""

from __future__ import annotations

import logging
import shlex

import pytest
from conftest import ROOT

from tour_pyserini.errors import UserError


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--budget", "0"], "--budget must be positive, got 0"),
        (["--budget", "5", "--metric", "nDCG@ten"], "unknown metric 'nDCG@ten'"),
        (["--budget", "5", "--max-ms-per-query", "-3"], "--max-ms-per-query must be positive and finite, got -3"),
        (["--budget", "5", "--search", "--rewriter rocchio --depht 2"], "unrecognized arguments: --depht 2"),
    ],
)
def test_bad_input_is_one_line_before_any_model_loads(flags, message, capsys, monkeypatch):
    from tour_pyserini.commands.choose import main

    monkeypatch.chdir(ROOT)
    given = ["--index", "prebuilt/scifact.minilm", "--topics", "scifact-train", "--qrels", "scifact-train"]
    with pytest.raises((SystemExit, UserError)) as e:
        main([*given, "--teacher", "bm25", *flags])
    said = capsys.readouterr().err if isinstance(e.value, SystemExit) else str(e.value)
    assert message in said and "Traceback" not in said


def test_answers_are_the_questions_themselves():
    from tour_pyserini.commands.choose import options_of, parser

    args = parser().parse_args(["--index", "i", "--answers", "nq-oracle-train", "--teacher", "bm25", "--budget", "5"])
    options = options_of(args)
    assert options.topics == "nq-oracle-train" and options.qrels is None and options.measure == "Acc@1"
    args = parser().parse_args([*"--index i --topics a --answers b --teacher bm25 --budget 5".split()])
    with pytest.raises(UserError, match="give them as --answers alone"):
        options_of(args)


def test_the_menu_is_the_methods_tables(monkeypatch):
    """choose runs the methods the methods table runs, with the same flags: the two cannot drift apart."""
    from tour_pyserini.experiments.choose import METHODS, WITH_TEACHER
    from tour_pyserini.files.experiments import find_experiment

    monkeypatch.chdir(ROOT)
    table = find_experiment("methods")
    assert {m: tuple(shlex.split(f)) for m, f in METHODS.items()} == table.methods
    ours = {m: v["fit"] if isinstance(v, dict) else tuple(shlex.split(v)) for m, v in WITH_TEACHER.items()}
    assert ours == table.with_teacher


def test_test_queries_of_a_registered_collection_are_named(monkeypatch, tmp_path):
    from tour_pyserini.experiments.choose import overlapping_test_splits

    monkeypatch.chdir(ROOT)
    assert overlapping_test_splits("scifact-test") == {"scifact-test": 300}
    assert overlapping_test_splits("scifact-train") == {"scifact-test": 2}  # two claims are in both splits
    train = tmp_path / "train.tsv"
    train.write_text("".join((ROOT / "collections/scifact/topics.train.tsv").read_text().splitlines(True)[:50]))
    assert overlapping_test_splits(str(train)) == {}


@pytest.mark.slow
def test_choose_measures_every_method_and_writes_the_command_that_runs_the_chosen_one(
    tmp_path, monkeypatch, mini_scifact, dense_index, bm25_index, caplog
):
    """On the fixture's SciFact claims with the BM25 teacher: nine rows, each with its interval and Holm-corrected
    tests; the chosen row beats dense significantly; its written command, run, scores what its row scored."""
    from tour_pyserini.commands.search import main as search
    from tour_pyserini.eval import QrelsJudge
    from tour_pyserini.files import read_qrels
    from tour_pyserini.files.runs import read_run

    monkeypatch.chdir(tmp_path)
    topics, qrels = mini_scifact["collection"] / "topics.tsv", mini_scifact["collection"] / "qrels.txt"
    mine = tmp_path / "collections" / "mini"
    mine.mkdir(parents=True)
    (mine / "collection.yaml").write_text(
        f"name: mini\ncorpus: {mini_scifact['collection'] / 'corpus.jsonl'}\njudged_by: qrels\nmetrics: [nDCG@10]\n"
        f"splits:\n  test: {{topics: {topics}, qrels: {qrels}}}\n"
    )
    index = str(dense_index)
    from tour_pyserini.commands.choose import choose

    with caplog.at_level(logging.WARNING, logger="tour_pyserini"):
        choice = choose(index, str(topics), f"oracle:{qrels}", 5, qrels=str(qrels), hits=20)
    assert "holds queries of mini-test" in caplog.text  # choosing on test queries is named
    assert [r["method"] for r in choice.rows] == [
        "dense",
        "rocchio",
        "avg-prf",
        "dart",
        "rerank",
        "refit",
        "tour-hard",
        "tour-soft",
        "ttt-embed",
    ]
    dense = choice.rows[0]
    assert choice.chosen is not None and choice.chosen["metrics"]["nDCG@10"] > dense["metrics"]["nDCG@10"]
    assert choice.chosen["p"]["vs_baseline"]["nDCG@10"]["holm"] < 0.05
    for row in choice.rows:
        low, high = row["ci"]
        assert low <= row["metrics"]["nDCG@10"] <= high
    frame = choice.to_dataframe()
    assert list(frame["name"]) == [r["method"] for r in choice.rows]
    commands = choice.commands
    if choice.chosen["method"] != "ttt-embed":  # one search command: run it on the topics chosen on
        argv = shlex.split(commands[0].replace("TOPICS", str(topics)))
        assert argv[:2] == ["tour-pyserini", "search"]
        search(argv[2:])
        judge = QrelsJudge(read_qrels(qrels), ["nDCG@10"])
        per_query = judge.per_query(read_run(tmp_path / "RUN.trec"))["nDCG@10"]
        assert sum(per_query.values()) / len(per_query) == pytest.approx(choice.chosen["metrics"]["nDCG@10"], abs=2e-3)


def test_a_setting_is_scored_on_folds_that_did_not_choose_it():
    """Cross-validation's known values: B is perfect on folds 0 and 1 and worthless elsewhere, A is 0.45 everywhere.
    Folds 0 and 1, held out, are scored by A (B's mean on the others is 0.25); folds 2-4 by B (0.5 on the others, with
    folds 0 and 1), which scores 0 there. The cross-validated mean, 0.18, is below either setting's own: what a
    choice made on the queries it is scored on would hide."""
    import numpy as np

    from tour_pyserini.experiments.choose import cross_validated
    from tour_pyserini.ttt.magnitude import fold_of

    qids = [f"q{i}" for i in range(10)]
    fold = dict(zip(sorted(qids), fold_of(10, 5, 0)))
    a = {"nDCG@10": {q: 0.45 for q in qids}}
    b = {"nDCG@10": {q: 1.0 if fold[q] < 2 else 0.0 for q in qids}}
    values, choices = cross_validated({"A": a, "B": b}, "nDCG@10")
    assert choices == ["A", "A", "B", "B", "B"]
    assert values["nDCG@10"] == {q: 0.45 if fold[q] < 2 else 0.0 for q in qids}
    assert np.mean(list(values["nDCG@10"].values())) == pytest.approx(0.18)
    assert cross_validated({"A": a}, "nDCG@10") == (a, ["A"] * 5)  # one setting: its own values


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--collection", "scifact", "--index", "i"], "--collection names the index, the topics and their judgments"),
        (["--collection", "cranfield"], "collection cranfield has no split 'train'; its splits: test"),
        (
            ["--collection", "scifact", "--judge-on", "dev"],
            "collection scifact has no split 'dev'; its splits: test, train",
        ),
        (
            ["--index", "i", "--topics", "t", "--qrels", "q", "--judge-on", "test"],
            "--judge-on SPLIT runs the choice on",
        ),
        (["--topics", "t", "--qrels", "q"], "give --index (or --collection)"),
    ],
)
def test_a_collection_by_name_fills_the_index_and_the_training_split(flags, message, monkeypatch):
    from tour_pyserini.commands.choose import options_of, parser

    monkeypatch.chdir(ROOT)
    with pytest.raises(UserError) as e:
        options_of(parser().parse_args([*flags, "--teacher", "bm25", "--budget", "5"]))
    assert message in str(e.value)


def test_a_registered_collection_is_chosen_on_its_training_split(monkeypatch):
    from tour_pyserini.commands.choose import options_of, parser

    monkeypatch.chdir(ROOT)
    options = options_of(parser().parse_args(["--collection", "nq-oracle", "--teacher", "bm25", "--budget", "5"]))
    assert (options.index, options.topics, options.qrels) == ("indexes/nq-oracle.minilm", "nq-oracle-train", None)
    options = options_of(parser().parse_args(["--collection", "scifact", "--teacher", "bm25", "--budget", "5"]))
    assert (options.topics, options.qrels, options.measure) == ("scifact-train", "scifact-train", "nDCG@10")


def test_pyterrier_frames_become_the_files_the_command_reads(tmp_path, monkeypatch):
    """Topics and qrels given as PyTerrier's frames are read back as the same queries and judgments; a frame without
    the columns is one line naming the one missing."""
    import pandas as pd

    from tour_pyserini.commands.choose import framed
    from tour_pyserini.files import read_qrels, read_topics

    monkeypatch.chdir(ROOT)
    wanted = read_topics("scifact-train")[:20]
    topics = pd.DataFrame({"qid": [t.qid for t in wanted], "query": [t.text for t in wanted]})
    qrels = read_qrels("scifact-train")
    frame = pd.DataFrame(
        [(q, d, label) for q in topics["qid"] for d, label in qrels[q].items()], columns=["qid", "docno", "label"]
    )
    back = read_topics(framed(topics, tmp_path / "t.tsv", ("qid", "query")))
    assert [(t.qid, t.text) for t in back] == [(t.qid, t.text) for t in wanted]
    assert read_qrels(framed(frame, tmp_path / "q.txt", ("qid", "docno", "label"))) == {
        q: qrels[q] for q in topics["qid"]
    }
    assert framed("scifact-train", tmp_path / "x", ("qid", "query")) == "scifact-train"
    with pytest.raises(UserError, match="columns qid, docno, label was expected; it lacks label"):
        framed(frame.drop(columns="label"), tmp_path / "q2.txt", ("qid", "docno", "label"))
