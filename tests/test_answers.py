"""Answer-string evaluation agrees exactly with Pyserini's evaluate_dpr_retrieval on a real run."""

from __future__ import annotations

import json
import logging
import re

import pytest
from conftest import NQ_ORACLE
from test_cli import run_module

from tour_pyserini.commands.eval import main as eval_main
from tour_pyserini.commands.search import main as search_main
from tour_pyserini.eval import evaluate
from tour_pyserini.eval.answers import AnswerMatcher, answer_accuracy, answer_qrels
from tour_pyserini.files import read_topics
from tour_pyserini.files.runs import read_run
from tour_pyserini.index import DocStore

pytestmark = pytest.mark.slow
TOPK = [1, 5, 20, 100]


def write_collection(directory, docs):
    """A collection folder of (docid, title, text) documents, as the answer judge reads passages."""
    directory.mkdir()
    (directory / "corpus.jsonl").write_text(
        "".join(json.dumps({"id": i, "title": t, "text": x}) + "\n" for i, t, x in docs)
    )
    return directory


def test_nq_oracle_collection_counts():
    corpus = [json.loads(line) for line in (NQ_ORACLE / "corpus.jsonl").open(encoding="utf-8")]
    train, test = read_topics(NQ_ORACLE / "topics.train.jsonl"), read_topics(NQ_ORACLE / "topics.test.jsonl")
    assert len(corpus) == len({d["id"] for d in corpus}) == 2599
    assert (len(train), len(test)) == (1655, 1000)
    assert not {t.qid for t in train} & {t.qid for t in test}
    assert all(t.answers for t in train + test)


@pytest.fixture(scope="module")
def nq_run(mini_nq, tmp_path_factory):
    out = tmp_path_factory.mktemp("nq-run") / "bm25.trec"
    search_main(
        ["--index", str(mini_nq["bm25"]), "--topics", str(mini_nq["topics"]), "--output", str(out), "--hits", "100"]
    )
    return out


