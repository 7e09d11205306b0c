"""Numbers a user types: a flag's type that parses its text and knows the range the value must lie in.

A :class:`Number` is a flag parser's ``type=`` (the commands' parser checks its range as it parses, naming the
flag) that the library can declare too (a rewriter's own options), so one rule serves both. The checks a
configuration dataclass makes of its numbers (a trainer's, the reader's) name the flag in one line too.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tour_pyserini.errors import UserError


class Number:
    """A numeric flag's ``type=``: ``kind`` (int or float) parses the text, and :meth:`check` refuses, naming the
    flag, a value that is not finite or not ``rule`` (e.g. "positive", "in [0, 1]")."""

    def __init__(self, kind: type, rule: str, ok: Callable[[float], bool]):
        self.kind, self.rule, self.ok = kind, rule, ok
        self.__name__ = kind.__name__  # the parser's message for text that is no number: "invalid int value: 'x'"

    def __call__(self, text: str) -> int | float:
        return self.kind(text)

    def check(self, flag: str, value: int | float) -> None:
        if not ((self.kind is int or math.isfinite(value)) and self.ok(value)):
            raise UserError(f"{flag} must be {self.rule}, got {value if self.kind is int else format(value, 'g')}")


def at_least(low: int) -> Number:
    return Number(int, f"at least {low}", lambda v: v >= low)


positive_int = Number(int, "positive", lambda v: v > 0)
non_negative_int = at_least(0)
positive_float = Number(float, "positive and finite", lambda v: v > 0)
non_negative_float = Number(float, "at least 0 and finite", lambda v: v >= 0)
finite_float = Number(float, "finite", lambda v: True)
fraction = Number(float, "in (0, 1)", lambda v: 0 < v < 1)
probability = Number(float, "in [0, 1]", lambda v: 0 <= v <= 1)


# ---- a configuration's numbers, each failure one line naming the flag ----


def _flag(name: str) -> str:
    return f"--{name.replace('_', '-')}"


def check_positive(config, names: tuple[str, ...]) -> None:
    """Each field of ``config`` in ``names`` is > 0."""
    for name in names:
        if not getattr(config, name) > 0:
            raise UserError(f"{_flag(name)} must be positive, got {getattr(config, name)}")


def check_fractions(config, open_names: tuple[str, ...] = (), closed_names: tuple[str, ...] = ()) -> None:
    """Each field in ``open_names`` is in (0, 1) (a dev split that leaves training queries), each in
    ``closed_names`` in [0, 1] (a warm-up share, a mask rate)."""
    for name in open_names:
        if not 0.0 < getattr(config, name) < 1.0:
            raise UserError(f"{_flag(name)} must be in (0, 1), got {getattr(config, name)}")
    for name in closed_names:
        if not 0.0 <= getattr(config, name) <= 1.0:
            raise UserError(f"{_flag(name)} must be in [0, 1], got {getattr(config, name)}")
