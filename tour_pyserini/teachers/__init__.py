"""Teachers: scorers of (query, candidate) pairs whose scores guide the rewriters.

One module each behind the :class:`Teacher` interface; a new teacher is one new module defining a
``Teacher`` subclass with a ``name``, decorated with ``@TEACHERS.register``. :func:`get_teacher` builds
one from a spec string such as ``cross-encoder:models/scifact-rce``, ``bm25``,
``oracle:qrels/scifact.test.txt`` or ``ensemble:models/scifact-rce/ensemble.json``.
"""

from __future__ import annotations

from tour_pyserini.teachers.base import TEACHERS, ScoreRequest, Teacher, TeacherContext, get_teacher
from tour_pyserini.teachers.cache import ScoreCache
from tour_pyserini.teachers.store import ScoreStore, StoredTeacher

__all__ = ["TEACHERS", "ScoreCache", "ScoreRequest", "ScoreStore", "Teacher", "TeacherContext",
           "StoredTeacher", "available_teachers", "get_teacher", "teacher_usages"]  # fmt: skip


def available_teachers() -> dict[str, type[Teacher]]:
    return TEACHERS.all()


def teacher_usages() -> str:
    """How each registered teacher's spec is written, for help texts: "bm25[:DIR], cross-encoder:PATH, ..."."""
    return ", ".join(cls.usage or name for name, cls in sorted(available_teachers().items()))
