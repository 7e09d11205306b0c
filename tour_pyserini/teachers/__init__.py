"""Teachers: scorers of (query, candidate) pairs whose scores guide the rewriters.

One module each behind the :class:`Teacher` interface; a new teacher is one new module defining a
``Teacher`` subclass with a ``name``, decorated with ``@TEACHERS.register``. :func:`get_teacher` builds
one from a spec string such as ``cross-encoder:models/scifact-rce``, ``bm25``,
``oracle:qrels/scifact.test.txt`` or ``ensemble:models/scifact-rce/ensemble.json``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tour_pyserini.errors import UserError
from tour_pyserini.teachers.base import (
    TEACHERS,
    ScoreRequest,
    Teacher,
    TeacherContext,
    TeacherSpec,
    get_teacher,
    options_read_by,
    teacher_options,
)
from tour_pyserini.teachers.cache import ScoreCache
from tour_pyserini.teachers.store import ScoreStore, StoredTeacher

__all__ = [
    "TEACHERS",
    "ScoreCache",
    "ScoreRequest",
    "ScoreStore",
    "Teacher",
    "TeacherContext",
    "TeacherSpec",
    "StoredTeacher",
    "available_teachers",
    "check_shared_teacher_options",
    "check_teacher_options",
    "check_teacher_settings",
    "get_teacher",
    "options_for",
    "options_read_by",
    "runtime_is_auto",
    "teacher_options",
    "teacher_usages",
]


def available_teachers() -> dict[str, type[Teacher]]:
    return TEACHERS.all()


def teacher_usages() -> str:
    """How each registered teacher's spec is written, for help texts: "bm25[:DIR], cross-encoder:PATH, ..."."""
    return ", ".join(cls.usage or name for name, cls in sorted(available_teachers().items()))


def options_for(spec: str, options: Mapping[str, object]) -> dict:
    """The values among ``options`` (by teacher option name) that the teacher ``spec`` reads."""
    own = {o.name for o in options_read_by(spec)}
    return {name: value for name, value in options.items() if name in own}


def check_shared_teacher_options(specs: Sequence[str], options: Mapping[str, object]) -> None:
    """Refuse a teacher flag that none of ``specs`` reads: teachers that share one set of flags (a server's) each
    take the ones they read."""
    if len(specs) < 2:
        return check_teacher_options(specs[0] if specs else None, options)
    if stray := [
        o.option
        for o in teacher_options()
        if o.name in options and not any(o.name in options_for(spec, options) for spec in specs)
    ]:
        raise UserError(f"{', '.join(stray)}: not an option of any of the teachers ({', '.join(specs)})")


def check_teacher_settings(
    specs: Sequence[str], options: Mapping[str, Any], precision: str | None, device: str
) -> None:
    """The teacher flags and precision of a search (or of a server's teachers, which share them), checked before any
    teacher loads: each flag read by one of ``specs``, and a precision the chosen runtime runs on ``device``."""
    from tour_pyserini.runtime import resolve_runtime_precision
    from tour_pyserini.teachers.cross_encoder import RUNTIME

    check_shared_teacher_options(specs, options)
    runtime = options.get(RUNTIME.name)
    if precision or runtime:
        resolve_runtime_precision(
            precision or "auto", runtime or RUNTIME.default, device, "--teacher-precision", RUNTIME.option
        )


def runtime_is_auto(spec: str | TeacherSpec | None, options: Mapping[str, object]) -> bool:
    """Whether a teacher's runtime is left to ``auto``, which resolves by what this machine has installed."""
    from tour_pyserini.runtime import AUTO
    from tour_pyserini.teachers.cross_encoder import RUNTIME

    return spec is not None and options.get(RUNTIME.name) in (None, AUTO)


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
        raise UserError(f"{', '.join(stray)}: not an option of the {TeacherSpec.parse(spec).kind} teacher{reads}")
