"""Query rewriters: one module each, behind the :class:`Rewriter` interface.

A new rewriter is one new module in this package defining a ``Rewriter`` subclass with a ``name``;
it is found by :func:`get_rewriter` and by ``--rewriter`` without touching any other file.
"""

from __future__ import annotations

import importlib
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
    """Construct the rewriter registered as ``name``; unknown names get an error listing the known ones."""
    rewriters = available_rewriters()
    if name not in rewriters:
        raise ValueError(f"unknown rewriter {name!r}; choose one of: {', '.join(rewriters)}")
    return rewriters[name](**options)
