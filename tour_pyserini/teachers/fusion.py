"""The fusion teacher: a sum of other teachers' scores, each standardised per query."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tour_pyserini.teachers.base import ScoreRequest, Teacher, TeacherContext


class FusionTeacher(Teacher):
    """``fusion:bm25+cross-encoder:PATH``: each part's scores are z-normalised and summed.

    The mean and standard deviation of a part are fixed from the first candidates it scores for a
    query, so a candidate scored in a later iteration lands on the same scale as the earlier ones
    (scores stay cacheable and batched runs equal sequential ones).
    """

    kind = "fusion"

    def __init__(self, parts: Sequence[Teacher]):
        if len(parts) < 2:
            raise ValueError("fusion needs at least two teachers: fusion:SPEC+SPEC")
        self.parts = list(parts)
        self.needs_text = any(p.needs_text for p in parts)  # type: ignore[misc]
        self.oracle = any(p.oracle for p in parts)  # type: ignore[misc]
        self._stats: dict[tuple[int, str], tuple[float, float]] = {}

    @classmethod
    def from_spec(cls, argument: str | None, context: TeacherContext) -> FusionTeacher:
        from tour_pyserini.teachers import get_teacher

        if not argument:
            raise ValueError("fusion needs teachers: fusion:SPEC+SPEC")
        return cls([get_teacher(spec, context) for spec in argument.split("+")])

    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        total = [np.zeros(len(r.docids)) for r in requests]
        for i, part in enumerate(self.parts):
            for j, (request, scores) in enumerate(zip(requests, part.score(requests))):
                mean, std = self._stats.setdefault((i, request.qid), (float(np.mean(scores)), float(np.std(scores))))
                total[j] += (scores - mean) / (std if std > 0 else 1.0)
        return total

    @property
    def label(self) -> str:
        return "fusion(" + "+".join(p.label for p in self.parts) + ")"
