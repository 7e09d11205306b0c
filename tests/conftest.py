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
N_QUERIES = 40  # judged test queries in the fixture
N_DISTRACTORS = 300  # other SciFact abstracts


@pytest.fixture(scope="session")
def mini_scifact(tmp_path_factory) -> dict[str, Path]:
    """The first judged SciFact test queries, their relevant abstracts and some others, as a collection."""
    from tour_pyserini.data import read_qrels, read_topics

    out = tmp_path_factory.mktemp("mini-scifact")
    qrels = read_qrels(SCIFACT_QRELS)
    topics = [t for t in read_topics(SCIFACT / "topics.test.tsv") if t.qid in qrels][:N_QUERIES]
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
def dense_index(mini_scifact, tmp_path_factory) -> Path:
    from tour_pyserini.encoders import EncoderSpec
    from tour_pyserini.index.build import build_index
    from tour_pyserini.index.dense import write_dense_index

    out = tmp_path_factory.mktemp("indexes") / "mini.minilm"
    spec = EncoderSpec.resolve()
    build_index(out, lambda tmp: write_dense_index(mini_scifact["collection"], tmp, spec))
    return out


@pytest.fixture(scope="session")
def bm25_index(mini_scifact, tmp_path_factory) -> Path:
    from tour_pyserini.index.bm25 import write_bm25_index
    from tour_pyserini.index.build import build_index

    out = tmp_path_factory.mktemp("indexes") / "mini.bm25"
    build_index(out, lambda tmp: write_bm25_index(mini_scifact["collection"], tmp))
    return out


@pytest.fixture(scope="session")
def searcher(dense_index):
    from tour_pyserini.search import TourSearcher

    return TourSearcher.from_index(dense_index)
