"""An existing index is reused only when it was built as asked; otherwise the index CLI refuses in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SCIFACT

pytestmark = pytest.mark.slow


def index_cli(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "tour_pyserini.index", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)


def snapshot(index: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(index.iterdir())}


@pytest.fixture(scope="module")
def collections(tmp_path_factory) -> dict[str, Path]:
    """Two small collections of SciFact abstracts, and a dense index of the first."""
    root = tmp_path_factory.mktemp("collections")
    lines = (SCIFACT / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    for name, part in (("a", lines[:40]), ("b", lines[40:80])):
        (root / name).mkdir()
        (root / name / "corpus.jsonl").write_text("".join(part), encoding="utf-8")
    done = index_cli("--collection", root / "a", "--output", root / "a.minilm")
    assert done.returncode == 0, done.stderr
    return {"a": root / "a", "b": root / "b", "dense": root / "a.minilm"}


def test_an_identical_request_reuses_the_index(collections):
    before = snapshot(collections["dense"])
    done = index_cli("--collection", collections["a"], "--output", collections["dense"])
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"reusing dense (flat) index {collections['dense']}: 40 docs")
    assert snapshot(collections["dense"]) == before


@pytest.mark.parametrize(
    "flags, differs",
    [
        (["--pooling", "cls"], "pooling mean, asked cls"),
        (["--max-length", "128"], "max_length 256, asked 128"),
        (["--faiss-index", "hnsw"], "--faiss-index flat, asked hnsw"),
        (["--bm25"], "kind dense, asked bm25"),
        (["--no-prebuilt", "--collection", "{b}"], "collection {a}/corpus.jsonl, asked {b}/corpus.jsonl"),
    ],
)
def test_a_request_the_index_was_not_built_for_is_refused_in_one_line(collections, flags, differs):
    out = collections["dense"]
    flags = [f.format(**collections) for f in flags]
    collection = [] if "--collection" in flags else ["--collection", collections["a"]]
    before = snapshot(out)
    done = index_cli(*collection, *flags, "--output", out)
    assert done.returncode == 2 and done.stdout == ""
    differs = differs.format(**collections)
    assert done.stderr == f"error: {out} was built with {differs}; pass --overwrite to rebuild it\n"
    assert snapshot(out) == before


def test_a_changed_corpus_or_another_index_type_of_the_same_vectors_is_refused(collections, tmp_path):
    collection = tmp_path / "c"
    shutil.copytree(collections["a"], collection)
    out = tmp_path / "c.bm25"
    assert index_cli("--bm25", "--collection", collection, "--output", out).returncode == 0
    assert index_cli("--bm25", "--collection", collection, "--output", out).stdout.startswith("reusing bm25 index")
    moved = shutil.copytree(collection, tmp_path / "moved")  # the same documents elsewhere: the same index
    assert index_cli("--bm25", "--collection", moved, "--output", out).stdout.startswith("reusing bm25 index")
    corpus = collection / "corpus.jsonl"
    corpus.write_text(corpus.read_text(encoding="utf-8").replace("a", "b", 1), encoding="utf-8")
    done = index_cli("--bm25", "--collection", collection, "--output", out)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: {out} was built with {corpus} as it was (SHA-256 ")
    # vectors re-indexed from another index: the source and the index type are what was asked
    hnsw = tmp_path / "hnsw"
    assert index_cli("--from-index", collections["dense"], "--output", hnsw, "--faiss-index", "hnsw").returncode == 0
    done = index_cli("--from-index", collections["dense"], "--output", hnsw, "--faiss-index", "hnsw", "--M", "16")
    assert done.stderr == f"error: {hnsw} was built with M 32, asked 16; pass --overwrite to rebuild it\n"


def test_overwrite_rebuilds_as_asked(collections, tmp_path):
    out = tmp_path / "a.minilm"
    shutil.copytree(collections["dense"], out)
    done = index_cli("--collection", collections["a"], "--output", out, "--pooling", "cls", "--overwrite")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"dense (flat) index {out}: 40 docs")
    assert json.loads((out / "tour_pyserini.json").read_text())["encoder"]["pooling"] == "cls"
    assert (out / "index").read_bytes() != (collections["dense"] / "index").read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.minilm"]  # nothing staged is left beside it
    again = index_cli("--collection", collections["a"], "--output", out, "--pooling", "cls")
    assert again.returncode == 0 and again.stdout.startswith("reusing")


def test_the_demos_prebuilt_index_is_written_then_reused(tmp_path):
    out = tmp_path / "scifact.minilm"
    first = index_cli("--collection", SCIFACT, "--output", out)
    assert first.returncode == 0, first.stderr
    assert "using prebuilt scifact.minilm" in first.stdout
    second = index_cli("--collection", SCIFACT, "--output", out)
    assert second.returncode == 0 and second.stdout.startswith("reusing dense (flat) index"), second.stderr


def search_cli(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "tour_pyserini.search", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)


def one_line(proc: subprocess.CompletedProcess, *fragments: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    assert all(f in lines[0] for f in fragments), lines[0]


@pytest.mark.parametrize("damage", ["not-json", "a-list", "other-fields"])
def test_damaged_index_metadata_is_one_line_for_the_index_and_search_commands(damage, collections, tmp_path):
    copy = tmp_path / "a.minilm"
    shutil.copytree(collections["dense"], copy)
    meta = copy / "tour_pyserini.json"
    meta.write_text(
        {"not-json": '{"kind": "dense", "collec', "a-list": "[1, 2]", "other-fields": '{"kind": "dense", "size": 3}'}[
            damage
        ]
    )
    reused = index_cli("--collection", collections["a"], "--output", copy)
    one_line(reused, f"{meta} is damaged, not the metadata tour_pyserini writes", "--overwrite")
    searched = search_cli("--index", copy, "--topics", SCIFACT / "topics.test.tsv", "--output", tmp_path / "r.trec")
    one_line(searched, f"{meta} is damaged")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.minilm"]


@pytest.mark.parametrize("change", ["one-docid-short", "one-docid-more"])
def test_docids_that_do_not_match_the_faiss_index_are_one_line_before_the_encoder_loads(change, collections, tmp_path):
    copy = tmp_path / "a.minilm"
    shutil.copytree(collections["dense"], copy)
    docids = (copy / "docid").read_text().splitlines(keepends=True)
    (copy / "docid").write_text("".join(docids[:-1] if change == "one-docid-short" else [*docids, "extra\n"]))
    searched = search_cli("--index", copy, "--topics", SCIFACT / "topics.test.tsv", "--output", tmp_path / "r.trec")
    count = 39 if change == "one-docid-short" else 41
    one_line(searched, f"{copy / 'docid'} lists {count} docids for the 40 vectors of {copy / 'index'}")
    assert "Loading" not in searched.stdout + searched.stderr and not (tmp_path / "r.trec").exists()


def test_the_bm25_index_beside_a_dense_one_is_found_past_damaged_unrelated_indexes(tmp_path):
    from tour_pyserini.index.layout import IndexMeta, MissingIndexError
    from tour_pyserini.teachers.bm25 import sibling_bm25_index

    def index(name: str, kind: str | None, collection: str = "c", lucene: bool = True) -> Path:
        (tmp_path / name).mkdir()
        if lucene:
            (tmp_path / name / "segments_1").write_bytes(b"")
        if kind:
            IndexMeta(kind=kind, collection=collection, num_docs=1).write(tmp_path / name)
        else:
            (tmp_path / name / "tour_pyserini.json").write_text("{damaged")
        return tmp_path / name

    dense = index("c.minilm", "dense", lucene=False)
    index("a.broken", None)  # a damaged Lucene index of something else, sorted first
    index("b.other", "bm25", collection="another")
    index("d.not-an-index", None, lucene=False)  # never read: not a Lucene index
    with pytest.raises(
        MissingIndexError,
        match=r"no BM25 index of the collection .* \(passed over, their "
        r"tour_pyserini.json damaged: a.broken\)",
    ):
        sibling_bm25_index(dense)
    index("c.bm25", "bm25")
    assert sibling_bm25_index(dense) == tmp_path / "c.bm25"
