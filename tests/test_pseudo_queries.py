"""Corpus-only training signal for a teacher: sentences of real SciFact abstracts as pseudo-queries."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tour_pyserini.index import DocStore
from tour_pyserini.training.ict import split_sentences
from tour_pyserini.training.pseudo_queries import draw_sentences, ensemble_example, ict_example, rrf

pytestmark = pytest.mark.slow


def test_rrf_known_values():
    # a: 1/61 + 1/62, b: 1/62 + 1/61, c: 1/63, d: 1/63, e: 1/64; ties keep first-seen order
    assert rrf(["a", "b", "c"], ["b", "a", "d", "e"]) == ["a", "b", "c", "d", "e"]
    assert rrf(["a", "b"], ["b"]) == ["b", "a"]
    assert rrf(["x"], []) == ["x"]


def test_sentences_come_from_their_document_and_leave_it(dense_index):
    store = DocStore(dense_index / "docstore.sqlite")
    docs = store.get((dense_index / "docid").read_text().split()[:40])
    drawn = draw_sentences(docs, 60, random.Random(0))
    assert len(drawn) == 60
    by_id = {d.docid: d for d in docs}
    for pq in drawn:
        doc = by_id[pq.docid]
        assert pq.query in split_sentences(doc.text) and len(pq.query.split()) >= 6
        assert pq.query not in pq.masked_contents and pq.masked_contents.startswith(doc.title)
        # everything else of the document is still there, word for word
        assert sorted(pq.masked_contents.split() + pq.query.split()) == sorted(doc.contents.split())
    assert draw_sentences(docs, 60, random.Random(0)) == drawn  # seeded


def test_examples_label_as_documented(dense_index):
    store = DocStore(dense_index / "docstore.sqlite")
    doc = store.get((dense_index / "docid").read_text().split()[:1])[0]
    (pq,) = draw_sentences([doc], 1, random.Random(1))
    ict = ict_example(0, pq, ["x", pq.docid, "y"])
    assert ict.positives == [pq.docid] and ict.negatives == ["x", "y"]
    assert ict.texts == {pq.docid: pq.masked_contents}
    pseudo = ensemble_example(0, pq, [pq.docid, "a", "b", "c", "d"], ["b", pq.docid, "a", "e", "f"], skip=1)
    # fused without the source: a (1/62 + 1/63), b (1/63 + 1/61) -> b first, a second; skip=1 drops a
    assert pseudo.positives == ["b"] and "a" not in pseudo.negatives and pq.docid not in pseudo.negatives
    assert set(pseudo.negatives) == {"c", "d", "e", "f"} and not pseudo.texts


def test_a_text_outside_the_index_is_scored_as_the_index_would(dense_index):
    """The residual score of an ICT positive reads the retriever's similarity to the text the model reads."""
    from tour_pyserini.encoders import bundled_model_dir
    from tour_pyserini.index.layout import DOCSTORE_FILE, IndexMeta
    from tour_pyserini.teachers import ScoreRequest
    from tour_pyserini.teachers.dense import DenseTeacher
    from tour_pyserini.training.reranker import ListwiseTask, TrainConfig

    dense = DenseTeacher.of(dense_index)
    docstore = DocStore(dense_index / DOCSTORE_FILE)
    trainer = ListwiseTask(
        str(bundled_model_dir()), docstore, dense, TrainConfig(), encoder=IndexMeta.read(dense_index).encoder
    )
    docids = dense.opened.docids[:4]
    docs = docstore.get(docids)
    stored = dense.score([ScoreRequest("q", "protein folding in cells", docids)])[0]
    encoded = trainer.text_similarities("protein folding in cells", {d.docid: d.contents for d in docs})
    np.testing.assert_allclose([encoded[d] for d in docids], stored, atol=5e-5)
    # candidates of another collection: unknown here, read and scored from the texts their list carries
    import torch

    from tour_pyserini.training.examples import TrainingList

    foreign = {f"other-{d.docid}": d.contents for d in docs}
    with torch.inference_mode():
        scores = trainer.scores([TrainingList("protein folding in cells", [*foreign, *docids], foreign)])[0]
    # the head starts at zero: both halves are 20 x the similarity of the same texts
    np.testing.assert_allclose(scores[:4].numpy(), scores[4:].numpy(), atol=20 * 5e-5)
    np.testing.assert_allclose(scores[4:].numpy(), 20 * stored, atol=1e-4)
