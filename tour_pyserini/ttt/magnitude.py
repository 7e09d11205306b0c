"""How far a shared state should move queries it was not fitted on, chosen from the rewarded queries alone.

The count rule α_g = n_g / (n_g + 1) moves every query of a task almost the full length of v_g once a few
queries are rewarded, whether or not v_g carries over to other queries. Cross-validation asks the rewarded
queries instead: split them into folds, fit the scope on all folds but one, and score each held-out query's
own judged candidates (their rewards are known; no unseen label is read) under x + α v for every α in a
grid. The measure is pair agreement with the teacher (:mod:`tour_pyserini.ttt.agreement`), whose order
does not change when x + α v is normalised. The α with the highest mean gain over α = 0 is chosen only if
that gain is positive with a one-sided paired t-test below ``significance``; otherwise α = 0: the state is
kept, but it moves no query, because nothing showed it helps queries it was not fitted on.

A query state moves only its own query, so held-out queries cannot judge it: the rule is for global, task and
neighbours states (a held-out query is then moved by the mixture of the other folds' query states).

``--alpha-rule ranking`` asks the same held-out queries a question the agreement cannot answer: what the state does
to their whole re-searched top 10. Each held-out query is searched again at every α, and the ranking is scored by
nDCG@10 with its judged candidates' normalised rewards as gains and every document no teacher judged as gaining 0
(:func:`~tour_pyserini.ttt.agreement.judged_ndcg`): a move that brings unjudged documents into the top 10 is counted
as losing what they displace. The choice of α is then the same test.

The same folds choose the scope (``--scope auto``): of the shared scopes whose cross-validated α is not 0, the one
whose held-out gain at that α is highest; where none has one, the query scope, which moves only the queries that
were rewarded, each by its own rewards.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np

from tour_pyserini.numbers import at_least, check_fields, fraction, param
from tour_pyserini.ttt.agreement import judged_ndcg, pair_agreement
from tour_pyserini.ttt.fitting import RewardedQuery, fit_scope
from tour_pyserini.ttt.neighbours import NeighbourConfig, mix
from tour_pyserini.ttt.objectives import FitConfig

ALPHA_RULES = ("count", "cv", "ranking")
CROSS_VALIDATED = ("cv", "ranking")  # the rules that choose α from held-out rewarded queries
RANKING_DEPTH = 10  # the re-searched top the ranking rule scores
# (task, query vectors (n, d) float32) -> each one's top RANKING_DEPTH docids in that task's index
Search = Callable[[str, np.ndarray], list[list[str]]]
AUTO_SCOPE = "auto"  # ttt fit's --scope that chooses one by cross-validation (choose_scope)
SHARED = ("task", "global", "neighbours")  # the scopes that move queries nobody rewarded, in the order tried
GRID = (0.1, 0.25, 0.5, 0.75, 1.0)  # besides α = 0, which every candidate is compared with


@dataclass(frozen=True)
class MagnitudeConfig:
    """How the deployment magnitude α of a global or task state is chosen, each parameter declared once."""

    alpha_rule: str = param(
        "count",
        str,
        "count: alpha = n/(n+1) of the rewarded queries behind a residual; cv: "
        "chosen by cross-validation over the rewarded queries (0 when no alpha helps held-out "
        "ones); ranking: the same, judged by the held-out queries' re-searched top 10, a document no teacher judged "
        "gaining nothing",
        choices=ALPHA_RULES,
    )
    cv_folds: int = param(5, at_least(2), "folds of the rewarded queries for --alpha-rule cv")
    significance: float = param(
        0.05, fraction, "--alpha-rule cv keeps an alpha only if its held-out gain is positive at this one-sided p-value"
    )

    def __post_init__(self) -> None:
        check_fields(self)


@dataclass(frozen=True)
class MagnitudeChoice:
    """The chosen α (0: the state moves nothing), the mean held-out agreement gain over α = 0 of every α tried,
    the one-sided p-value of the best one, and the number of held-out queries that judged them."""

    alpha: float
    gains: dict[float, float]
    p: float
    queries: int
    rule: str = "cv"  # what judged them: cv (agreement on the judged candidates) or ranking (re-searched top 10)

    def to_json(self) -> dict:
        """What a state's provenance records of the choice, with :meth:`describe`'s line as ``summary``."""
        return {
            **asdict(self),
            "gains": {str(a): round(g, 6) for a, g in self.gains.items()},
            "summary": self.describe(),
        }

    def describe(self) -> str:
        best = max(self.gains, key=self.gains.__getitem__) if self.gains else 0.0
        judged = "re-searched top-10" if self.rule == "ranking" else "agreement"
        found = f"best held-out {judged} gain {self.gains.get(best, 0.0):+.4f} at alpha {best:g} (p {self.p:.3g}"
        return f"{found}, {self.queries} held-out rewarded queries): alpha {self.alpha:g}"


def fold_of(n: int, folds: int, seed: int = 0) -> np.ndarray:
    """The fold (0 .. folds-1) of each of n items: a seeded permutation dealt round-robin, so fold sizes differ
    by at most one and each item is held out exactly once."""
    out = np.empty(n, dtype=np.int64)
    out[np.random.default_rng(seed).permutation(n)] = np.arange(n) % folds
    return out


def held_out_residuals(
    keys: Sequence[tuple],
    V: np.ndarray,
    scope: str,
    train: Sequence[RewardedQuery],
    held: Sequence[RewardedQuery],
    mixing: NeighbourConfig,
) -> list[np.ndarray | None]:
    """The unscaled residual that would move each ``held`` query: its task's or the global v, or (neighbours) the
    mixture of the query states of its task's ``train`` queries, one mixture per task; None when the fit has none."""
    if scope != "neighbours":
        rows = {key: g for g, key in enumerate(keys)}
        found = [rows.get((None, None) if scope == "global" else (q.task, None)) for q in held]
        return [None if g is None else V[g] for g in found]
    out: list[np.ndarray | None] = [None] * len(held)
    for task in dict.fromkeys(q.task for q in held):
        mine = [g for g, q in enumerate(train) if q.task == task]
        if not mine:
            continue
        at = [i for i, q in enumerate(held) if q.task == task]
        mixed = mix(np.stack([held[i].x for i in at]), np.stack([train[g].x for g in mine]), V[mine], mixing)
        for i, r in zip(at, mixed):
            out[i] = r
    return out


