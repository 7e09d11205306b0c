"""Teachers: scorers of (query, candidate) pairs whose scores guide the rewriters.

One module each behind the :class:`Teacher` interface; a new teacher is one new module defining a
``Teacher`` subclass with a ``kind``. :func:`get_teacher` builds one from a spec string such as
``cross-encoder:models/scifact-ce``, ``bm25``, ``oracle:qrels/scifact.test.txt`` or
``fusion:bm25+cross-encoder:models/scifact-ce``.
"""

from __future__ import annotations

import importlib
import pkgutil

from tour_pyserini.teachers.base import _REGISTRY, ScoreRequest, Teacher, TeacherContext
from tour_pyserini.teachers.cache import ScoreCache

__all__ = ["ScoreCache", "ScoreRequest", "Teacher", "TeacherContext", "available_teachers", "get_teacher"]


def available_teachers() -> dict[str, type[Teacher]]:
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")
    return dict(sorted(_REGISTRY.items()))


def get_teacher(spec: str, context: TeacherContext | None = None) -> Teacher:
    """Build the teacher a spec names; an unknown kind gets an error listing the known ones."""
    kind, _, argument = spec.partition(":")
    teachers = available_teachers()
    if kind not in teachers:
        raise ValueError(f"unknown teacher {spec!r}; kinds: {', '.join(teachers)} (e.g. bm25, cross-encoder:PATH)")
    return teachers[kind].from_spec(argument or None, context or TeacherContext())
