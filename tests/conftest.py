"""Shared fixtures: a small real slice of SciFact, indexed once per test session by the real code."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT / "collections" / "scifact"
SCIFACT_QRELS = ROOT / "qrels" / "scifact.test.txt"
N_QUERIES = 40  # judged test queries in the fixture, multi-relevant ones first
N_DISTRACTORS = 600  # other SciFact abstracts


@pytest.fixture(autouse=True)
def library_log_reaches_caplog():
    """A command run in this process keeps the package's records off the root logger (its own handler prints
    them); each test starts with the library's default, so that caplog sees them."""
    import logging

    logging.getLogger("tour_pyserini").propagate = True


@pytest.fixture
def encoder_loads(monkeypatch) -> list:
    """Each Pyserini query encoder loaded while the test runs (its arguments), counted where the model loads."""
    import tour_pyserini.encoders.query as query

    loads: list = []
    real = query.pyserini_query_encoder
    monkeypatch.setattr(query, "pyserini_query_encoder", lambda *a: loads.append(a) or real(*a))
    return loads


@pytest.fixture(scope="session")
def mini_scifact(tmp_path_factory) -> dict[str, Path]:
    """The first judged SciFact test queries, their relevant abstracts and some others, as a collection."""
    from tour_pyserini.files import read_qrels, read_topics

    out = tmp_path_factory.mktemp("mini-scifact")
    qrels = read_qrels(SCIFACT_QRELS)
    judged = [t for t in read_topics(SCIFACT / "topics.test.tsv") if t.qid in qrels]
    # queries with several relevant abstracts first: they leave recall to gain beyond the first hits
    topics = sorted(judged, key=lambda t: len(qrels[t.qid]) < 2)[:N_QUERIES]
    qids = {t.qid for t in topics}
    relevant = {d for q in qids for d in qrels[q]}
    docs, distractors = [], 0
    with open(SCIFACT / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            if doc["id"] in relevant:
                docs.append(line)
            elif distractors < N_DISTRACTORS:
                docs.append(line)
                distractors += 1
    (out / "corpus.jsonl").write_text("".join(docs), encoding="utf-8")
    (out / "topics.tsv").write_text("".join(f"{t.qid}\t{t.text}\n" for t in topics), encoding="utf-8")
    (out / "qrels.txt").write_text(
        "".join(f"{q} 0 {d} {r}\n" for q in sorted(qids) for d, r in qrels[q].items()), encoding="utf-8"
    )
    return {"collection": out, "topics": out / "topics.tsv", "qrels": out / "qrels.txt", "num_docs": len(docs)}


@pytest.fixture(scope="session")
def index_root(tmp_path_factory) -> Path:
    """Both fixture indexes live side by side, as in indexes/ (the bm25 teacher finds its index there)."""
    return tmp_path_factory.mktemp("indexes")


@pytest.fixture(scope="session")
def dense_index(mini_scifact, index_root) -> Path:
    from tour_pyserini.encoders import EncoderSpec
    from tour_pyserini.index.build import build_index
    from tour_pyserini.index.dense import write_dense_index

    out = index_root / "mini.minilm"
    spec = EncoderSpec.resolve()
    build_index(out, lambda tmp: write_dense_index(mini_scifact["collection"], tmp, spec))
    return out


@pytest.fixture(scope="session")
def bm25_index(mini_scifact, index_root) -> Path:
    from tour_pyserini.index.bm25 import write_bm25_index
    from tour_pyserini.index.build import build_index

    out = index_root / "mini.bm25"
    build_index(out, lambda tmp: write_bm25_index(mini_scifact["collection"], tmp))
    return out


@pytest.fixture(scope="session")
def searcher(dense_index):
    from tour_pyserini.search import TourSearcher

    return TourSearcher.from_index(dense_index)


@pytest.fixture(scope="session")
def cross_encoder_dir(tmp_path_factory) -> Path:
    """A real sequence-classification model: the bundled MiniLM with a seeded, untrained scoring head.

    Its scores carry no relevance signal (no trained cross-encoder can be downloaded here); it exercises
    the real loading, batching and truncation code.
    """
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from tour_pyserini.encoders import bundled_model_dir

    out = tmp_path_factory.mktemp("cross-encoder")
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(str(bundled_model_dir()), num_labels=1)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(str(bundled_model_dir())).save_pretrained(out)
    return out


NQ_ORACLE = ROOT / "collections" / "nq-oracle"


@pytest.fixture(scope="session")
def mini_nq(tmp_path_factory) -> dict[str, Path]:
    """120 nq-oracle test questions with their gold passages and 300 other passages, BM25-indexed."""
    from tour_pyserini.files import read_topics
    from tour_pyserini.index.bm25 import write_bm25_index
    from tour_pyserini.index.build import build_index

    out = tmp_path_factory.mktemp("mini-nq")
    topics = read_topics(NQ_ORACLE / "topics.test.jsonl")[:120]
    lines = (NQ_ORACLE / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (out / "corpus.jsonl").write_text("".join(lines[:300] + lines[-600:]), encoding="utf-8")
    (out / "topics.jsonl").write_text(
        "".join(json.dumps({"qid": t.qid, "question": t.text, "answers": list(t.answers)}) + "\n" for t in topics)
    )
    build_index(out / "bm25", lambda tmp: write_bm25_index(out, tmp))
    return {"collection": out, "topics": out / "topics.jsonl", "bm25": out / "bm25"}


@pytest.fixture(scope="session")
def state_file(dense_index, bm25_index, mini_scifact, tmp_path_factory) -> Path:
    """A TTT-Embed task state of the fixture index, fitted on BM25 rewards of its topics (5 per query)."""
    from tour_pyserini.commands import ttt

    out = tmp_path_factory.mktemp("serve-state")
    ttt.main(
        [
            "rewards",
            "--index",
            str(dense_index),
            "--topics",
            str(mini_scifact["topics"]),
            "--teacher",
            "bm25",
            "--budget",
            "5",
            "--task",
            "mini",
            "--output",
            str(out / "rewards.tsv"),
        ]
    )
    ttt.main(
        ["fit", "--rewards", str(out / "rewards.tsv"), "--scope", "task", "--output", str(out / "state.safetensors")]
    )
    return out / "state.safetensors"


@pytest.fixture(scope="session")
def server(dense_index, bm25_index, state_file, mini_scifact, tmp_path_factory):
    """One `tour-pyserini serve` on 127.0.0.1 for the serving tests: both fixture indexes, the BM25 teacher, the
    state, the topics and qrels for the explorer, MCP on."""
    from serve_server import Server

    data = tmp_path_factory.mktemp("serve-data")
    with Server(
        "--index",
        str(dense_index),
        "--index",
        str(bm25_index),
        "--teacher",
        "bm25",
        "--state",
        str(state_file),
        "--topics",
        str(mini_scifact["topics"]),
        "--qrels",
        str(mini_scifact["qrels"]),
        "--threads",
        "1",
        "--data-dir",
        str(data),
    ) as s:
        yield s


def interrupted_at_the_third_batch(monkeypatch, search) -> None:
    """Run ``search()`` and stop it with Ctrl-C as its run writer is about to record the third batch (after the
    writer's first record and two whole batches); the writer is restored after."""
    from tour_pyserini.files.runs import RunWriter

    record, calls = RunWriter._record, []

    def interrupt(writer, end):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        record(writer, end)

    monkeypatch.setattr(RunWriter, "_record", interrupt)
    with pytest.raises(KeyboardInterrupt):
        search()
    monkeypatch.setattr(RunWriter, "_record", record)
