"""The fusion teacher: a sum of other teachers' scores, each standardised per query."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.numbers import Param
from tour_pyserini.teachers.base import (
    TEACHERS,
    ScoreRequest,
    Teacher,
    TeacherContext,
    get_teacher,
    options_read_by,
)


@TEACHERS.register
class FusionTeacher(Teacher):
    """``fusion:bm25+cross-encoder:PATH``: each part's scores are z-normalised per query and summed.

    The mean and standard deviation of a part are fixed from the first candidates it scores for a query
    in one search and kept in that query's ``memo``, so a candidate scored in a later iteration lands on
    the same scale as the earlier ones (batched runs equal sequential ones), and nothing carries over to
    another query or search. A pair's score depends on the first candidates: not ``pairwise``.
    """

    name = "fusion"
    usage = "fusion:A+B"
    pairwise = False

    def __init__(self, parts: Sequence[Teacher]):
        if len(parts) < 2:
            raise UserError("fusion needs at least two teachers: fusion:A+B")
        self.parts = list(parts)
        self.needs_text = any(p.needs_text for p in parts)  # type: ignore[misc]
        self.oracle = any(p.oracle for p in parts)  # type: ignore[misc]

    @classmethod
    def from_spec(cls, argument: str | None, context: TeacherContext) -> FusionTeacher:
        if not argument:
            raise UserError("fusion needs teachers: fusion:A+B")
        return cls([get_teacher(spec, context) for spec in argument.split("+")])

    @classmethod
    def options_read(cls, argument: str | None) -> list[Param]:
        return list(dict.fromkeys(o for spec in (argument or "").split("+") if spec for o in options_read_by(spec)))

    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        total = [np.zeros(len(r.docids)) for r in requests]
        for i, part in enumerate(self.parts):
            for j, (request, scores) in enumerate(zip(requests, part.score(requests))):
                key = (id(self), i)  # this part of this fusion teacher (fusions may nest)
                given = scores[~np.isnan(scores)]  # a pair the part could not score stays NaN in the sum
                if key not in request.memo and given.size:
                    request.memo[key] = (float(np.mean(given)), float(np.std(given)))
                mean, std = request.memo.get(key, (0.0, 1.0))
                total[j] += (scores - mean) / (std if std > 0 else 1.0)
        return total

    @property
    def label(self) -> str:
        return "fusion(" + "+".join(p.label for p in self.parts) + ")"

    @property
    def fingerprint(self) -> str:
        return "fusion(" + "+".join(p.fingerprint for p in self.parts) + ")"
