"""From rewarded queries to the residuals of a scope: grouping, query weights, padding, fitting."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tour_pyserini.ttt.objectives import FitConfig, fit, normalise_rewards
from tour_pyserini.ttt.state import SCOPES


@dataclass(frozen=True)
class RewardedQuery:
    """A query with its judged candidates: vector x (d,), candidate vectors Z (k, d), raw rewards (k,), and the
    candidates' docids where a rule re-searches the index (``--alpha-rule ranking``)."""

    task: str
    qid: str
    x: np.ndarray
    Z: np.ndarray
    rewards: np.ndarray
    docids: tuple[str, ...] = ()


def scope_plan(
    queries: Sequence[RewardedQuery], scope: str
) -> tuple[list[tuple[str | None, str | None]], np.ndarray, np.ndarray, list[int]]:
    """Keys of the scope's states, each query's group and weight, and n_g per key.

    Weights make every group's loss a mean: global gives each task the same weight and splits it
    equally among the task's queries, so a task with many rewarded queries does not drown the others;
    task averages its own queries; query (and neighbours, whose residuals are query states) weighs its one
    query 1.
    """
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; choose one of: {', '.join(SCOPES)}")
    tasks = list(dict.fromkeys(q.task for q in queries))
    per_task = {t: sum(q.task == t for q in queries) for t in tasks}
    keys: list[tuple[str | None, str | None]]
    if scope == "global":
        keys = [(None, None)]
        group = np.zeros(len(queries), dtype=np.int64)
        weights = np.array([1.0 / (len(tasks) * per_task[q.task]) for q in queries])
        return keys, group, weights, [len(queries)]
    if scope == "task":
        keys = [(t, None) for t in tasks]
        group = np.array([tasks.index(q.task) for q in queries], dtype=np.int64)
        weights = np.array([1.0 / per_task[q.task] for q in queries])
        return keys, group, weights, [per_task[t] for t in tasks]
    keys = [(q.task, q.qid) for q in queries]
    return keys, np.arange(len(queries)), np.ones(len(queries)), [1] * len(queries)


def pad(queries: Sequence[RewardedQuery]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """X (n, d), Z (n, k, d) float32 as indexes store them, normalised rewards R (n, k) and mask (n, k).

    k is the longest candidate list; shorter lists are padded with zero vectors that the mask hides.
    """
    n, d = len(queries), len(queries[0].x)
    k = max(len(q.rewards) for q in queries)
    X = np.stack([q.x for q in queries]).astype(np.float64)
    Z, R, mask = np.zeros((n, k, d), dtype=np.float32), np.zeros((n, k)), np.zeros((n, k), dtype=bool)
    for i, q in enumerate(queries):
        m = len(q.rewards)
        Z[i, :m], R[i, :m], mask[i, :m] = q.Z, normalise_rewards(q.rewards), True
    return X, Z, R, mask


def fit_scope(
    queries: Sequence[RewardedQuery],
    scope: str,
    config: FitConfig | None = None,
    *,
    init: Mapping[tuple, np.ndarray] | None = None,
) -> tuple[list[tuple], np.ndarray, list[int]]:
    """Keys, fitted residuals (G, d) and n_g of ``scope`` over ``queries`` (each (task, qid) once).

    ``init`` warm-starts the keys it holds from their residual (a state's ``dict(zip(keys, vectors))``);
    the other keys start at 0.
    """
    if not queries:
        raise ValueError("no rewarded queries to fit")
    if len({(q.task, q.qid) for q in queries}) != len(queries):
        raise ValueError("a query appears twice among the rewarded queries")
    keys, group, weights, counts = scope_plan(queries, scope)
    X, Z, R, mask = pad(queries)
    start = None
    if init is not None:
        zero = np.zeros(X.shape[1])
        start = np.stack([np.asarray(init.get(key, zero), dtype=np.float64) for key in keys])
    V = fit(
        X=X,
        Z=Z,
        R=R,
        mask=mask,
        group=group,
        weights=weights,
        n_groups=len(keys),
        config=config or FitConfig(),
        init=start,
    )
    return keys, V, counts