def pyserini_accuracy(run_path, topics, store, tmp_path, regex=False) -> dict[str, float]:
    """Pyserini's own script on a DPR retrieval file made from the run (contexts 'title\\ntext')."""
    run = read_run(run_path)
    retrieval = {}
    for t in topics:
        docids = sorted(run.get(t.qid, {}), key=lambda d: -run[t.qid][d])
        retrieval[t.qid] = {
            "question": t.text,
            "answers": list(t.answers),
            "contexts": [{"docid": d.docid, "text": f"{d.title}\n{d.text}"} for d in store.get(docids)],
        }
    path = tmp_path / "retrieval.json"
    path.write_text(json.dumps(retrieval))
    args = ["--retrieval", str(path), "--topk", *map(str, TOPK)] + (["--regex"] if regex else [])
    proc = run_module("tour_pyserini", "run-pyserini", "pyserini.eval.evaluate_dpr_retrieval", *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {f"Acc@{k}": float(v) for k, v in re.findall(r"Top(\d+)\taccuracy: ([0-9.]+)", proc.stdout)}


@pytest.mark.parametrize("regex", [False, True])
def test_accuracy_equals_pyserini(regex, mini_nq, nq_run, tmp_path):
    topics = read_topics(mini_nq["topics"])
    if regex:  # the same answers as escaped patterns exercise the CuratedTrec code path
        from tour_pyserini.files.topics import Topic

        topics = [Topic(t.qid, t.text, tuple(re.escape(a) for a in t.answers)) for t in topics]
    store = DocStore(mini_nq["bm25"] / "docstore.sqlite")
    ours = answer_accuracy(read_run(nq_run), topics, AnswerMatcher(store, regex=regex), TOPK)
    theirs = pyserini_accuracy(nq_run, topics, store, tmp_path, regex=regex)
    assert {k: round(v, 4) for k, v in ours.means.items()} == theirs
    assert 0 < ours.means["Acc@1"] < ours.means["Acc@100"] < 1  # a non-trivial run


def test_answer_qrels_give_the_same_success_at_k(mini_nq, nq_run, tmp_path, capsys):
    topics = read_topics(mini_nq["topics"])
    store = DocStore(mini_nq["bm25"] / "docstore.sqlite")
    matcher = AnswerMatcher(store)
    run = read_run(nq_run)
    acc = answer_accuracy(run, topics, matcher, TOPK)
    qrels = answer_qrels(run, topics, matcher, max(TOPK))
    success = evaluate(qrels, run, [f"Success@{k}" for k in TOPK])
    for k in TOPK:
        assert success.per_query[f"Success@{k}"] == acc.per_query[f"Acc@{k}"]

    out = tmp_path / "answers.qrels"
    eval_main(
        [
            "--answers",
            str(mini_nq["topics"]),
            "--collection",
            str(mini_nq["collection"]),
            "--run",
            str(nq_run),
            "--json",
            "--write-answer-qrels",
            str(out),
        ]
    )
    assert json.loads(capsys.readouterr().out) == acc.means
    assert len(out.read_text().splitlines()) == sum(len(d) for d in qrels.values())


def test_has_answer_known_cases(mini_nq):
    store = DocStore(mini_nq["bm25"] / "docstore.sqlite")
    m = AnswerMatcher(store)
    text = "The first Nobel Prize in Physics was awarded in 1901 to Wilhelm Conrad Röntgen, of Germany."
    assert m.has_answer("x1", text, ["wilhelm conrad röntgen"])  # uncased, NFD on both sides
    assert not m.has_answer("x2", text, ["Conrad Wilhelm"])  # token order matters
    assert not m.has_answer("x3", text, ["190"])  # whole tokens only
    assert AnswerMatcher(store, regex=True).has_answer("x4", text, [r"19\d1"])


def test_per_relation_breakdown(tmp_path, capsys):
    """EntityQuestions-style topics (one JSON list per relation) get Acc@k per relation."""
    eq = tmp_path / "eq"
    eq.mkdir()
    (eq / "P1.test.json").write_text(
        json.dumps(
            [{"question": "who wrote x?", "answers": ["Ann Lee"]}, {"question": "who wrote y?", "answers": ["Bo Chen"]}]
        )
    )
    (eq / "P2.test.json").write_text(json.dumps([{"question": "where is z?", "answers": ["Oslo"]}]))
    docs = [("d1", "x", "x was written by Ann Lee."), ("d2", "y", "nobody knows"), ("d3", "z", "z is in Oslo")]
    collection = write_collection(tmp_path / "c", docs)
    run = tmp_path / "run.trec"
    run.write_text("P1-0 Q0 d1 1 2.0 t\nP1-1 Q0 d2 1 2.0 t\nP2-0 Q0 d3 1 2.0 t\n")
    eval_main(["--answers", str(eq), "--collection", str(collection), "--run", str(run), "--topk", "1", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert result["Acc@1"] == pytest.approx(2 / 3)
    assert result["per_relation"] == {"P1": {"Acc@1": 0.5}, "P2": {"Acc@1": 1.0}}


def test_a_question_whose_answers_are_all_blank_is_skipped_not_found(tmp_path, capsys, caplog):
    """An empty answer is a token sequence of length 0, found in every passage (as in Pyserini's has_answers):
    such a question scored Acc@k 1 whatever the run. Blank answers are dropped when read; a question left with
    none is not judged, and a warning says how many were skipped."""
    topics = tmp_path / "t.jsonl"
    topics.write_text(
        '{"qid": "a", "question": "where is z?", "answers": ["Oslo"]}\n'
        '{"qid": "b", "question": "who wrote x?", "answers": [""]}\n'
        '{"qid": "c", "question": "who wrote y?", "answers": ["  ", "Bo Chen"]}\n'
    )
    docs = [("d1", "z", "nobody knows where z is"), ("d2", "x", "x was written by Ann Lee."), ("d3", "y", "by Bo Chen")]
    collection = write_collection(tmp_path / "c", docs)
    run = tmp_path / "run.trec"
    run.write_text("a Q0 d1 1 2.0 t\nb Q0 d2 1 2.0 t\nc Q0 d3 1 2.0 t\n")
    with caplog.at_level(logging.WARNING, logger="tour_pyserini"):
        eval_main(
            [
                "--answers",
                str(topics),
                "--collection",
                str(collection),
                "--run",
                str(run),
                "--topk",
                "1",
                "--json",
                "--per-query",
            ]
        )
    result = json.loads(capsys.readouterr().out)
    assert result["per_query"] == {"Acc@1": {"a": 0.0, "c": 1.0}}
    assert result["Acc@1"] == 0.5
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [f"{topics}: 1 of 3 questions have no answer and are skipped"]
