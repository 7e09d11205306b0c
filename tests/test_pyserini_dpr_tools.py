"""Pyserini's own DPR tools on the shipped QA collections, unchanged: a BM25 index's ``contents`` follow Pyserini's
``title\\ntext`` convention, so ``convert_trec_run_to_dpr_retrieval_run`` reads every passage back, and its Top-k
through ``evaluate_dpr_retrieval`` equals the toolkit's Acc@k exactly. The qids of each collection are the line
numbers of the topics file named here, which is what Pyserini's tools number questions by."""

from __future__ import annotations

import json
import re

import pytest
from conftest import ROOT
from test_cli import run_module

from tour_pyserini.files import read_topics
from tour_pyserini.index.corpus import Document, lucene_record, read_jsonl_corpus

# each shipped QA collection: the file (and Anserini reader) whose 0-based line numbers its qids are
PYSERINI_TOPICS = {
    "nq-oracle": ("collections/qa-topics/nq-open/NQ-open.dev.jsonl", "DprJsonlTopicReader"),
}
TOPK = [1, 5, 20]  # 20 hits a question: the converter looks up each (its JVM calls are most of the time)


def qa_collections() -> list[str]:
    """The folders of collections/ with a corpus and topics with answers."""
    found = []
    for folder in sorted((ROOT / "collections").iterdir()):
        if not (folder / "corpus.jsonl").is_file():
            continue
        topics = [p for p in folder.iterdir() if p.name.startswith("topics")]
        if any(t.answers for path in topics for t in read_topics(path)):
            found.append(folder.name)
    return found


def test_every_shipped_qa_collection_names_the_topics_its_qids_number():
    assert qa_collections() == sorted(PYSERINI_TOPICS)


@pytest.mark.parametrize("collection", sorted(PYSERINI_TOPICS))
def test_qids_are_line_numbers_of_their_pyserini_topics_and_not_of_dprs(collection):
    """nq-oracle's qids are NQ-open's line numbers: each is that line's question with its answers. DPR's NQ test
    file holds the same 3,610 questions (tokenised) in another order, so at none of these qids its question."""
    path, _ = PYSERINI_TOPICS[collection]
    lines = [json.loads(line) for line in (ROOT / path).read_text(encoding="utf-8").splitlines()]
    dpr = [line.split("\t")[0] for line in (ROOT / "collections/qa-topics/dpr/topics.dpr.nq.test.txt").open()]
    for split in sorted((ROOT / "collections" / collection).glob("topics.*.jsonl")):
        topics = read_topics(split)
        assert all(lines[int(t.qid)]["question"] == t.text for t in topics), split
        assert all(tuple(lines[int(t.qid)]["answer"]) == t.answers for t in topics), split
        assert sum(dpr[int(t.qid)] == t.text for t in topics) == 0, split


def test_a_bm25_record_holds_title_and_text_as_pyserini_splits_them():
    # a newline inside the text (two of nq-oracle's passages) becomes a space: one newline, between the fields
    obj = {
        "id": "516",
        "title": "Fructose",
        "text": "sugars.\nFructose is",
        "contents": "Fructose\nsugars.\nFructose is",
    }
    record = lucene_record(obj, Document("516", obj["title"], obj["text"]))
    assert record == {
        "id": "516",
        "title": "Fructose",
        "text": "sugars. Fructose is",
        "contents": "Fructose\nsugars. Fructose is",
    }
    title, text = record["contents"].split("\n")  # Pyserini's convert_trec_run_to_dpr_retrieval_run
    assert (title, text) == (record["title"], record["text"])
    # no contents: title and text joined as Pyserini joins them; a contents of something else is kept as given
    assert lucene_record({"id": "a", "text": "x"}, Document("a", "", "x"))["contents"] == "\nx"
    assert (
        lucene_record({"id": "b", "title": "t", "text": "x", "contents": "expanded"}, Document("b", "t", "x"))[
            "contents"
        ]
        == "expanded"
    )


def test_a_contents_only_document_is_read_as_pyserinis_title_and_text(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    lines = [
        {"id": "1", "contents": '"Aaron"\nAaron is a prophet'},
        {"id": "2", "contents": "one field"},
        {"id": "3", "contents": "a\nb\nc"},
    ]
    corpus.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert list(read_jsonl_corpus(corpus)) == [
        Document("1", '"Aaron"', "Aaron is a prophet"),  # as Pyserini's DPR Wikipedia index stores a passage
        Document("2", "", "one field"),
        Document("3", "", "a\nb\nc"),  # not Pyserini's two fields: all of it is the text
    ]


@pytest.mark.slow
@pytest.mark.parametrize("collection", sorted(PYSERINI_TOPICS))
def test_pyserinis_dpr_converter_and_evaluation_agree_with_the_answer_judge(collection, tmp_path):
    from tour_pyserini.commands.eval import main as eval_main
    from tour_pyserini.commands.search import main as search_main
    from tour_pyserini.index.bm25 import write_bm25_index
    from tour_pyserini.index.build import build_index

    folder = ROOT / "collections" / collection
    topics_file, reader = PYSERINI_TOPICS[collection]
    index, run = tmp_path / "bm25", tmp_path / "bm25.trec"
    build_index(index, lambda tmp: write_bm25_index(folder, tmp))
    search_main(
        [
            "--index",
            str(index),
            "--topics",
            str(folder / "topics.test.jsonl"),
            "--output",
            str(run),
            "--hits",
            str(max(TOPK)),
        ]
    )
    with_newline = {d.docid for d in read_jsonl_corpus(folder / "corpus.jsonl") if "\n" in d.title + d.text}
    retrieved = {line.split()[2] for line in run.read_text().splitlines()}
    assert with_newline and with_newline <= retrieved  # the passages Pyserini's converter stopped on are in the run

    converted = tmp_path / "bm25.dpr.json"
    proc = run_module(
        "tour_pyserini",
        "run-pyserini",
        "pyserini.eval.convert_trec_run_to_dpr_retrieval_run",
        "--topics-file",
        str(ROOT / topics_file),
        "--topics-reader",
        f"io.anserini.search.topicreader.{reader}",
        "--index",
        str(index),
        "--input",
        str(run),
        "--output",
        str(converted),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = run_module(
        "tour_pyserini",
        "run-pyserini",
        "pyserini.eval.evaluate_dpr_retrieval",
        "--retrieval",
        str(converted),
        "--topk",
        *map(str, TOPK),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    theirs = {f"Acc@{k}": float(v) for k, v in re.findall(r"Top(\d+)\taccuracy: ([0-9.]+)", proc.stdout)}

    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        eval_main(
            [
                "--answers",
                str(folder / "topics.test.jsonl"),
                "--collection",
                str(folder),
                "--run",
                str(run),
                "--topk",
                *map(str, TOPK),
                "--json",
            ]
        )
    ours = json.loads(out.getvalue())
    assert {k: round(v, 4) for k, v in ours.items()} == theirs
    assert 0.5 < ours["Acc@1"] < ours["Acc@20"] < 1  # a real run: neither empty nor perfect
