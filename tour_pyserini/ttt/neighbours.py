"""The neighbours scope: an unseen query borrows the query states of the rewarded queries most like it.

Each rewarded query q keeps its own residual v_q (fitted as a query state) and its raw vector a_q (the anchor).
A query x is moved by the mixture r(x) = Σ_{j ∈ N(x)} w_j α_j v_j over the ``neighbours`` anchors nearest x by
cosine, with w = softmax(cos(x, a_j) / ``temperature``) over them: feedback from similar past queries, which
is what carries over to new queries in deployed systems. A rewarded query is its own nearest anchor (cosine 1),
so it is moved mostly by its own state.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from tour_pyserini.numbers import check_fields, param, positive_float, positive_int


@dataclass(frozen=True)
class NeighbourConfig:
    """How a neighbours state mixes its query states, each parameter declared once."""

    neighbours: int = param(10, positive_int, "rewarded queries whose states an unseen query mixes (neighbours scope)")
    neighbour_temperature: float = param(
        0.05, positive_float, "softmax temperature on the cosines to those rewarded queries (neighbours scope)"
    )

    def __post_init__(self) -> None:
        check_fields(self)

    def to_json(self) -> dict:
        return asdict(self)


def mix(X: np.ndarray, anchors: np.ndarray, residuals: np.ndarray, config: NeighbourConfig) -> np.ndarray:
    """r(x) (n, d) float64 for queries ``X`` (n, d) from ``anchors`` (m, d) and their scaled ``residuals`` α_j v_j
    (m, d): the softmax-weighted sum over each query's ``config.neighbours`` nearest anchors by cosine."""
    X, anchors = np.asarray(X, dtype=np.float64), np.asarray(anchors, dtype=np.float64)
    if not len(anchors):
        return np.zeros((len(X), X.shape[1]))
    unit = lambda a: a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)  # noqa: E731
    sims = unit(X) @ unit(anchors).T
    top = np.argsort(-sims, axis=1, kind="stable")[:, : config.neighbours]
    near = np.take_along_axis(sims, top, axis=1) / config.neighbour_temperature
    w = np.exp(near - near.max(axis=1, keepdims=True))
    w /= w.sum(axis=1, keepdims=True)
    return np.einsum("nk,nkd->nd", w, np.asarray(residuals, dtype=np.float64)[top])
