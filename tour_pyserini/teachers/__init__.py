"""Teachers: scorers of (query, candidate) pairs whose scores guide the rewriters.

One module each behind the :class:`Teacher` interface; a new teacher is one new module defining a
``Teacher`` subclass with a ``name``, decorated with ``@TEACHERS.register``. :func:`get_teacher` builds
one from a spec string such as ``cross-encoder:models/scifact-rce``, ``bm25``,
``oracle:qrels/scifact.test.txt`` or ``ensemble:models/scifact-rce/ensemble.json``.
"""

from __future__ import annotations

from collections.abc import Mapping

from tour_pyserini.errors import UserError
from tour_pyserini.teachers.base import (
    TEACHERS,
    ScoreRequest,
    Teacher,
    TeacherContext,
    get_teacher,
    options_read_by,
    teacher_options,
)
from tour_pyserini.teachers.cache import ScoreCache
from tour_pyserini.teachers.store import ScoreStore, StoredTeacher

__all__ = ["TEACHERS", "ScoreCache", "ScoreRequest", "ScoreStore", "Teacher", "TeacherContext",
           "StoredTeacher", "available_teachers", "check_teacher_options", "get_teacher",
           "options_read_by", "teacher_options", "teacher_usages"]  # fmt: skip


def available_teachers() -> dict[str, type[Teacher]]:
    return TEACHERS.all()


def teacher_usages() -> str:
    """How each registered teacher's spec is written, for help texts: "bm25[:DIR], cross-encoder:PATH, ..."."""
    return ", ".join(cls.usage or name for name, cls in sorted(available_teachers().items()))


def check_teacher_options(spec: str | None, options: Mapping[str, object]) -> None:
    """Refuse a teacher flag the named teacher does not read (an ensemble or a fusion: none of its parts)."""
    if not options:
        return
    if spec is None:
        given = [o.option for o in teacher_options() if o.name in options]
        raise UserError(f"{', '.join(given)}: a teacher's options, given without --teacher")
    own = options_read_by(spec)
    if stray := [o.option for o in teacher_options() if o.name in options and o not in own]:
        reads = f" (it reads {', '.join(o.option for o in own)})" if own else ""
        raise UserError(f"{', '.join(stray)}: not an option of the {spec.partition(':')[0]} teacher{reads}")