def held_out_agreements(
    queries: Sequence[RewardedQuery],
    scope: str,
    config: FitConfig | None = None,
    *,
    folds: int = 5,
    alphas: Sequence[float] = GRID,
    seed: int = 0,
    mixing: NeighbourConfig | None = None,
    search: Search | None = None,
) -> np.ndarray:
    """Agreement (m, 1 + len(alphas)) of each held-out query that a fit could judge, at α = 0 and each α of
    ``alphas``, over ``folds`` folds of ``queries``; queries whose teacher orders no pair are left out. With
    ``search``, each held-out query's re-searched top 10 scored by :func:`judged_ndcg` instead."""
    if scope not in ("global", "task", "neighbours"):
        raise ValueError(f"cross-validated magnitudes are for global, task and neighbours states, not {scope!r}")
    fold = fold_of(len(queries), folds, seed)
    rows = []
    for f in range(folds):
        train = [q for q, g in zip(queries, fold) if g != f]
        if not train:
            continue
        keys, V, _ = fit_scope(train, scope, config)
        held = [q for q, g in zip(queries, fold) if g == f]
        moved = [
            (q, v)
            for q, v in zip(held, held_out_residuals(keys, V, scope, train, held, mixing or NeighbourConfig()))
            if v is not None
        ]
        if search is not None:
            rows += ranking_rows(moved, alphas, search)
            continue
        for q, v in moved:
            x, Z = np.asarray(q.x, dtype=np.float64), np.asarray(q.Z, dtype=np.float64)
            row = [pair_agreement(Z @ (x + a * v), q.rewards) for a in (0.0, *alphas)]
            if not np.isnan(row[0]):
                rows.append(row)
    return np.array(rows).reshape(-1, 1 + len(alphas))


