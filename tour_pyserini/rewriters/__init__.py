"""Query rewriters: one module each, behind the :class:`Rewriter` interface.

A new rewriter is one new module in this package defining a ``Rewriter`` subclass with a ``name``,
decorated with ``@REWRITERS.register``, declaring its parameters as its ``Config`` dataclass; ``--rewriter``,
its flags and :func:`get_rewriter` find it without touching any other file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tour_pyserini.errors import UserError
from tour_pyserini.rewriters.base import (
    REWRITERS,
    Abandoned,
    Candidates,
    QueryBatch,
    Rewriter,
    StoppableIndex,
    TeacherRewriter,
    VectorIndex,
)
from tour_pyserini.rewriters.identity import Identity

if TYPE_CHECKING:
    from tour_pyserini.teachers import Teacher

__all__ = [
    "REWRITERS",
    "Abandoned",
    "Candidates",
    "Identity",
    "QueryBatch",
    "Rewriter",
    "StoppableIndex",
    "VectorIndex",
    "available_rewriters",
    "check_rewriter",
    "get_rewriter",
    "get_rewriter_class",
]


def available_rewriters() -> dict[str, type[Rewriter]]:
    """All rewriters in this package, by CLI name."""
    return REWRITERS.all()


def get_rewriter_class(name: str) -> type[Rewriter]:
    return REWRITERS.get(name)


def check_rewriter(name: str, options: dict, *, teacher: bool) -> tuple[type[Rewriter], Any]:
    """The rewriter class ``name`` and its config from ``options`` (by parameter name), checked once, before
    anything expensive loads: a teacher exactly when it asks one, every option its own and in range."""
    cls = REWRITERS.get(name)
    if cls.needs_teacher and not teacher:
        raise UserError(f"rewriter {name!r} needs a teacher (--teacher TEACHER)")
    if teacher and not cls.needs_teacher:
        askers = [n for n, c in available_rewriters().items() if c.needs_teacher]
        raise UserError(
            f"--teacher is for the rewriters that ask one ({', '.join(askers)}); --rewriter {name} asks none"
        )
    return cls, cls.configure(**options)


def get_rewriter(name: str, teacher: Teacher | None = None, **options) -> Rewriter:
    """The rewriter registered as ``name``, with ``teacher`` if it asks one, from option values (None: the
    default); a value out of range, or an option it does not take (``--lr`` with rocchio), is one line."""
    cls, config = check_rewriter(name, options, teacher=teacher is not None)
    if not cls.needs_teacher:
        return cls(config=config)
    if not issubclass(cls, TeacherRewriter) or teacher is None:  # check_rewriter refuses one without a teacher
        raise ValueError(f"rewriter {name!r} asks a teacher: it is a TeacherRewriter, and is given one")
    return cls(teacher, config=config)
