"""Fitting residual query states v: the three objectives and the full-batch Adam loop.

Shapes: queries ``X`` (n, d), L2-normalised; each query's judged candidates ``Z`` (n, k, d), padded to
the longest list with ``mask`` (n, k) marking real ones; per-query normalised rewards ``R`` (n, k) in
[0, 1]; ``group`` (n,) maps each query to the state v_g it trains, ``weights`` (n,) sum to 1 within each
group. During fitting a query is x̃_q(v) = unit(x_q + v) and its student distribution over C_q is
softmax(x̃_q(v)·z_d / τ_S).

Every group's loss is sum_q w_q L_q(v_g) + λ‖v_g‖²; the groups share no parameter and Adam acts on each
coordinate alone, so fitting all groups in one tensor gives each group exactly the trajectory of a fit
of its own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from tour_pyserini.numbers import check_fields, non_negative_float, non_negative_int, param, positive_float

OBJECTIVES = ("kd", "rkl", "grpo")


@dataclass(frozen=True)
class FitConfig:
    """The objective and its hyper-parameters (the defaults are those of TTT-Embed), each declared once: ``ttt
    fit``'s flags, their help and ranges derive from it."""

    objective: str = param(
        "kd", str, "kd: KL(teacher || student); rkl: the reverse KL; grpo: Softmax-GRPO", choices=OBJECTIVES
    )
    tau_teacher: float = param(0.02, positive_float, "tau_T: teacher temperature on rewards in [0, 1]")
    tau_student: float = param(0.05, positive_float, "tau_S: student (and GRPO policy) temperature on cosine scores")
    ridge: float = param(0.3, non_negative_float, "lambda of lambda ||v||^2")
    steps: int = param(300, non_negative_int, "full-batch Adam steps")
    lr: float = param(0.01, positive_float, "Adam learning rate")
    clip: float = 0.2  # GRPO ratio clipping ε
    std_floor: float = 1e-4  # GRPO: advantages are (r - mean) / max(std, floor)

    def __post_init__(self) -> None:
        check_fields(self)

    def to_json(self) -> dict:
        return asdict(self)


def normalise_rewards(scores: np.ndarray) -> np.ndarray:
    """A query's teacher scores mapped to [0, 1] by min-max over its judged candidates (all equal: all 0).

    Any positive affine change of a teacher's scale (logits, BM25, grades) gives the same rewards, so
    τ_T = 0.02 means the same for every teacher: the best judged candidate gets 1, the worst 0, as a
    P(yes) reward model scores a clear positive and a clear negative.
    """
    scores = np.asarray(scores, dtype=np.float64)
    span = scores.max() - scores.min() if len(scores) else 0.0
    return (scores - scores.min()) / span if span > 0 else np.zeros_like(scores)


