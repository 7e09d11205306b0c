"""The trained teachers shipped in models/: trained on training queries only, compact, carrying relevance."""

from __future__ import annotations

import json

import pytest
from conftest import ROOT

from tour_pyserini.data import read_qrels, read_topics
from tour_pyserini.eval import evaluate
from tour_pyserini.rewriters.rerank import Rerank
from tour_pyserini.teachers import TeacherContext, get_teacher

MODELS = ROOT / "models"
TEACHERS = {
    "scifact-ce": ("collections/scifact/topics.train.tsv", "collections/scifact/topics.test.tsv"),
    "nq-oracle-ce": ("collections/nq-oracle/topics.train.jsonl", "collections/nq-oracle/topics.test.jsonl"),
}


@pytest.mark.parametrize("name", sorted(TEACHERS))
def test_teacher_saw_training_queries_only(name):
    train_topics, test_topics = (read_topics(ROOT / p) for p in TEACHERS[name])
    report = json.loads((MODELS / name / "training.json").read_text())
    val = set(report["val_qids"])
    assert val and val <= {t.qid for t in train_topics}
    test_texts = {t.text for t in test_topics}
    assert not test_texts & {t.text for t in train_topics if t.qid in val}
    assert report["best_val_pairwise_accuracy"] > 0.75  # the untrained head is at chance (0.5)
    assert abs(report["saved_val_pairwise_accuracy"] - report["best_val_pairwise_accuracy"]) < 0.02
    size = sum(f.stat().st_size for f in (MODELS / name).glob("*.safetensors"))
    assert size < 50e6  # float16


@pytest.mark.slow
def test_scifact_teacher_learned_relevance(searcher, mini_scifact, cross_encoder_dir):
    """On judged SciFact test claims (never trained on), the trained head re-ranks far better than an untrained one.

    It does not beat the retriever it started from (bench-quality: rerank@100 nDCG@10 0.583 against
    0.645 on the full test set); this checks that training and loading carried relevance at all.
    """
    trained = get_teacher(f"cross-encoder:{MODELS / 'scifact-ce'}", TeacherContext())
    assert trained.max_length == 128  # the length it was trained at, from its tokenizer
    untrained = get_teacher(f"cross-encoder:{cross_encoder_dir}", TeacherContext(max_length=128))
    topics = read_topics(mini_scifact["topics"])[:30]
    qrels = read_qrels(mini_scifact["qrels"])
    qrels = {t.qid: qrels[t.qid] for t in topics}
    quality = {}
    for name, teacher in (("trained", trained), ("untrained", untrained)):
        results = searcher.retrieve([t.text for t in topics], [t.qid for t in topics], 20,
                                    rewriter=Rerank(teacher, depth=20))  # fmt: skip
        run = {r.qid: {h.docid: h.score for h in r.hits} for r in results}
        quality[name] = evaluate(qrels, run, ["nDCG@10"]).means["nDCG@10"]
    assert quality["trained"] > quality["untrained"] + 0.15, quality


def test_residual_scifact_teacher_improved_on_the_retriever_on_dev_claims_only():
    """models/scifact-rce: trained on training claims, chosen on a grouped dev split of them (where its first
    evaluation is the retriever's own ranking); its ensemble was fitted on the same dev claims."""
    train_topics, test_topics = (read_topics(ROOT / p) for p in TEACHERS["scifact-ce"])
    report = json.loads((MODELS / "scifact-rce" / "training.json").read_text())
    dev = set(report["dev_qids"])
    assert dev and dev <= {t.qid for t in train_topics} and report["train_queries"] + len(dev) == 807
    assert not {t.text for t in test_topics} & {t.text for t in train_topics if t.qid in dev}
    history = [h["dev_nDCG@10"] for h in report["history"]]
    assert report["best_dev_nDCG@10"] == max(history[1:]) > history[0]
    assert (MODELS / "scifact-rce" / "tour_pyserini_residual.json").is_file()
    assert sum(f.stat().st_size for f in (MODELS / "scifact-rce").glob("*.safetensors")) < 50e6  # float16
    ensemble = json.loads((MODELS / "scifact-rce" / "ensemble.json").read_text())
    assert [p["teacher"] for p in ensemble["parts"]] == ["cross-encoder:.", "bm25", "dense"]
    assert ensemble["fitted_on"]["queries"] == len(dev)
    alone = ensemble["fitted_on"]["alone"]
    assert ensemble["fitted_on"]["ensemble"] > max(alone.values())  # in-sample, on the dev claims
