"""A teacher's training example (a query, its positives, its hard negatives) and the lists a step draws."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Example:
    qid: str
    query: str
    positives: list[str]  # docids
    negatives: list[str]  # hard candidates that are not positives
    texts: dict[str, str] = field(default_factory=dict)  # docid -> the text to read instead of the stored one
    similarities: dict[str, float] = field(default_factory=dict)  # docid of ``texts`` -> retriever similarity


@dataclass
class TrainingList:
    query: str
    docids: list[str]  # the positive first
    texts: dict[str, str]  # as Example.texts
    similarities: dict[str, float] = field(default_factory=dict)  # as Example.similarities


def draw_lists(examples: list[Example], negatives: int, rng: random.Random) -> list[TrainingList]:
    """One list per example: a random positive and ``negatives`` distinct hard negatives (with repeats only
    when the pool is smaller)."""
    lists = []
    for ex in examples:
        enough = len(ex.negatives) >= negatives
        negs = rng.sample(ex.negatives, negatives) if enough else rng.choices(ex.negatives, k=negatives)
        lists.append(TrainingList(ex.query, [rng.choice(ex.positives), *negs], ex.texts, ex.similarities))
    return lists
