"""Query rewriters: one module each, behind the :class:`Rewriter` interface.

A new rewriter is one new module in this package defining a ``Rewriter`` subclass with a ``name``;
it is found by :func:`get_rewriter` and by ``--rewriter`` without touching any other file.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil

from tour_pyserini.rewriters.base import _REGISTRY, QueryBatch, Rewriter
from tour_pyserini.rewriters.identity import Identity

__all__ = ["Identity", "QueryBatch", "Rewriter", "available_rewriters", "get_rewriter"]


def available_rewriters() -> dict[str, type[Rewriter]]:
    """All rewriters in this package, by CLI name."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return dict(sorted(_REGISTRY.items()))


def get_rewriter(name: str, **options) -> Rewriter:
    """Construct the rewriter registered as ``name`` from the options it accepts.

    Options that are None are left to the rewriter's defaults; one it does not accept is an error, so
    a flag that would be silently ignored (e.g. ``--lr`` with ``rocchio``) is reported instead.
    """
    rewriters = available_rewriters()
    if name not in rewriters:
        raise ValueError(f"unknown rewriter {name!r}; choose one of: {', '.join(rewriters)}")
    cls = rewriters[name]
    params = inspect.signature(cls.__init__).parameters
    given = {k: v for k, v in options.items() if v is not None}
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    needs_teacher = "teacher" in params and params["teacher"].default is inspect.Parameter.empty
    if needs_teacher and "teacher" not in given:
        raise ValueError(f"rewriter {name!r} needs a teacher (--reranker SPEC)")
    if not takes_any and (extra := sorted(set(given) - set(params))):
        raise ValueError(f"option(s) {', '.join(extra)} do not apply to rewriter {name!r}")
    return cls(**given)
