"""Prebuilt dense indexes: used only for the corpus and encoder they were made with, and equal to encoding."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from conftest import ROOT, SCIFACT

from tour_pyserini.encoders import EncoderSpec, encoder_identity
from tour_pyserini.files.digest import file_sha256
from tour_pyserini.index.build import build_index
from tour_pyserini.index.dense import write_dense_index
from tour_pyserini.index.prebuilt import MANIFEST, PREBUILT_DIR, export_prebuilt, find_prebuilt
from tour_pyserini.search import TourSearcher


@pytest.fixture(scope="module")
def prebuilt_root(dense_index, mini_scifact, tmp_path_factory):
    root = tmp_path_factory.mktemp("prebuilt")
    export_prebuilt(dense_index, mini_scifact["collection"] / "corpus.jsonl", root / "mini.minilm")
    return root


def test_an_index_built_from_the_prebuilt_vectors_ranks_as_the_encoded_one(
    prebuilt_root, dense_index, mini_scifact, tmp_path, caplog
):
    spec = EncoderSpec.resolve()
    out = tmp_path / "from-prebuilt"
    collection = mini_scifact["collection"]
    with caplog.at_level(logging.DEBUG, logger="tour_pyserini"):
        meta = build_index(out, lambda tmp: write_dense_index(collection, tmp, spec, prebuilt=prebuilt_root))
    assert "using prebuilt" in caplog.text
    assert meta.extra["prebuilt"].endswith("mini.minilm") and meta.num_docs == mini_scifact["num_docs"]
    assert (out / "docid").read_text() == (dense_index / "docid").read_text()
    queries = [line.split("\t")[1] for line in mini_scifact["topics"].read_text().splitlines()]
    encoded, prebuilt = TourSearcher.from_index(dense_index), TourSearcher.from_index(out)
    vectors = encoded.encode(queries)
    a, b = encoded.search_vectors(vectors, 10), prebuilt.search_vectors(vectors, 10)
    # float16 storage moves inner products by about 1e-4 (documents closer than that may swap)
    scores = lambda hits: np.array([[h.score for h in q] for q in hits])  # noqa: E731
    assert np.abs(scores(a) - scores(b)).max() < 5e-4
    assert np.mean([x.docid == y.docid for p, q in zip(a, b) for x, y in zip(p, q)]) > 0.97


def test_another_encoder_or_corpus_is_encoded_instead(prebuilt_root, mini_scifact, caplog):
    corpus = mini_scifact["collection"] / "corpus.jsonl"
    identity = encoder_identity(EncoderSpec.resolve())
    assert find_prebuilt(corpus, identity, ["title", "text"], prebuilt_root) is not None
    shorter = {**identity, "max_length": 128}
    with caplog.at_level(logging.INFO, logger="tour_pyserini"):
        assert find_prebuilt(corpus, shorter, ["title", "text"], prebuilt_root) is None
    said = caplog.text
    assert "not using prebuilt" in said and "max length 256" in said and "max length 128" in said
    other_weights = {**identity, "weights_sha256": "0" * 64}
    assert find_prebuilt(corpus, other_weights, ["title", "text"], prebuilt_root) is None
    assert find_prebuilt(corpus, identity, ["text"], prebuilt_root) is None  # other fields encoded
    assert find_prebuilt(SCIFACT / "corpus.jsonl", identity, ["title", "text"], prebuilt_root) is None


@pytest.mark.slow
@pytest.mark.parametrize("name, num_docs", [("scifact", 5183), ("nq-oracle", 2599), ("cranfield", 1400)])
def test_shipped_vectors_are_the_bundled_encoders(name, num_docs):
    """Each shipped prebuilt matches its shipped corpus and encoder, and its rows are what encoding gives."""
    from tour_pyserini._java import import_pyserini

    corpus = ROOT / "collections" / name / "corpus.jsonl"
    spec = EncoderSpec.resolve()
    found = find_prebuilt(corpus, encoder_identity(spec), ["title", "text"])
    assert found is not None and found.path == PREBUILT_DIR / f"{name}.minilm"
    manifest = json.loads((found.path / MANIFEST).read_text())
    assert manifest["corpus_sha256"] == file_sha256(corpus) and manifest["num_docs"] == num_docs
    docs = [json.loads(line) for line in corpus.read_text().splitlines()[:16]]
    assert found.docids()[:16] == [d["id"] for d in docs]
    encoder = import_pyserini("pyserini.encode").AutoDocumentEncoder(
        spec.path, device="cpu", pooling=spec.pooling, l2_norm=spec.l2_norm
    )
    fresh = encoder.encode(texts=[d["text"] for d in docs], titles=[d["title"] for d in docs], max_length=256)
    assert np.abs(found.vectors()[:16] - fresh).max() < 1e-3  # float16: 11 significant bits
