"""Training a residual cross-encoder teacher with hard negatives and a listwise loss, on a real slice of SciFact."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from tour_pyserini.errors import UserError
from tour_pyserini.files import read_qrels, read_topics
from tour_pyserini.teachers import ScoreRequest, TeacherContext, get_teacher
from tour_pyserini.training.examples import draw_lists
from tour_pyserini.training.reranker import TrainConfig, build_examples, positives_of, train

pytestmark = pytest.mark.slow


def test_positives_from_answer_strings(mini_nq):
    """Without qrels, a candidate is positive when it contains one of the topic's answers (DPR's rule)."""
    from tour_pyserini.eval.answers import AnswerMatcher
    from tour_pyserini.index import DocStore
    from tour_pyserini.search import Bm25Searcher

    topics = read_topics(mini_nq["topics"])[:40]
    results = Bm25Searcher.from_index(mini_nq["bm25"]).retrieve([t.text for t in topics], [t.qid for t in topics], 20)
    store = DocStore(mini_nq["bm25"] / "docstore.sqlite")
    rankings = {r.qid: r.hits for r in results}
    examples = build_examples(topics, positives_of(rankings, topics, None, store), rankings)
    assert len(examples) >= 20
    matcher = AnswerMatcher(store)
    answers = {t.qid: t.answers for t in topics}
    for ex in examples:
        assert len(ex.positives) + len(ex.negatives) == 20
        for docid, expected in [(d, True) for d in ex.positives] + [(d, False) for d in ex.negatives]:
            assert matcher.has_answer(docid, store.get([docid])[0].text, answers[ex.qid]) is expected


def test_hard_negatives_from_both_rankings_and_fresh_lists_each_call(searcher, bm25_index, mini_scifact):
    from tour_pyserini.search import Bm25Searcher

    topics = read_topics(mini_scifact["topics"])
    texts, qids = [t.text for t in topics], [t.qid for t in topics]
    dense = searcher.batch_search(texts, qids, k=10)
    bm25 = {r.qid: r.hits for r in Bm25Searcher.from_index(bm25_index).retrieve(texts, qids, 10)}
    positives = positives_of(dense, topics, read_qrels(mini_scifact["qrels"]))
    examples = build_examples(topics, positives, dense, bm25)
    assert examples
    for ex in examples:
        pool = {h.docid for h in dense[ex.qid]} | {h.docid for h in bm25[ex.qid]}
        assert set(ex.negatives) == pool - set(ex.positives) and len(set(ex.negatives)) == len(ex.negatives)
    rng = random.Random(0)
    first, second = draw_lists(examples, 4, rng), draw_lists(examples, 4, rng)
    for drawn, ex in zip(first, examples):
        query, docs = drawn.query, drawn.docids
        assert query == ex.query and docs[0] in ex.positives and len(docs) == 5
        assert len(set(docs[1:])) == 4 and set(docs[1:]) <= set(ex.negatives)
    assert first != second


def test_training_starts_at_the_retriever_and_saves_a_residual_teacher(
    dense_index, bm25_index, mini_scifact, tmp_path, encoder_loads
):
    from tour_pyserini.encoders import bundled_model_dir
    from tour_pyserini.eval import evaluate

    config = TrainConfig(
        epochs=1,
        queries_per_step=4,
        negatives=3,
        lr=1e-4,
        max_length=64,
        hard_depth=10,
        dev_fraction=0.25,
        dev_depth=10,
        evals_per_epoch=1,
        seed=3,
    )
    out = tmp_path / "ce"
    topics, qrels = read_topics(mini_scifact["topics"]), read_qrels(mini_scifact["qrels"])
    report = train(str(dense_index), topics, qrels, out, str(bundled_model_dir()), config)
    assert len(encoder_loads) == 1  # the residual's dense scores share the searcher's encoder and index
    assert json.loads((out / "training.json").read_text()) == report
    dev = report["dev_qids"]
    train_docs = {d for t in topics if t.qid not in dev for d, r in qrels.get(t.qid, {}).items() if r > 0}
    assert dev and not train_docs & {d for q in dev for d, r in qrels[q].items() if r > 0}
    # the head starts at zero: step 0 is the retriever's own ranking of the dev queries, to the last digit
    from tour_pyserini.search import TourSearcher

    text = {t.qid: t.text for t in topics}
    ranked = TourSearcher.from_index(dense_index).batch_search([text[q] for q in dev], dev, k=10)
    base = evaluate(
        {q: qrels[q] for q in dev}, {q: {h.docid: h.score for h in hits} for q, hits in ranked.items()}, ["nDCG@10"]
    ).means["nDCG@10"]
    assert report["history"][0]["dev_nDCG@10"] == pytest.approx(base, abs=1e-9)
    assert report["best_dev_nDCG@10"] == max(h["dev_nDCG@10"] for h in report["history"][1:])

    context = TeacherContext(index_dir=str(dense_index))
    teacher = get_teacher(f"cross-encoder:{out}", context)  # the residual teacher, at its training length
    assert teacher.max_length == 64 and teacher.dense_scale == 20.0
    assert sum(f.stat().st_size for f in out.glob("*.safetensors")) < 60e6  # float16
    docids = (dense_index / "docid").read_text().split()[:5]
    from tour_pyserini.index import DocStore

    request = ScoreRequest("q", "cancer", docids, DocStore(dense_index / "docstore.sqlite").get(docids))
    logits = teacher.score_pairs(["cancer"] * 5, [d.contents for d in request.docs])
    dense = get_teacher("dense", context).score([request])[0]
    np.testing.assert_allclose(teacher.score([request])[0], logits + 20.0 * dense, rtol=1e-6)
    assert "20.0 x dense" in teacher.fingerprint

    with pytest.raises(UserError, match="needs a dense index"):
        get_teacher(f"cross-encoder:{out}", TeacherContext())
    from tour_pyserini.teachers.cross_encoder import write_residual

    write_residual(out, scale=20.0, encoder="other", encoder_sha256="0" * 64)
    with pytest.raises(UserError, match="trained on top of encoder other"):
        get_teacher(f"cross-encoder:{out}", context)


def test_another_collections_questions_take_their_similarities_from_its_stored_vectors(
    dense_index, bm25_index, mini_scifact
):
    """An --extra-index built by the retriever's encoder gives each extra list its residual similarities once,
    from its stored vectors: what encoding the list's texts at every step gives, to the last few bits."""
    from tour_pyserini.encoders import bundled_model_dir
    from tour_pyserini.index import DocStore
    from tour_pyserini.index.layout import IndexMeta
    from tour_pyserini.teachers.dense import DenseTeacher
    from tour_pyserini.training.reranker import ListwiseTask, question_examples

    topics, qrels = read_topics(mini_scifact["topics"]), read_qrels(mini_scifact["qrels"])
    encoder = IndexMeta.read(dense_index).encoder
    args = (str(dense_index), topics, qrels, 6)
    stored = question_examples(*args, depth=5, rng=random.Random(0), encoder=encoder)
    encoded = question_examples(*args, depth=5, rng=random.Random(0))
    other = question_examples(*args, depth=5, rng=random.Random(0), encoder={**encoder, "max_length": 128})
    assert [ex.texts for ex in stored] == [ex.texts for ex in encoded] == [ex.texts for ex in other]
    assert all(ex.similarities.keys() == ex.texts.keys() for ex in stored)
    assert not any(ex.similarities for ex in encoded + other)  # no encoder, or another one: encoded each step

    store, dense = DocStore(dense_index / "docstore.sqlite"), DenseTeacher.of(dense_index)
    config = TrainConfig(max_length=64)
    trainer = ListwiseTask(str(bundled_model_dir()), store, dense, config, encoder=encoder)
    for ex in stored:
        again = trainer.text_similarities(ex.query, ex.texts)
        np.testing.assert_allclose([ex.similarities[d] for d in ex.texts], [again[d] for d in ex.texts], atol=1e-5)
    lists = draw_lists(stored[:2], 3, random.Random(1))
    assert all(x.similarities is ex.similarities for x, ex in zip(lists, stored))


