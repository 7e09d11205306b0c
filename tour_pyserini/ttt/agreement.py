"""How far a query vector orders judged candidates as the teacher does: the check a new state must pass before
a server serves it.

Agreement of one query is the share of its candidate pairs that the teacher orders strictly and the student
(inner products with the query vector) orders the same way; a pair the student ties counts half, so a vector
that says nothing scores 0.5. A state is judged by the mean agreement over queries it was not fitted on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def pair_agreement(student: np.ndarray, teacher: np.ndarray) -> float:
    """Share of the pairs (i, j) with teacher[i] > teacher[j] where student[i] > student[j] (ties: 1/2); NaN
    when the teacher orders no pair.

    >>> pair_agreement(np.array([3.0, 2.0, 1.0]), np.array([1.0, 0.0, 0.0]))
    1.0
    >>> pair_agreement(np.array([1.0, 2.0]), np.array([1.0, 0.0]))
    0.0
    """
    teacher, student = np.asarray(teacher, dtype=np.float64), np.asarray(student, dtype=np.float64)
    ordered = teacher[:, None] > teacher[None, :]
    if not ordered.any():
        return float("nan")
    gap = (student[:, None] - student[None, :])[ordered]
    return float(((gap > 0).sum() + 0.5 * (gap == 0).sum()) / ordered.sum())


def mean_agreement(X: np.ndarray, candidates: Sequence[np.ndarray], rewards: Sequence[np.ndarray]) -> float:
    """Mean pair agreement of query vectors ``X`` (n, d) over each query's candidate vectors (k_i, d) and
    rewards (k_i,); queries whose teacher orders no pair are left out (NaN when none is left)."""
    values = [pair_agreement(Z @ x, r) for x, Z, r in zip(X, candidates, rewards)]
    values = [v for v in values if not np.isnan(v)]
    return float(np.mean(values)) if values else float("nan")


def judged_ndcg(ranking: Sequence[str], gains: Mapping[str, float], depth: int = 10) -> float:
    """nDCG@``depth`` of a re-searched ``ranking`` whose gains are the judged documents' rewards (normalised to
    [0, 1]); a document no teacher judged gains 0, so a move that brings unjudged documents in is counted as losing
    what they displace. NaN when no judged document gains anything.

    >>> judged_ndcg(["a", "b"], {"a": 1.0, "b": 0.0})
    1.0
    >>> round(judged_ndcg(["new", "a"], {"a": 1.0, "b": 0.0}), 4)
    0.6309
    """
    ideal = sorted(gains.values(), reverse=True)[:depth]
    discounts = 1.0 / np.log2(np.arange(2, depth + 2))
    best = float(np.dot(ideal, discounts[: len(ideal)]))
    if best <= 0:
        return float("nan")
    found = [gains.get(d, 0.0) for d in ranking[:depth]]
    return float(np.dot(found, discounts[: len(found)])) / best
