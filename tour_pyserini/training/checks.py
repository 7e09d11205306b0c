"""The checks every trainer's configuration makes of its numbers, each failure one line naming the flag."""

from __future__ import annotations

from tour_pyserini.errors import UserError


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
