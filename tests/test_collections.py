"""Collections by name: one declaration each (collection.yaml), read by every command that takes --collection."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT

from tour_pyserini.errors import UserError
from tour_pyserini.files.collections import collection_names, find_collection


def test_the_shipped_collections_are_declared_and_their_files_exist(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert collection_names() == ["cranfield", "nq-oracle", "scifact"]
    scifact = find_collection("scifact")
    assert scifact.corpus == ROOT / "collections/scifact/corpus.jsonl" and scifact.judged_by == "qrels"
    assert scifact.split("test").qrels == ROOT / "qrels/scifact.test.txt" and "nDCG@10" in scifact.metrics
    assert find_collection("nq-oracle").split("train").qrels is None  # judged by the answers in its topics
    with pytest.raises(UserError, match="collection cranfield has no split 'train'; its splits: test"):
        find_collection("cranfield").split("train")
    with pytest.raises(UserError, match="unknown collection 'scifakt'; the collections known by name: cranfield, "):
        find_collection("scifakt")


def test_a_user_adds_a_collection_by_writing_one_file(tmp_path, monkeypatch):
    mine = tmp_path / "lab" / "my-docs"
    mine.mkdir(parents=True)
    (mine / "corpus.jsonl").write_text('{"id": "d1", "title": "", "text": "bone density"}\n')
    (mine / "topics.tsv").write_text("q1\tbone\n")
    (mine / "qrels.txt").write_text("q1 0 d1 1\n")
    declaration = "name: my-docs\ncorpus: corpus.jsonl\njudged_by: qrels\nmetrics: [nDCG@10]\n"
    (mine / "collection.yaml").write_text(declaration + "splits:\n  test: {topics: topics.tsv, qrels: qrels.txt}\n")
    monkeypatch.setenv("TOUR_PYSERINI_COLLECTIONS", str(tmp_path / "lab"))
    assert find_collection("my-docs").split("test").topics == (mine / "topics.tsv").resolve()

    from tour_pyserini.commands.index import parser

    args = parser().parse_args(["--collection", "my-docs", "--output", str(tmp_path / "index")])
    assert args.collection == str(mine.resolve())  # the commands take a name wherever they take a collection
    for broken, message in [
        ("splits:\n  test: {topics: topics.tsv}\n", "split 'test': a collection judged by qrels needs its qrels"),
        ("splits:\n  test: {topics: nope.tsv, qrels: qrels.txt}\n", "split 'test''s topics 'nope.tsv' is not a file"),
    ]:
        (mine / "collection.yaml").write_text(declaration + broken)
        with pytest.raises(UserError, match=message):
            find_collection("my-docs")


def test_a_name_no_collection_has_is_said_where_the_corpus_is_read_after_the_flags(tmp_path, monkeypatch):
    from tour_pyserini.commands.index import main

    monkeypatch.chdir(ROOT)
    with pytest.raises(FileNotFoundError, match="no corpus at scifakt .*or a collection's name: cranfield, nq-oracle"):
        main(["--collection", "scifakt", "--output", str(tmp_path / "index")])
    assert not (tmp_path / "index").exists()


def test_topics_and_qrels_are_named_collection_split_as_pyserini_names_them(tmp_path, monkeypatch, capsys):
    from tour_pyserini.commands.eval import main
    from tour_pyserini.files import read_qrels, read_topics

    monkeypatch.chdir(ROOT)
    assert read_topics("scifact-train") == read_topics("collections/scifact/topics.train.tsv")
    assert read_qrels("cranfield-test") == read_qrels("qrels/cranfield.txt")
    with pytest.raises(UserError, match="nq-oracle-test: nq-oracle is judged by the answer strings of its topics"):
        read_qrels("nq-oracle-test")
    run = tmp_path / "run.trec"
    run.write_text("1 Q0 184 1 2.0 t\n1 Q0 29 2 1.0 t\n2 Q0 12 1 1.0 t\n")
    main(["--qrels", "cranfield-test", "--run", str(run), "--metrics", "NumQ", "NumRelRet", "--json"])
    assert json.loads(capsys.readouterr().out) == {"NumQ": 2.0, "NumRet(rel=1)": 3.0}
    (tmp_path / "cranfield-test").write_text("1 0 184 1\n")  # a file of that name is read instead
    monkeypatch.chdir(tmp_path)
    assert read_qrels("cranfield-test") == {"1": {"184": 1}}
