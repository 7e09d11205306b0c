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

from tour_pyserini.errors import UserError
from tour_pyserini.rewriters.updates import softmax

OBJECTIVES = ("kd", "rkl", "grpo")


@dataclass(frozen=True)
class FitConfig:
    """The objective and its hyper-parameters (the defaults are those of TTT-Embed)."""

    objective: str = "kd"
    tau_teacher: float = 0.02  # τ_T: teacher temperature on rewards in [0, 1]
    tau_student: float = 0.05  # τ_S: student (and GRPO policy) temperature on cosine scores
    ridge: float = 0.3  # λ in λ‖v‖²
    steps: int = 300
    lr: float = 0.01
    clip: float = 0.2  # GRPO ratio clipping ε
    std_floor: float = 1e-4  # GRPO: advantages are (r - mean) / max(std, floor)

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise UserError(f"unknown objective {self.objective!r}; choose one of: {', '.join(OBJECTIVES)}")
        if min(self.tau_teacher, self.tau_student, self.lr) <= 0 or self.ridge < 0 or self.steps < 0:
            raise UserError("temperatures and lr must be positive, ridge and steps non-negative")

    def to_json(self) -> dict:
        return asdict(self)


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def kd_loss_and_grad(v: np.ndarray, x: np.ndarray, Z: np.ndarray, rewards: np.ndarray, tau_teacher: float,
                     tau_student: float) -> tuple[float, np.ndarray]:  # fmt: skip
    """One query's KD loss KL(t ‖ p) and its gradient in v, without the ridge term.

    With u = x + v, x̃ = u/‖u‖, s = Z x̃ / τ_S, p = softmax(s) and t = softmax(rewards / τ_T):

        dL/dv = (I - x̃ x̃ᵀ) Zᵀ (p - t) / (τ_S ‖u‖)

    the usual softmax-KL gradient p - t, carried back through the cosine (Zᵀ / τ_S) and through the
    normalisation, whose Jacobian (I - x̃ x̃ᵀ)/‖u‖ drops the component along x̃: moving v along the
    current query direction changes nothing.
    """
    u = x + v
    norm = np.linalg.norm(u)
    xt = u / norm
    t = softmax(rewards, tau_teacher)
    p = softmax(Z @ xt, tau_student)
    nz = t > 0
    loss = float(np.sum(t[nz] * (np.log(t[nz]) - np.log(p[nz]))))
    g = Z.T @ (p - t) / tau_student
    return loss, (g - xt * (xt @ g)) / norm


def normalise_rewards(scores: np.ndarray) -> np.ndarray:
    """A query's teacher scores mapped to [0, 1] by min-max over its judged candidates (all equal: all 0).

    Any positive affine change of a teacher's scale (logits, BM25, grades) gives the same rewards, so
    τ_T = 0.02 means the same for every teacher: the best judged candidate gets 1, the worst 0, as a
    P(yes) reward model scores a clear positive and a clear negative.
    """
    scores = np.asarray(scores, dtype=np.float64)
    span = scores.max() - scores.min() if len(scores) else 0.0
    return (scores - scores.min()) / span if span > 0 else np.zeros_like(scores)


class Problem:
    """The tensors of a fit, sorted by group, with what does not depend on V computed once: x_q·z_d, ‖x_q‖².

    Scores x̃_q(v)·z_d = (x_q·z_d + v·z_d) / ‖x_q + v‖ need only v·z_d per step: one matrix-vector
    product per group when groups are few (global, task), one batched product otherwise (query).
    """

    MANY_GROUPS = 32

    def __init__(self, X, Z, R, mask, group, weights, n_groups: int):
        import torch

        order = np.argsort(np.asarray(group), kind="stable")
        as64 = lambda a: torch.as_tensor(np.asarray(a, dtype=np.float64)[order])  # noqa: E731
        self.X, self.Z, self.R, self.weights = as64(X), as64(Z), as64(R), as64(weights)
        self.mask = torch.as_tensor(np.asarray(mask, dtype=bool)[order])
        self.group = torch.as_tensor(np.asarray(group, dtype=np.int64)[order])
        self.n_groups = n_groups
        self.Zx = torch.einsum("nkd,nd->nk", self.Z, self.X)
        self.xx = (self.X * self.X).sum(-1)
        sizes = torch.bincount(self.group, minlength=n_groups).tolist()
        if n_groups <= self.MANY_GROUPS:
            self.flat = [z.reshape(-1, z.shape[-1]) for z in torch.split(self.Z, sizes)]

    def scores(self, V):
        """x̃_q(v_{g(q)})·z_d for every query and candidate (n, k), in group order."""
        import torch

        Vq = V[self.group]
        if self.n_groups <= self.MANY_GROUPS:
            Zv = torch.cat([flat @ v for flat, v in zip(self.flat, V)]).reshape(self.Zx.shape)
        else:
            Zv = torch.bmm(self.Z, Vq[:, :, None])[:, :, 0]
        norm = (self.xx + 2 * (self.X * Vq).sum(-1) + (Vq * Vq).sum(-1)).sqrt()
        return (self.Zx + Zv) / norm[:, None]


