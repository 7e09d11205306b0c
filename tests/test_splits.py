"""Dev splits grouped by shared relevant documents, on SciFact's real training qrels."""

from __future__ import annotations

from conftest import ROOT

from tour_pyserini.files import read_qrels, read_topics
from tour_pyserini.training.splits import grouped_split, query_groups


def relevant_sets():
    qrels = read_qrels(ROOT / "qrels/scifact.train.txt")
    qids = [t.qid for t in read_topics(ROOT / "collections/scifact/topics.train.tsv")]
    return qids, {q: {d for d, r in qrels.get(q, {}).items() if r > 0} for q in qids}


def test_groups_are_the_components_of_shared_documents():
    relevant = {"a": {"x"}, "b": {"y"}, "c": {"x", "z"}, "d": {"z"}, "e": set()}
    assert query_groups(list("abcde"), relevant) == [["a", "c", "d"], ["b"], ["e"]]


def test_no_dev_query_shares_a_relevant_document_with_training():
    qids, relevant = relevant_sets()
    train, dev = grouped_split(qids, relevant, dev_fraction=0.2, seed=13)
    assert sorted(train + dev) == sorted(qids) and not set(train) & set(dev)
    assert abs(len(dev) - 0.2 * len(qids)) <= 2
    dev_docs = set().union(*(relevant[q] for q in dev))
    assert not dev_docs & set().union(*(relevant[q] for q in train))
    # a random split of the same size would share documents: the grouping is what prevents it
    import random

    shuffled = random.Random(0).sample(qids, len(qids))
    rdev, rtrain = shuffled[: len(dev)], shuffled[len(dev) :]
    assert set().union(*(relevant[q] for q in rdev)) & set().union(*(relevant[q] for q in rtrain))


def test_the_split_is_seeded():
    qids, relevant = relevant_sets()

    def split(seed):
        return grouped_split(qids, relevant, dev_fraction=0.2, seed=seed)

    assert split(1) == split(1) and split(1) != split(2)
