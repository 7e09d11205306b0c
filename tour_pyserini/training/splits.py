"""Dev splits of training queries that cannot flatter a model: no dev query shares a relevant document
with a training query.

SciFact's claims often cite the same abstract (48 of 81 randomly held-out claims shared one with a
training claim), so a random split lets a teacher memorise documents and look better on dev than on
test. Queries linked by a shared relevant document form one group; whole groups go to dev.
"""

from __future__ import annotations

import random
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import TypeVar

Q = TypeVar("Q", bound=Hashable)  # a query's id: a qid, or a question's position


def query_groups(qids: Sequence[Q], relevant: Mapping[Q, Iterable[Hashable]]) -> list[list[Q]]:
    """Connected components of queries, two queries being linked when they share a relevant document.

    Components come in the order of their first query in ``qids``; queries inside keep that order.
    """
    parent = {q: q for q in qids}

    def root(q: Q) -> Q:
        while parent[q] != q:
            parent[q] = parent[parent[q]]
            q = parent[q]
        return q

    owner: dict[Hashable, Q] = {}
    for q in qids:
        for doc in relevant.get(q, ()):
            if doc in owner:
                parent[root(q)] = root(owner[doc])
            else:
                owner[doc] = q
    groups: dict[Q, list[Q]] = {}
    for q in qids:
        groups.setdefault(root(q), []).append(q)
    return list(groups.values())


def grouped_split(
    qids: Sequence[Q], relevant: Mapping[Q, Iterable[Hashable]], *, dev_fraction: float, seed: int
) -> tuple[list[Q], list[Q]]:
    """(train, dev) query ids: groups in a seeded random order go to dev until it holds ``dev_fraction``
    of the queries (at least one group), the rest to train; both keep the order of ``qids``."""
    groups = query_groups(qids, relevant)
    random.Random(seed).shuffle(groups)
    target = round(len(qids) * dev_fraction)
    dev: set[Q] = set()
    for group in groups:
        if dev and len(dev) + len(group) > target:
            continue  # a large group that would overshoot waits; smaller ones may still fit
        dev.update(group)
        if len(dev) >= target:
            break
    return [q for q in qids if q not in dev], [q for q in qids if q in dev]