def query_losses(V, problem: Problem, config: FitConfig):
    """Per-query losses L_q(v_{g(q)}) (n,) as a torch tensor, for the configured objective."""
    mask, R = problem.mask, problem.R
    logits = (problem.scores(V) / config.tau_student).masked_fill(~mask, float("-inf"))
    log_p = logits.log_softmax(dim=-1).masked_fill(~mask, 0.0)
    if config.objective == "grpo":
        return grpo_losses(log_p, problem, config)
    log_t = (R / config.tau_teacher).masked_fill(~mask, float("-inf")).log_softmax(dim=-1).masked_fill(~mask, 0.0)
    if config.objective == "kd":  # KL(teacher ‖ student)
        return (log_t.exp() * (log_t - log_p)).sum(-1)
    return (log_p.exp() * (log_p - log_t)).sum(-1)  # rkl: KL(student ‖ teacher)


def grpo_losses(log_p, problem: Problem, config: FitConfig):
    """Softmax-GRPO: -sum_d π_0(d) min(ρ_d A_d, clip(ρ_d, 1 ± ε) A_d), with ρ = π_v / π_0.

    The group of a query is its judged candidates, the policy π_v is the student softmax, the reference
    π_0 is the policy at v = 0 (the unchanged query), and A_d = (r_d - mean r) / max(std r, floor) over
    the group. The expectation over π_0 is exact (the group is enumerated, not sampled).
    """
    import torch

    mask, R = problem.mask, problem.R
    count = mask.sum(-1, keepdim=True)
    mean = (R * mask).sum(-1, keepdim=True) / count
    std = (((R - mean) * mask) ** 2).sum(-1, keepdim=True).div(count).sqrt()
    advantage = (R - mean) / std.clamp_min(config.std_floor) * mask
    with torch.no_grad():
        ref = problem.Zx / problem.xx.sqrt()[:, None] / config.tau_student
        log_ref = ref.masked_fill(~mask, float("-inf")).log_softmax(dim=-1).masked_fill(~mask, 0.0)
    ratio = (log_p - log_ref).exp()
    clipped = ratio.clamp(1 - config.clip, 1 + config.clip)
    surrogate = torch.minimum(ratio * advantage, clipped * advantage)
    return -(log_ref.exp() * surrogate * mask).sum(-1)


def fit(*, X: np.ndarray, Z: np.ndarray, R: np.ndarray, mask: np.ndarray, group: np.ndarray, weights: np.ndarray,
        n_groups: int, config: FitConfig | None = None) -> np.ndarray:  # fmt: skip
    """The states V (n_groups, d): ``config.steps`` full-batch Adam steps from V = 0 on every group's loss."""
    import torch

    config = config or FitConfig()
    problem = Problem(X, Z, R, mask, group, weights, n_groups)
    V = torch.zeros(n_groups, problem.X.shape[1], dtype=torch.float64, requires_grad=True)
    optimiser = torch.optim.Adam([V], lr=config.lr)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # each step is a few small products: more threads only wait on each other
    try:
        for _ in range(config.steps):
            optimiser.zero_grad()
            loss = (problem.weights * query_losses(V, problem, config)).sum() + config.ridge * (V * V).sum()
            loss.backward()
            optimiser.step()
    finally:
        torch.set_num_threads(threads)
    return V.detach().numpy()