def masked_log_softmax(logits: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Row-wise log-softmax over the real entries of each row; padded entries get 0 (and probability 0)."""
    z = np.where(mask, logits, -np.inf)
    z = z - z.max(axis=-1, keepdims=True)
    z = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    return np.where(mask, z, 0.0)


def logit_gradients(
    log_p: np.ndarray,
    mask: np.ndarray,
    config: FitConfig,
    *,
    log_t: np.ndarray | None = None,
    log_ref: np.ndarray | None = None,
    advantages: np.ndarray | None = None,
) -> np.ndarray:
    """∂ℓ_q/∂a_qd (n, k) of each query's loss in its student logits a = x̃·z / τ_S (p = softmax(a)).

    With the teacher t = softmax(r̂ / τ_T):

    - kd,   ℓ = KL(t ‖ p):  ∂ℓ/∂a = p − t
    - rkl,  ℓ = KL(p ‖ t):  ∂ℓ/∂a = p ⊙ (log p − log t − ℓ)
    - grpo, ℓ = −Σ_d π_0(d) min(ρ_d A_d, clip(ρ_d, 1 ± ε) A_d), ρ = p/π_0:
      ∂ℓ/∂a = p ⊙ (b − Σ_d p_d b_d), b_d = −A_d where the unclipped term is the active one
      (ρ_d inside [1 − ε, 1 + ε], or ρ_d A_d below its clipped value), else 0.

    What does not change during a fit is passed in, computed once (``fit_targets``): ``log_t`` (kd,
    rkl), log π_0 as ``log_ref`` and A as ``advantages`` (grpo). Padded entries have p = 0 and get 0.
    """
    p = np.exp(log_p) * mask
    if config.objective == "grpo":
        if log_ref is None or advantages is None:
            raise ValueError("the grpo objective needs log_ref and advantages (from fit_targets)")
        ratio = np.exp(log_p - log_ref)
        clipped = np.clip(ratio, 1 - config.clip, 1 + config.clip)
        b = -advantages * ((ratio == clipped) | (ratio * advantages < clipped * advantages))
        return p * (b - (p * b).sum(-1, keepdims=True))
    if log_t is None:
        raise ValueError(f"the {config.objective} objective needs log_t (from fit_targets)")
    if config.objective == "kd":
        return p - np.exp(log_t) * mask
    gap = (log_p - log_t) * mask  # rkl
    return p * (gap - (p * gap).sum(-1, keepdims=True))


def grpo_advantages(R: np.ndarray, mask: np.ndarray, std_floor: float) -> np.ndarray:
    """A_d = (r̂_d − mean r̂) / max(std r̂, floor) over each query's judged candidates; padded entries 0."""
    count = mask.sum(-1, keepdims=True)
    mean = (R * mask).sum(-1, keepdims=True) / count
    std = np.sqrt((((R - mean) * mask) ** 2).sum(-1, keepdims=True) / count)
    return (R - mean) / np.maximum(std, std_floor) * mask


class Problem:
    """The arrays of a fit, sorted by group, and what does not depend on V, computed once: x_q·z_d, ‖x_q‖².

    Scores x̃_q(v)·z_d = (x_q·z_d + v·z_d) / ‖x_q + v‖ need only v·z_d and v·x_q per step, and the
    gradient only Z_qᵀ c_q − x_q c'_q. Each query's candidates are therefore stored with the query
    itself as one more row, A_q = [Z_q; x_q] (n, k + 1, d), so that each step reads A twice: A v for
    the scores, Aᵀ[c; −c'] for the gradient, as one matrix-vector product per group when groups are
    few (global, task) and one batched product otherwise (query). Those two reads are the cost of a
    step (memory-bound), so A and its products are in ``dtype`` (float32 by default, as the index
    stores its vectors); everything else is float64.
    """

    MANY_GROUPS = 32

    def __init__(self, X, Z, R, mask, group, weights, n_groups: int, dtype=np.float32):
        order = np.argsort(np.asarray(group), kind="stable")
        sort = lambda a, t=np.float64: np.ascontiguousarray(np.asarray(a, dtype=t)[order])  # noqa: E731
        X = sort(X)
        self.A, self.dtype = np.concatenate([sort(Z, dtype), X[:, None, :].astype(dtype)], axis=1), dtype
        self.R, self.weights, self.mask = sort(R), sort(weights), sort(mask, bool)
        self.group = sort(group, np.int64)
        self.starts = np.searchsorted(self.group, np.arange(n_groups))
        self.Zx = np.einsum("nkd,nd->nk", self.A[:, :-1], self.A[:, -1]).astype(np.float64)
        self.xx = (X * X).sum(-1)
        self.few = n_groups <= self.MANY_GROUPS
        if self.few:  # views of A: one product per group
            self.bounds = list(zip(self.starts, list(self.starts[1:]) + [len(self.group)]))
            self.flat = [self.A[a:b].reshape(-1, self.A.shape[-1]) for a, b in self.bounds]

    def scores(self, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """x̃_q(v_{g(q)})·z_d for every query and candidate (n, k), in group order, and ‖x_q + v_{g(q)}‖ (n,)."""
        Vp = V.astype(self.dtype)
        if self.few:
            Av = np.concatenate([flat @ v for flat, v in zip(self.flat, Vp)]).reshape(self.A.shape[:2])
        else:
            Av = np.einsum("nkd,nd->nk", self.A, Vp if len(V) == len(self.group) else Vp[self.group])
        norm = np.sqrt(self.xx + 2 * Av[:, -1] + (V * V).sum(-1)[self.group])
        return (self.Zx + Av[:, :-1]) / norm[:, None], norm

    def gradient(self, V: np.ndarray, S: np.ndarray, norm: np.ndarray, G: np.ndarray) -> np.ndarray:
        """∂/∂V of Σ_q Σ_d G_qd s_qd (G_g, d) for scores s = x̃·z, through the normalisation.

        ∂s_qd/∂v = (z_d − s_qd x̃_q) / ‖u_q‖ with u_q = x_q + v, so each group's gradient is
        Σ_q [Z_qᵀ G_q − (G_q·s_q) x̃_q] / ‖u_q‖, and x̃_q = u_q / ‖u_q‖ splits the second term into an
        x_q part (the last row of A) and a v part.
        """
        coef = (G * S).sum(-1) / norm**2
        c = np.concatenate([G / norm[:, None], -coef[:, None]], axis=1).astype(self.dtype)
        if self.few:
            AtC = np.stack([c[a:b].ravel() @ flat for (a, b), flat in zip(self.bounds, self.flat)])
        else:
            AtC = self.group_sums(np.einsum("nk,nkd->nd", c, self.A))
        return AtC - V * self.group_sums(coef)[:, None]

    def group_sums(self, a: np.ndarray) -> np.ndarray:
        """Sums of ``a`` over each group's queries (a is in group order); one query per group: ``a`` itself."""
        return a if len(self.starts) == len(self.group) else np.add.reduceat(a, self.starts)


def fit_targets(problem: Problem, config: FitConfig) -> dict[str, np.ndarray]:
    """The constant inputs of ``logit_gradients`` for ``problem``: the teacher's log t (kd, rkl), or the
    reference policy π_0 = p(v = 0), the unchanged query's, and the advantages (grpo)."""
    if config.objective != "grpo":
        return {"log_t": masked_log_softmax(problem.R / config.tau_teacher, problem.mask)}
    ref = problem.Zx / np.sqrt(problem.xx)[:, None] / config.tau_student
    return {
        "log_ref": masked_log_softmax(ref, problem.mask),
        "advantages": grpo_advantages(problem.R, problem.mask, config.std_floor),
    }


def fit(
    *,
    X: np.ndarray,
    Z: np.ndarray,
    R: np.ndarray,
    mask: np.ndarray,
    group: np.ndarray,
    weights: np.ndarray,
    n_groups: int,
    config: FitConfig | None = None,
    init: np.ndarray | None = None,
) -> np.ndarray:
    """The states V (n_groups, d): ``config.steps`` full-batch Adam steps from V = ``init`` (default 0) on every
    group's loss. A warm start (``init``, e.g. the state fitted before the latest rewards arrived) changes
    where Adam starts, not the loss: GRPO's reference policy stays the unchanged query's.

    The gradient is computed in closed form (``logit_gradients`` through ``Problem.gradient``, both
    checked against torch autograd) and handed to torch's fused Adam; the state, Adam's moments and
    the losses' arithmetic are float64.
    """
    import torch

    config = config or FitConfig()
    problem = Problem(X, Z, R, mask, group, weights, n_groups)
    V = np.zeros((n_groups, X.shape[1])) if init is None else np.array(init, dtype=np.float64)
    if V.shape != (n_groups, X.shape[1]):
        raise ValueError(f"init of shape {V.shape} for {n_groups} states of dimension {X.shape[1]}")
    param = torch.from_numpy(V)  # shares V's memory: the optimiser updates V in place
    # torch's Adam adds weight_decay * v to the gradient: the ridge's 2λv, in the optimiser's one pass
    optimiser = torch.optim.Adam([param], lr=config.lr, weight_decay=2 * config.ridge, fused=True)
    targets = fit_targets(problem, config)
    scale = problem.weights[:, None] / config.tau_student
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # torch's idle OpenMP workers would spin against numpy's BLAS threads
    try:
        for _ in range(config.steps):
            S, norm = problem.scores(V)
            log_p = masked_log_softmax(S / config.tau_student, problem.mask)
            G = logit_gradients(log_p, problem.mask, config, **targets) * scale
            param.grad = torch.from_numpy(problem.gradient(V, S, norm, G))
            optimiser.step()
    finally:
        torch.set_num_threads(threads)
    return V
