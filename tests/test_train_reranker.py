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


def test_fresh_negatives_each_epoch(searcher, mini_scifact):
    import random

    examples = build_examples(searcher, read_topics(mini_scifact["topics"]), read_qrels(mini_scifact["qrels"]), 20)
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
    teacher = CrossEncoderTeacher(out, max_length=96)  # loads as cross-encoder:PATH
    docids = (dense_index / "docid").read_text().split()[:5]
    from tour_pyserini.index import DocStore

    store = DocStore(dense_index / "docstore.sqlite")
    scores = teacher.score([ScoreRequest("q", "cancer", docids, store.get(docids))])[0]
    assert np.isfinite(scores).all() and np.ptp(scores) > 0