def test_bad_training_options_fail_before_anything_loads(tmp_path):
    from tour_pyserini.commands.train_reranker import main

    with pytest.raises(UserError, match="--negatives must be positive"):
        main(["--index", "x", "--topics", "t", "--output", str(tmp_path / "m"), "--negatives", "0"])
    with pytest.raises(UserError, match="--extra-topics and --extra-index go together"):
        main(["--index", "x", "--topics", "t", "--output", str(tmp_path / "m"), "--extra-topics", "q"])
    with pytest.raises(UserError, match="one at a time"):
        main(
            [
                "--index",
                "x",
                "--topics",
                "t",
                "--output",
                str(tmp_path / "m"),
                "--extra-topics",
                "q",
                "--extra-index",
                "i",
                "--pseudo",
                "ict",
            ]
        )
    with pytest.raises(SystemExit):  # argparse's own one line: invalid choice
        main(["--index", "x", "--topics", "t", "--output", str(tmp_path / "m"), "--pseudo", "bm25"])
    (tmp_path / "m").mkdir()
    with pytest.raises(UserError, match="already exists"):
        main(["--index", "x", "--topics", "t", "--output", str(tmp_path / "m")])


@pytest.mark.parametrize("kind", ["ict", "ensemble", "questions"])
def test_extra_examples_join_each_step_and_max_steps_stops_early(kind, dense_index, bm25_index, mini_scifact, tmp_path):
    from tour_pyserini.encoders import bundled_model_dir

    pseudo = kind if kind != "questions" else "none"
    config = TrainConfig(
        epochs=1,
        queries_per_step=4,
        negatives=3,
        max_length=64,
        hard_depth=10,
        dev_fraction=0.25,
        dev_depth=5,
        evals_per_epoch=1,
        pseudo=pseudo,
        extra_per_step=2,
        max_steps=2,
        seed=3,
    )
    topics, qrels = read_topics(mini_scifact["topics"]), read_qrels(mini_scifact["qrels"])
    # "another collection": the same slice, read through the questions path (texts carried with each list)
    questions = (str(dense_index), topics, qrels) if kind == "questions" else None
    report = train(
        str(dense_index), topics, qrels, tmp_path / "ce", str(bundled_model_dir()), config, questions=questions
    )
    assert report["extra_examples"] == 4  # two steps of two
    assert [h["step"] for h in report["history"]] == [0, 2]  # stopped at max_steps, evaluated there
