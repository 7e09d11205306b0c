"""The oracle teacher: relevance grades from qrels. For tests and upper-bound analysis only."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.files.qrels import read_qrels
from tour_pyserini.teachers.base import TEACHERS, ScoreRequest, Teacher, TeacherContext


@TEACHERS.register
class OracleTeacher(Teacher):
    """Scores a candidate by its qrels grade (unjudged: 0). Results made with it are labelled 'oracle'."""

    name = "oracle"
    usage = "oracle:QRELS"
    needs_text = False
    oracle = True

    def __init__(self, qrels: dict[str, dict[str, int]], scale: float = 10.0):
        self.qrels = qrels
        self.scale = scale  # grades become logits; 10 makes a relevant document dominate the softmax

    @classmethod
    def from_spec(cls, argument: str | None, context: TeacherContext) -> OracleTeacher:
        if not argument:
            raise UserError("the oracle teacher needs qrels: oracle:PATH")
        return cls(read_qrels(argument))

    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        return [
            self.scale * np.array([max(self.qrels.get(r.qid, {}).get(d, 0), 0) for d in r.docids], dtype=float)
            for r in requests
        ]

    @property
    def label(self) -> str:
        return "oracle"

    @property
    def fingerprint(self) -> str:
        """The judgments' content and the scale: other qrels (or a corrected file) never reuse scores."""
        judged = json.dumps(sorted((q, d, g) for q, docs in self.qrels.items() for d, g in docs.items()))
        return f"oracle scale {self.scale!r} qrels {hashlib.sha256(judged.encode()).hexdigest()[:16]}"
