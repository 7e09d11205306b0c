"""Fitting an ensemble teacher's weights: the listwise likelihood of the relevant candidates on dev queries.

For query q with candidate features F_q (n_q candidates x p teachers' raw scores) and relevant set R_q,
the weights w minimise

    L(w) = mean_q [ -log sum_{d in R_q} softmax(F_q w)_d ] + l2 * ||w||^2

(the marginal likelihood the trainers use, ``losses.marginal_nll``). Its scale is free: larger weights
sharpen the softmax, so the fit also chooses how peaked the teacher's distribution is. Queries without
a relevant candidate carry no signal and are left out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def ensemble_loss(weights, features: Sequence[np.ndarray], relevant: Sequence[np.ndarray], l2: float):
    """L(w) as a torch scalar (differentiable in ``weights``, a (p,) tensor)."""
    import torch

    from tour_pyserini.training.losses import marginal_nll

    losses = []
    for f, r in zip(features, relevant):
        scores = torch.as_tensor(f, dtype=torch.float64) @ weights
        losses.append(marginal_nll(scores[None, :], torch.as_tensor(r, dtype=torch.bool)[None, :])[0][0])
    return torch.stack(losses).mean() + l2 * (weights**2).sum()


def fit_weights(
    features: Sequence[np.ndarray], relevant: Sequence[np.ndarray], *, l2: float = 1e-4, init: Sequence[float]
) -> np.ndarray:
    """The weights minimising :func:`ensemble_loss` from ``init`` (L-BFGS), over queries with a relevant candidate."""
    import torch

    kept = [(f, r) for f, r in zip(features, relevant) if np.any(r)]
    if not kept:
        raise ValueError("no query has a relevant candidate to fit on")
    feats, rels = [f for f, _ in kept], [r for _, r in kept]
    weights = torch.tensor(list(init), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([weights], lr=1.0, max_iter=500, tolerance_grad=1e-10, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = ensemble_loss(weights, feats, rels, l2)
        loss.backward()
        return loss

    opt.step(closure)
    return weights.detach().numpy().copy()