def ranking_rows(moved: list[tuple[RewardedQuery, np.ndarray]], alphas: Sequence[float], search: Search) -> list:
    """For each (held-out query, residual v): :func:`judged_ndcg` of its re-searched top 10 at unit(x + α v), α = 0
    and each of ``alphas`` (one search per task and α); queries whose teacher rewards nothing are left out."""
    from tour_pyserini.ttt.objectives import normalise_rewards

    values = np.full((len(moved), 1 + len(alphas)), np.nan)
    for task in dict.fromkeys(q.task for q, _ in moved):
        at = [i for i, (q, _) in enumerate(moved) if q.task == task]
        X = np.stack([moved[i][0].x for i in at]).astype(np.float64)
        R = np.stack([moved[i][1] for i in at])
        for j, a in enumerate((0.0, *alphas)):
            U = X + a * R
            rankings = search(task, (U / np.linalg.norm(U, axis=1, keepdims=True)).astype(np.float32))
            for i, ranking in zip(at, rankings):
                q = moved[i][0]
                values[i, j] = judged_ndcg(ranking, dict(zip(q.docids, normalise_rewards(q.rewards))), RANKING_DEPTH)
    return [row for row in values.tolist() if not np.isnan(row[0])]


def choose_alpha(agreements: np.ndarray, alphas: Sequence[float] = GRID, significance: float = 0.05) -> MagnitudeChoice:
    """The α whose held-out agreement gain over α = 0 is highest, if positive at ``significance`` (one-sided
    paired t-test); else 0."""
    from scipy.stats import ttest_rel

    if len(agreements) < 2:
        return MagnitudeChoice(0.0, {}, 1.0, len(agreements))
    gains = agreements[:, 1:] - agreements[:, :1]
    means = {float(a): float(g) for a, g in zip(alphas, gains.mean(axis=0))}
    best = int(np.argmax(gains.mean(axis=0)))
    column = gains[:, best]
    with warnings.catch_warnings():  # a gain nearly the same for every query is a clear answer, not a precision loss
        warnings.simplefilter("ignore", RuntimeWarning)
        p = 1.0 if not column.any() else float(ttest_rel(column, np.zeros_like(column), alternative="greater").pvalue)
    chosen = float(alphas[best]) if means[float(alphas[best])] > 0 and p < significance else 0.0
    return MagnitudeChoice(chosen, means, p, len(agreements))


def cross_validated_alpha(
    queries: Sequence[RewardedQuery],
    scope: str,
    config: FitConfig | None = None,
    magnitude: MagnitudeConfig | None = None,
    *,
    seed: int = 0,
    mixing: NeighbourConfig | None = None,
    search: Search | None = None,
) -> MagnitudeChoice:
    """α for the ``scope`` state fitted on ``queries``, chosen by cross-validation over those queries: by the
    agreement on their judged candidates, or (rule ``ranking``) by their re-searched top 10, which needs ``search``
    and each query's docids."""
    magnitude = magnitude or MagnitudeConfig(alpha_rule="cv")
    if magnitude.alpha_rule == "ranking" and (search is None or not all(q.docids for q in queries)):
        raise ValueError("the ranking rule re-searches the index: pass search, and each query's docids")
    agreements = held_out_agreements(
        queries,
        scope,
        config,
        folds=min(magnitude.cv_folds, len(queries)),
        seed=seed,
        mixing=mixing,
        search=search if magnitude.alpha_rule == "ranking" else None,
    )
    return replace(choose_alpha(agreements, GRID, magnitude.significance), rule=magnitude.alpha_rule)


def choose_scope(
    queries: Sequence[RewardedQuery],
    config: FitConfig | None = None,
    magnitude: MagnitudeConfig | None = None,
    *,
    mixing: NeighbourConfig | None = None,
    search: Search | None = None,
) -> tuple[str, MagnitudeChoice | None, dict[str, MagnitudeChoice]]:
    """The scope cross-validation over ``queries`` finds best for queries nobody rewarded, with its α choice (None:
    the query scope, where no shared scope's α is kept), and every shared scope's choice."""
    choices = {s: cross_validated_alpha(queries, s, config, magnitude, mixing=mixing, search=search) for s in SHARED}
    kept = {s: c for s, c in choices.items() if c.alpha > 0}
    if not kept:
        return "query", None, choices
    best = max(kept, key=lambda s: kept[s].gains[kept[s].alpha])  # the first of equal gains, in SHARED's order
    return best, kept[best], choices
