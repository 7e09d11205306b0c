"""The two losses of ORQA's retriever learning, on torch score matrices (equations: docs/algorithms.md).

Both are one marginal likelihood: -log of the softmax mass that a row of scores puts on its positives.
TOUR-hard applies the same loss to a single query vector at test time
(``rewriters.updates.hard_loss_and_grad``); tests check that the two agree in value and gradient
(with ``min_mass=LOG_CLAMP``, TOUR's clamp).
"""

from __future__ import annotations

import math

import torch


def marginal_nll(
    scores: torch.Tensor, positives: torch.Tensor, min_mass: float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row -log sum_{b in positives} softmax(scores)_b, and which rows have a positive at all.

    ``scores`` (n, k), ``positives`` a boolean mask of the same shape. Computed in log space (no
    underflow for thousands of candidates). ``min_mass`` clamps the mass as TOUR does (``LOG_CLAMP``:
    zero gradient below it); training leaves it off, so that the worst-ranked positives still pull.
    A row without positives has loss 0 and no gradient: it contributes nothing.
    """
    positives = positives.bool()
    has_positive = positives.any(dim=1)
    log_all = torch.logsumexp(scores, dim=1)
    # a row without positives counts all of its blocks as positive: loss exactly 0, gradient exactly 0
    # (masking all of it to -inf would give a NaN gradient even behind torch.where)
    as_positive = positives | ~has_positive[:, None]
    log_pos = torch.logsumexp(scores.masked_fill(~as_positive, -math.inf), dim=1)
    log_mass = log_pos - log_all
    if min_mass is not None:
        log_mass = torch.clamp(log_mass, min=math.log(min_mass))
    return -log_mass, has_positive


def early_update_loss(scores: torch.Tensor, positives: torch.Tensor, temperature: float) -> tuple[torch.Tensor, int]:
    """ORQA's weakly supervised loss: the mean marginal NLL over questions with an answer-bearing block.

    ``scores`` (n, c) are the question's retrieval scores of its top-c blocks, ``positives`` marks the
    blocks containing an answer. Returns the loss and the number of questions skipped (no positive).
    """
    losses, kept = marginal_nll(scores / temperature, positives)
    skipped = int((~kept).sum())
    if skipped == len(kept):
        return scores.sum() * 0.0, skipped  # still a graph, so a step with nothing to learn is a no-op
    return losses[kept].mean(), skipped


def in_batch_nll(queries: torch.Tensor, blocks: torch.Tensor, temperature: float) -> torch.Tensor:
    """ICT's loss: row i of ``queries`` (n, d) must pick block i among the n blocks (n, d) of the batch."""
    scores = queries @ blocks.T / temperature
    eye = torch.eye(len(queries), dtype=torch.bool, device=scores.device)
    return marginal_nll(scores, eye)[0].mean()
