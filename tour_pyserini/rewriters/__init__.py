"""Query rewriters: one module each, behind the :class:`Rewriter` interface.

A new rewriter is one new module in this package defining a ``Rewriter`` subclass with a ``name``,
decorated with ``@REWRITERS.register``, listing its command-line ``options``; ``--rewriter`` and
:func:`get_rewriter` find it without touching any other file.
"""

from __future__ import annotations

import inspect

from tour_pyserini.errors import UserError
from tour_pyserini.rewriters.base import REWRITERS, Option, QueryBatch, Rewriter, VectorIndex
from tour_pyserini.rewriters.identity import Identity

__all__ = ["REWRITERS", "Identity", "Option", "QueryBatch", "Rewriter", "VectorIndex", "available_rewriters",
           "get_rewriter", "get_rewriter_class"]  # fmt: skip


def available_rewriters() -> dict[str, type[Rewriter]]:
    """All rewriters in this package, by CLI name."""
    return REWRITERS.all()


def get_rewriter_class(name: str) -> type[Rewriter]:
    return REWRITERS.get(name)


def get_rewriter(name: str, **options) -> Rewriter:
    """Construct the rewriter registered as ``name`` from the options it accepts.

    Options that are None are left to the rewriter's defaults; one it does not accept is an error, so
    a flag that would be silently ignored (e.g. ``--lr`` with ``rocchio``) is reported instead.
    """
    cls = REWRITERS.get(name)
    params = inspect.signature(cls.__init__).parameters
    given = {k: v for k, v in options.items() if v is not None}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    needs_teacher = "teacher" in params and params["teacher"].default is inspect.Parameter.empty
    if needs_teacher and "teacher" not in given:
        raise UserError(f"rewriter {name!r} needs a teacher (--teacher TEACHER)")
    if not takes_any and (extra := sorted(set(given) - set(params))):
        raise UserError(f"option(s) {', '.join(extra)} do not apply to rewriter {name!r}")
    return cls(**given)
