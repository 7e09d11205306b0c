"""When two runs are "the same run": bit for bit, or up to rounding by one rule.

A run is byte-identical to another only when the same arithmetic produced it (same batch composition,
thread count, precision and CPU kernels). Where it cannot be (against Pyserini's one-at-a-time encoder,
across batch sizes, thread counts, Ray workers, bf16), two runs are the same when, query by query:

- they hold the same queries, each with the same number of hits;
- a document in both has scores within ``tolerance`` (1e-5) in the two runs;
- two documents change their relative order only if their scores are within ``tolerance`` of each
  other (in either run);
- a document in only one run sits at the depth cut-off: its score is within ``tolerance`` of the other
  run's last score (it was replaced by a near-tie there).

:func:`diff_runs` applies the rule and says how the runs differ; tests, benchmarks and
``python -m tour_pyserini compare --diff`` all use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

TOLERANCE = 1e-5
# run files print 6 decimals: a difference of exactly 1e-5 may read as 1.0000000001e-5
_SLACK = 1e-9

Ranking = Mapping[str, float]  # docid -> score, in rank order (as read_run returns a query's hits)


@dataclass(frozen=True)
class QueryDiff:
    qid: str
    reason: str  # why the query breaks the rule, in words


@dataclass
class RunDiff:
    """How run ``b`` differs from run ``a``: counts of identical and within-tolerance queries, and the rest."""

    tolerance: float
    identical: int = 0  # same docids in the same order with equal scores
    within: int = 0  # the same by the rule, not identical
    different: list[QueryDiff] = field(default_factory=list)
    max_score_diff: float = 0.0  # over documents in both runs

    @property
    def same(self) -> bool:
        return not self.different

    @property
    def queries(self) -> int:
        return self.identical + self.within + len(self.different)

    def to_json(self) -> dict:
        return {
            "queries": self.queries,
            "identical": self.identical,
            "same_within_tolerance": self.within,
            "different": len(self.different),
            "tolerance": self.tolerance,
            "max_score_difference": self.max_score_diff,
            "first_difference": self.different[0].reason if self.different else None,
        }

    def summary(self) -> str:
        """One line: "300 queries: 288 identical, 12 the same up to ties within 1e-05, 0 different"."""
        text = (
            f"{self.queries} queries: {self.identical} identical, {self.within} the same up to ties within "
            f"{self.tolerance:g}, {len(self.different)} different (largest score difference "
            f"{self.max_score_diff:.2g})"
        )
        if self.different:
            first = self.different[0]
            text += f"; first: query {first.qid}: {first.reason}"
        return text


def diff_runs(a: Mapping[str, Ranking], b: Mapping[str, Ranking], tolerance: float = TOLERANCE) -> RunDiff:
    """Compare two runs ``{qid: {docid: score}}`` (each query's docids in rank order) by the rule above."""
    diff = RunDiff(tolerance)
    for qid in sorted(a.keys() | b.keys()):
        if qid not in a or qid not in b:
            diff.different.append(QueryDiff(qid, f"only in run {'a' if qid in a else 'b'}"))
            continue
        if list(a[qid].items()) == list(b[qid].items()):
            diff.identical += 1
            continue
        reason, largest = _query_reason(a[qid], b[qid], tolerance + _SLACK)
        diff.max_score_diff = max(diff.max_score_diff, largest)
        if reason:
            diff.different.append(QueryDiff(qid, reason))
        else:
            diff.within += 1
    return diff


def _query_reason(a: Ranking, b: Ranking, tol: float) -> tuple[str | None, float]:
    """Why one query's two rankings break the rule (None if they keep it), and the largest score difference."""
    if len(a) != len(b):
        return f"{len(a)} hits against {len(b)}", 0.0
    common = [d for d in a if d in b]
    sa = np.array([a[d] for d in common])
    sb = np.array([b[d] for d in common])
    largest = float(np.max(np.abs(sa - sb))) if common else 0.0
    if largest > tol:
        worst = common[int(np.argmax(np.abs(sa - sb)))]
        return f"document {worst} scores {a[worst]} against {b[worst]}", largest
    for only, other, name in ((a.keys() - b.keys(), b, "a"), (b.keys() - a.keys(), a, "b")):
        cutoff = list(other.values())[-1]
        own = a if name == "a" else b
        if far := [d for d in only if abs(own[d] - cutoff) > tol]:
            return f"document {far[0]} (score {own[far[0]]}) only in run {name}, not at the cut-off {cutoff}", largest
    # relative order of the shared documents: ranks in b, listed in a's order
    rank_b = {d: i for i, d in enumerate(b)}
    order = np.array([rank_b[d] for d in common])
    if np.all(np.diff(order) > 0):
        return None, largest
    swapped = np.triu(order[:, None] > order[None, :], 1)  # i above j in a, below it in b
    far = (np.abs(sa[:, None] - sa[None, :]) > tol) & (np.abs(sb[:, None] - sb[None, :]) > tol)
    if (bad := np.argwhere(swapped & far)).size:
        i, j = bad[0]
        return (
            f"documents {common[i]} and {common[j]} swap places with scores {sa[i]} and {sa[j]} "
            f"(more than {tol:.0e} apart)"
        ), largest
    return None, largest
