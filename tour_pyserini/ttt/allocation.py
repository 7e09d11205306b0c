"""Which (query, candidate) pairs a budget of teacher judgments buys: task-balanced water-filling.

A budget b is judgments per query: b × N pairs in all, N the queries of every task together. The pairs
are the prefix of one fixed sequence, so a larger budget never removes a pair and every method sees
exactly the same pairs:

- queries are visited task by task in turn (one query from each task that still has queries left),
  each task's queries in a permutation seeded 1000 + its index;
- the first pass gives each visited query its top ``depth`` base candidates, in base retrieval order;
  once every query has them, a second pass in the same order extends each query to ``max_depth``.

With ``depth`` 10, b = 1 rewards a tenth of the queries with 10 judgments each; b = 10 rewards every
query with 10; b = 100 judges the whole base top-100.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.numbers import Param, positive_int

# declared once for ttt rewards, the server's allocation and their flags
JUDGE_DEPTH = Param("depth", positive_int, 10, "judgments per judged query, breadth first (the paper's 10)")
MAX_DEPTH = Param(
    "max_depth", positive_int, 100, "most judgments one query can get: the base candidates it is judged on"
)


class Pair(NamedTuple):
    task: int  # index of the task in the list given to allocate
    qid: str
    rank: int  # 0-based position of the candidate in the query's base ranking


def query_order(task_qids: Sequence[Sequence[str]]) -> list[tuple[int, str]]:
    """Every (task, qid) in water-filling order: one query from each task with queries left, in turn."""
    perms = [np.random.default_rng(1000 + t).permutation(len(qids)).tolist() for t, qids in enumerate(task_qids)]
    order = []
    for i in range(max((len(p) for p in perms), default=0)):
        order += [(t, task_qids[t][p[i]]) for t, p in enumerate(perms) if i < len(p)]
    return order


def allocate(
    task_qids: Sequence[Sequence[str]],
    budget: float,
    *,
    depth: int = JUDGE_DEPTH.default,
    max_depth: int = MAX_DEPTH.default,
) -> list[Pair]:
    """The round(b × N) pairs of budget ``budget`` (judgments per query), in allocation order."""
    if not (math.isfinite(budget) and budget >= 0):
        raise UserError(f"budget must be a finite number of judgments per query, at least 0; got {budget}")
    if not 0 < depth <= max_depth:
        raise UserError(f"depth must be in [1, max_depth = {max_depth}], got {depth}")
    order = query_order(task_qids)
    total = math.floor(budget * len(order) + 0.5)
    if not 0 <= total <= len(order) * max_depth:
        raise UserError(
            f"budget {budget} asks for {total} judgments; {len(order)} queries x {max_depth} "
            "candidates is the most there is"
        )
    pairs: list[Pair] = []
    for low, high in ((0, depth), (depth, max_depth)):
        for task, qid in order:
            take = min(high - low, total - len(pairs))
            pairs += [Pair(task, qid, rank) for rank in range(low, low + take)]
    return pairs


# Online: served queries arrive one at a time and the stream's length is unknown, so the same rule is applied in
# arrival order: each served query of a task adds b to the task's credit; a query is judged when the credit covers
# ``depth`` judgments, and then takes all the whole judgments the credit holds, up to ``max_depth`` (with b <= depth:
# every (depth / b)-th query gets ``depth``; with b above depth every query gets about b). A query never waits for
# credit a later query would bring.


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
