"""Paired significance tests and win/tie/loss counts over per-query values."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def paired_t_test(run: Sequence[float], baseline: Sequence[float]) -> float:
    """Two-sided p-value of the paired t-test (``scipy.stats.ttest_rel``); 1.0 when all differences are 0."""
    from scipy.stats import ttest_rel

    a, b = np.asarray(run, dtype=float), np.asarray(baseline, dtype=float)
    if np.allclose(a - b, 0.0):
        return 1.0
    return float(ttest_rel(a, b).pvalue)


def randomization_test(run: Sequence[float], baseline: Sequence[float], trials: int = 10_000, seed: int = 0) -> float:
    """Two-sided p-value of the paired randomisation (sign-flip permutation) test on the mean difference.

    Seeded, so the same inputs always give the same p-value; counts the observed assignment, so p > 0.
    """
    d = np.asarray(run, dtype=float) - np.asarray(baseline, dtype=float)
    observed = abs(d.mean())
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(trials, len(d)))
    extreme = np.count_nonzero(np.abs((signs * d).mean(axis=1)) >= observed - 1e-12)
    return float((extreme + 1) / (trials + 1))


def win_tie_loss(run: Sequence[float], baseline: Sequence[float], eps: float = 1e-9) -> tuple[int, int, int]:
    d = np.asarray(run, dtype=float) - np.asarray(baseline, dtype=float)
    return int(np.sum(d > eps)), int(np.sum(np.abs(d) <= eps)), int(np.sum(d < -eps))


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values (family-wise error), in the input order.

    With p sorted ascending, p'_(i) = max_{j <= i} min(1, (m - j + 1) p_(j)) for i = 1..m.
    """
    p = np.asarray(pvalues, dtype=float)
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, (len(p) - np.arange(len(p))) * p[order])
    out = np.empty_like(p)
    out[order] = np.maximum.accumulate(adjusted)
    return out.tolist()
