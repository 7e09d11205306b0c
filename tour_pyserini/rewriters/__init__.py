"""Query rewriters: one module each, behind the :class:`Rewriter` interface.

A new rewriter is one new module in this package defining a ``Rewriter`` subclass with a ``name``,
decorated with ``@REWRITERS.register``, listing its command-line ``options``; ``--rewriter`` and
:func:`get_rewriter` find it without touching any other file.
"""

from __future__ import annotations

import inspect

from tour_pyserini.errors import UserError
from tour_pyserini.rewriters.base import REWRITERS, Candidates, Option, QueryBatch, Rewriter, VectorIndex
from tour_pyserini.rewriters.identity import Identity

__all__ = ["REWRITERS", "Candidates", "Identity", "Option", "QueryBatch", "Rewriter", "VectorIndex",
           "available_rewriters", "check_rewriter", "get_rewriter", "get_rewriter_class"]  # fmt: skip


def available_rewriters() -> dict[str, type[Rewriter]]:
    """All rewriters in this package, by CLI name."""
    return REWRITERS.all()


def get_rewriter_class(name: str) -> type[Rewriter]:
    return REWRITERS.get(name)


def check_rewriter(name: str, options: dict, *, teacher: bool) -> type[Rewriter]:
    """The rewriter class ``name``, once its options are known to fit it, before anything expensive loads:
    a teacher exactly when it takes one, every option it requires, its own value checks."""
    cls = _fitting_class(name, options, teacher=teacher)
    flags = {option.param for option in cls.options}
    cls.check_options(**{k: v for k, v in options.items() if k in flags and v is not None})
    return cls


def _fitting_class(name: str, options: dict, *, teacher: bool) -> type[Rewriter]:
    """The rewriter class ``name``, refused without a teacher it needs, with one it takes not, or without an
    option it requires (values are the rewriter's own to check)."""
    cls = REWRITERS.get(name)
    params = inspect.signature(cls.__init__).parameters
    if "teacher" in params and params["teacher"].default is inspect.Parameter.empty and not teacher:
        raise UserError(f"rewriter {name!r} needs a teacher (--teacher TEACHER)")
    if teacher and "teacher" not in params:
        askers = [n for n, c in available_rewriters().items() if "teacher" in inspect.signature(c.__init__).parameters]
        raise UserError(
            f"--teacher is for the rewriters that ask one ({', '.join(askers)}); --rewriter {name} asks none"
        )
    flags = {option.param: option.flag for option in cls.options}
    required = [p for p, v in params.items() if p not in ("self", "teacher") and v.default is inspect.Parameter.empty
                and v.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]  # fmt: skip
    if missing := [flags.get(p, p) for p in required if options.get(p) is None]:
        raise UserError(f"--rewriter {name} needs {', '.join(missing)}")
    return cls


def get_rewriter(name: str, **options) -> Rewriter:
    """Construct the rewriter registered as ``name`` from the options it accepts.

    Options that are None are left to the rewriter's defaults; one it does not accept is an error, so
    a flag that would be silently ignored (e.g. ``--lr`` with ``rocchio``) is reported instead.
    """
    given = {k: v for k, v in options.items() if v is not None}
    # the constructor checks the values (check_rewriter did so already on the command line's way here)
    cls = _fitting_class(name, given, teacher="teacher" in given)
    params = inspect.signature(cls.__init__).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    if not takes_any and (extra := sorted(set(given) - set(params))):
        raise UserError(f"option(s) {', '.join(extra)} do not apply to rewriter {name!r}")
    return cls(**given)
