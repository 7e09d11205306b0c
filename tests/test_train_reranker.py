"""Training a cross-encoder teacher with the pairwise recipe, on a real slice of SciFact."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tour_pyserini.data import read_qrels, read_topics
from tour_pyserini.teachers import ScoreRequest
from tour_pyserini.teachers.cross_encoder import CrossEncoderTeacher
from tour_pyserini.train_reranker import TrainConfig, build_examples, train, triplets

pytestmark = pytest.mark.slow


def test_positives_from_answer_strings(mini_nq):
    """Without qrels, a candidate is positive when it contains one of the topic's answers (DPR's rule)."""
    from tour_pyserini.eval.answers import AnswerMatcher
    from tour_pyserini.index import DocStore
    from tour_pyserini.search import Bm25Searcher

    topics = read_topics(mini_nq["topics"])[:40]
    results = Bm25Searcher.from_index(mini_nq["bm25"]).retrieve([t.text for t in topics], [t.qid for t in topics], 20)
    store = DocStore(mini_nq["bm25"] / "docstore.sqlite")
    examples = build_examples({r.qid: r.hits for r in results}, topics, None, store)
    assert len(examples) >= 20
    matcher = AnswerMatcher(store)
    answers = {t.qid: t.answers for t in topics}
    for ex in examples:
        assert len(ex.positives) + len(ex.negatives) == 20
        for docid, expected in [(d, True) for d in ex.positives] + [(d, False) for d in ex.negatives]:
            assert matcher.has_answer(docid, store.get([docid])[0].text, answers[ex.qid]) is expected


def test_fresh_negatives_each_epoch(searcher, mini_scifact):
    import random

    topics = read_topics(mini_scifact["topics"])
    rankings = searcher.batch_search([t.text for t in topics], [t.qid for t in topics], hits=20)
    examples = build_examples(rankings, topics, read_qrels(mini_scifact["qrels"]))
    assert examples and all(set(ex.positives).isdisjoint(ex.negatives) for ex in examples)
    rng = random.Random(0)
    first, second = triplets(examples, rng), triplets(examples, rng)
    assert [t[:2] for t in first] == [t[:2] for t in second] and first != second


def test_training_saves_the_best_checkpoint_as_a_teacher(dense_index, mini_scifact, tmp_path):
    from tour_pyserini.encoders import bundled_model_dir

    config = TrainConfig(epochs=2, batch_size=8, lr=1e-4, max_length=96, candidates=20, val_fraction=0.25, seed=3)
    out = tmp_path / "ce"
    report = train(str(dense_index), read_topics(mini_scifact["topics"]), read_qrels(mini_scifact["qrels"]), out,
                   str(bundled_model_dir()), config)  # fmt: skip
    assert json.loads((out / "training.json").read_text()) == report
    assert [h["epoch"] for h in report["history"]] == [0, 1, 2]
    assert report["history"][-1]["train_loss"] < math.log(2)  # below the loss of an uninformed scorer
    best = max(h["val_pairwise_accuracy"] for h in report["history"][1:])
    assert report["best_val_pairwise_accuracy"] == best
    assert abs(report["saved_val_pairwise_accuracy"] - best) <= 0.05  # float16 weights rank (almost) as trained
    assert set(report["val_qids"]) <= {t.qid for t in read_topics(mini_scifact["topics"])}
    teacher = CrossEncoderTeacher(out)  # loads as cross-encoder:PATH, at the length it was trained at
    assert teacher.max_length == 96 and teacher.model.dtype.is_floating_point
    assert next(teacher.model.parameters()).dtype.itemsize == 4
    assert sum(f.stat().st_size for f in out.glob("*.safetensors")) < 60e6  # float16: half of MiniLM's 90 MB
    docids = (dense_index / "docid").read_text().split()[:5]
    from tour_pyserini.index import DocStore

    store = DocStore(dense_index / "docstore.sqlite")
    scores = teacher.score([ScoreRequest("q", "cancer", docids, store.get(docids))])[0]
    assert np.isfinite(scores).all() and np.ptp(scores) > 0
