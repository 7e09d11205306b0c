"""The math of the rewriters as small pure functions on NumPy arrays (equations: docs/algorithms.md).

Shapes: a query vector ``q`` is (d,), candidate vectors ``C`` are (k, d) in retrieval order, scores
are (k,). Everything here is testable against hand-computed values without Java or models.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

LOG_CLAMP = 1e-7  # the official TOUR code clamps probabilities at 1e-7 inside the log


def fill_unscored(scores: np.ndarray) -> np.ndarray:
    """Teacher scores with each missing one (NaN: the teacher could not score that pair) set one below the
    lowest score given, so that candidates the teacher could not judge rank below every one it did; scores
    with none given stay all NaN (the caller keeps that query's retriever order)."""
    scores = np.asarray(scores, dtype=np.float64)
    given = ~np.isnan(scores)
    if given.all() or not given.any():
        return scores
    return np.where(given, scores, scores[given].min() - 1.0)


def softmax(x: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    z = np.asarray(x, dtype=np.float64) / temperature
    z = np.exp(z - z.max())
    return z / z.sum()


def nucleus(teacher_probs: np.ndarray, p: float) -> np.ndarray:
    """Indices of C_hard: the smallest prefix of candidates, sorted by teacher probability, whose mass is >= p.

    Ties in probability keep retrieval order (stable sort), so the set is deterministic; the teacher's
    top-1 is always included, and p = 1 selects every candidate.
    """
    if not 0.0 < p <= 1.0:
        raise ValueError(f"nucleus p must be in (0, 1], got {p}")
    order = np.argsort(-np.asarray(teacher_probs, dtype=np.float64), kind="stable")
    mass = np.cumsum(np.asarray(teacher_probs, dtype=np.float64)[order])
    size = int(np.searchsorted(mass, p * (1.0 - 1e-9))) + 1  # tolerance: floating sums of p = 1
    return order[: min(size, len(order))]


def hard_loss_and_grad(
    q: np.ndarray,
    C: np.ndarray,
    positives: np.ndarray,
    temperature: float = 1.0,
) -> tuple[float, np.ndarray]:
    """L_hard = -log sum_{c in positives} P_k(c|q) with P_k = softmax(C q / temperature), and dL/dq.

    dL/dq = (sum_i P_k(c_i) c_i - sum_{i in positives} P_k(c_i | positives) c_i) / temperature: towards
    the retriever-weighted mean of the pseudo positives, away from the retriever-weighted mean of all.
    ``temperature`` is the retriever's (1 in the paper, whose DPR scores are unnormalised; a unit-length
    encoder trained at scale s has 1/s). As in the official code the mass is clamped at 1e-7 inside the
    log, and, as torch's clamp does, the gradient is zero when the mass is below the clamp.
    """
    p_k = softmax(C @ q, temperature)
    mass = p_k[positives].sum()
    loss = -float(np.log(max(mass, LOG_CLAMP)))
    if mass < LOG_CLAMP:
        return loss, np.zeros_like(q, dtype=np.float64)
    within = np.zeros_like(p_k)
    within[positives] = p_k[positives] / mass
    return loss, (p_k - within) @ C / temperature


def soft_loss_and_grad(
    q: np.ndarray,
    C: np.ndarray,
    teacher_probs: np.ndarray,
    temperature: float = 1.0,
) -> tuple[float, np.ndarray]:
    """L_soft = KL(P_teacher || P_k), P_k = softmax(C q / temperature), and
    dL/dq = (sum_i P_k(c_i) c_i - sum_i P_teacher(c_i) c_i) / temperature.

    log P_k is computed exactly (log-softmax, no clamp), so the gradient is that of the loss reported
    even where a sharp retriever distribution puts less than 1e-7 on a candidate.
    """
    z = np.asarray(C @ q, dtype=np.float64) / temperature
    log_p = z - (z.max() + np.log(np.exp(z - z.max()).sum()))
    t = np.asarray(teacher_probs, dtype=np.float64)
    nz = t > 0
    loss = float(np.sum(t[nz] * (np.log(t[nz]) - log_p[nz])))
    return loss, (np.exp(log_p) - t) @ C / temperature


def clip_by_norm(grad: np.ndarray, max_norm: float | None) -> np.ndarray:
    """Gradient-norm clipping as ``torch.nn.utils.clip_grad_norm_`` does it (factor capped at 1)."""
    if max_norm is None:
        return grad
    norm = float(np.linalg.norm(grad))
    return grad * min(1.0, max_norm / (norm + 1e-6))


def sgd_step(
    q: np.ndarray, grad: np.ndarray, buf: np.ndarray | None, lr: float, momentum: float, weight_decay: float
) -> tuple[np.ndarray, np.ndarray]:
    """One ``torch.optim.SGD`` step (momentum, dampening 0, L2 weight decay); returns (new q, new buffer)."""
    g = grad + weight_decay * q
    buf = g if buf is None else momentum * buf + g
    return q - lr * buf, buf


UNIT_TOLERANCE = 0.05  # vectors whose norms are within 5% of 1 count as unit length


@dataclass(frozen=True)
class SimilarityScale:
    """How far a query's vectors are from unit length: ``query`` = ||q_0||, ``documents`` = the median norm of
    its first candidates, each rounded to three significant digits; both exactly 1 for unit-length encoders
    (within :data:`UNIT_TOLERANCE`), so their runs do not change by a bit.

    TOUR's hyperparameters are stated for unit vectors. With q' = s_q q and c' = s_c c, the loop runs the
    same trajectory, q'_t = s_q q_t, when the temperatures of similarities are multiplied by s_q s_c, the
    learning rate by s_q^2, the clipping norm divided by s_q and the weight decay by s_q^2."""

    query: float = 1.0
    documents: float = 1.0

    @classmethod
    def of(cls, q: np.ndarray, C: np.ndarray) -> SimilarityScale:
        s_q, s_c = float(np.linalg.norm(q)), float(np.median(np.linalg.norm(C, axis=1)))
        if abs(s_q - 1) <= UNIT_TOLERANCE and abs(s_c - 1) <= UNIT_TOLERANCE:
            return cls()
        return cls(_three_digits(s_q), _three_digits(s_c))

    def temperature(self, t: float) -> float:
        return t * self.query * self.documents

    def lr(self, lr: float) -> float:
        return lr * self.query**2

    def clip(self, clip: float | None) -> float | None:
        return None if clip is None else clip / self.query

    def weight_decay(self, w: float) -> float:
        return w / self.query**2


def _three_digits(x: float) -> float:
    return float(f"{x:.3g}") if x > 0 else 1.0


def linear_lr(lr: float, t: int, iterations: int) -> float:
    """Linear decay with no warm-up: lr * (T - t) / T for t = 0..T-1 (1.2, 0.8, 0.4 for lr 1.2, T 3)."""
    return lr * (iterations - t) / iterations


def rocchio(q: np.ndarray, C: np.ndarray, alpha: float, beta: float, gamma: float, topk: int, bottomk: int):
    """Pyserini's ``DenseVectorRocchioPrf``: alpha q + beta mean(top-k) - gamma mean(bottom-k), in its dtype."""
    new_q = alpha * q + beta * np.mean(C[:topk], axis=0)
    if bottomk > 0:
        new_q -= gamma * np.mean(C[-bottomk:], axis=0)
    return new_q


def average_prf(q: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Pyserini's ``DenseVectorAveragePrf``: the mean of the query and the feedback vectors."""
    return np.mean(np.vstack((q, C)), axis=0)


def aggregate(teacher_scores: np.ndarray, retriever_scores: np.ndarray, lam: float, smoothing: float = 100.0):
    """Final TOUR / re-ranking scores: lam softmax(teacher) + (1 - lam) softmax(sim / smoothing) over the list."""
    return lam * softmax(teacher_scores) + (1.0 - lam) * softmax(retriever_scores, smoothing)


def refit_update(
    q: np.ndarray, C: np.ndarray, teacher_probs: np.ndarray, lr: float, steps: int, temperature: float = 1.0
) -> tuple[np.ndarray, list[float]]:
    """ReFIT's distillation: ``steps`` plain gradient steps q <- q - lr dL_soft/dq over the fixed candidates ``C``
    (the first search's top-k, never searched again in between); returns the new q and the loss before each step."""
    losses = []
    for _ in range(steps):
        loss, grad = soft_loss_and_grad(q, C, teacher_probs, temperature)
        losses.append(loss)
        q = q - lr * grad
    return q, losses


def confidence_weights(
    scores: np.ndarray, positives: int, negatives: int, temperature: float
) -> tuple[np.ndarray, np.ndarray]:
    """DART's confidence in its pseudo labels, from the retriever's own scores (best first): softmax(s / temperature)
    over the top ``positives``, and softmax(-s / temperature) over the bottom ``negatives`` (the lower, the surer)."""
    s = np.asarray(scores, dtype=np.float64)
    return softmax(s[:positives], temperature), softmax(-s[len(s) - negatives :], temperature)


def adaptive_margin(q: np.ndarray, first: np.ndarray, margin: float, slope: float) -> float:
    """DART's margin for one query: ``margin`` + ``slope`` (1 - cos(q, c_1)), wider the less sure the retriever is of
    its first document c_1. The cosine rather than the inner product keeps the widening within [0, 2 slope] on any
    encoder's scale (for unit-length vectors the two are the same)."""
    norms = float(np.linalg.norm(q) * np.linalg.norm(first))
    cosine = float(q @ first) / norms if norms > 0 else 0.0
    return margin + slope * (1.0 - cosine)


def margin_loss_and_grad(
    scores: np.ndarray, w_pos: np.ndarray, w_neg: np.ndarray, margin: float
) -> tuple[float, np.ndarray]:
    """L = sum_{p, n} w_p w_n max(0, margin - (s_p - s_n)), the positives being the first ``len(w_pos)`` scores and
    the negatives the last ``len(w_neg)``, and dL/ds. A pair exactly at the margin adds no gradient (as torch's
    relu)."""
    s = np.asarray(scores, dtype=np.float64)
    k, n_pos, n_neg = len(s), len(w_pos), len(w_neg)
    slack = margin - (s[:n_pos, None] - s[None, k - n_neg :])
    weights = np.outer(w_pos, w_neg)
    active = weights * (slack > 0)
    grad = np.zeros(k)
    grad[:n_pos] -= active.sum(axis=1)
    grad[k - n_neg :] += active.sum(axis=0)
    return float(np.sum(weights * np.maximum(slack, 0.0))), grad


def bilinear_grad(q: np.ndarray, C: np.ndarray, score_grad: np.ndarray) -> np.ndarray:
    """dL/dW for the scores s_j = q^T W c_j: q (C^T dL/ds)^T, always of rank one."""
    return np.outer(q, C.T @ score_grad)


def dart_adapt(
    q: np.ndarray,
    C: np.ndarray,
    buffer: np.ndarray | None,
    w_pos: np.ndarray,
    w_neg: np.ndarray,
    margin: float,
    lr: float,
    steps: int,
) -> tuple[np.ndarray, np.ndarray, list[float]]:
    """DART's steps on W for one query, from W_0 = I + ``buffer`` (None: zero): ``steps`` SGD steps
    W <- W - lr dL/dW on the margin loss over the scores s = C W^T q.

    Each dL/dW is q g^T (:func:`bilinear_grad`), so W = I + B + q h^T throughout and only h (d,) is kept: the scores
    are C (W_0^T q + |q|^2 h), O(kd) per step instead of O(d^2). Returns the final scores, h and the loss before each
    step."""
    u = q if buffer is None else q + buffer.T @ q
    qq = float(q @ q)
    h = np.zeros_like(q, dtype=np.float64)
    losses = []
    for _ in range(steps):
        loss, score_grad = margin_loss_and_grad(C @ (u + qq * h), w_pos, w_neg, margin)
        losses.append(loss)
        h = h - lr * (C.T @ score_grad)
    return C @ (u + qq * h), h, losses


def dart_buffer(buffer: np.ndarray | None, q: np.ndarray, h: np.ndarray, momentum: float) -> np.ndarray | None:
    """The cross-query buffer after a query: B' = momentum (W - I) = momentum (B + q h^T), the query's adapted W
    shrunk towards the identity; the next query starts from W_0 = I + B'. ``momentum`` 0 keeps no buffer (None)."""
    if momentum == 0:
        return None
    adapted = np.outer(q, h) if buffer is None else buffer + np.outer(q, h)
    return momentum * adapted
