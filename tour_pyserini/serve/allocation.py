"""Online budget allocation: which served queries the teacher judges, and how deeply.

Offline, TTT-Embed's budget b (judgments per query) is spent by water-filling over a known set of queries
(:mod:`tour_pyserini.ttt.allocation`): breadth first, ``depth`` judgments to each visited query, deeper only
once every query has ``depth``. Served queries arrive one at a time and the stream's length is unknown, so
the same rule is applied in arrival order: each served query of a task adds b to the task's credit; a query
is judged when the credit covers ``depth`` judgments, and then takes all the whole judgments the credit
holds, up to ``max_depth`` (with b <= depth: every (depth / b)-th query gets ``depth``; with b above depth
every query gets about b). A query never waits for credit a later query would bring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tour_pyserini.ttt.allocation import JUDGE_DEPTH, MAX_DEPTH


def grant(credit: float, budget: float, depth: int, max_depth: int) -> tuple[int, float]:
    """Judgments for the next served query and the credit left, from the ``credit`` before it arrived.

    >>> grant(0.0, 2.0, 10, 100)   # b = 2: the fifth query reaches 10
    (0, 2.0)
    >>> grant(8.0, 2.0, 10, 100)
    (10, 0.0)
    """
    credit += budget
    if credit + 1e-9 < depth:  # 1e-9: b = 0.1 added ten times is 0.9999999999999999
        return 0, credit
    take = min(max_depth, math.floor(credit + 1e-9))
    return take, max(0.0, credit - take)


@dataclass
class Allocator:
    """Per-task credit under a budget of ``budget`` judgments per served query."""

    budget: float
    depth: int = JUDGE_DEPTH.default
    max_depth: int = MAX_DEPTH.default

    def __post_init__(self) -> None:
        if not (math.isfinite(self.budget) and self.budget > 0):
            raise ValueError(f"budget must be positive and finite, got {self.budget}")
        if not 0 < self.depth <= self.max_depth:
            raise ValueError(f"depth must be in [1, max_depth = {self.max_depth}], got {self.depth}")
        self.credit: dict[str, float] = {}
        self.served: dict[str, int] = {}
        self.spent: dict[str, int] = {}

    def next(self, task: str) -> int:
        """Judgments for the next query served for ``task`` (0: serve it without the teacher)."""
        take, self.credit[task] = grant(self.credit.get(task, 0.0), self.budget, self.depth, self.max_depth)
        self.served[task] = self.served.get(task, 0) + 1
        self.spent[task] = self.spent.get(task, 0) + take
        return take

    def refund(self, task: str, take: int) -> None:
        """Give back ``take`` judgments granted for ``task`` but never spent (refused, or the teacher failed): they
        are not counted as spent, and the next query may have them."""
        self.spent[task] -= take
        self.credit[task] += take
