"""The ensemble teacher: a weighted sum of other teachers' raw scores, with weights fitted on dev queries.

``ensemble:FILE`` names a small JSON file (what ``python -m tour_pyserini fit-ensemble`` writes)::

    {"parts": [{"teacher": "cross-encoder:.", "weight": 0.8}, {"teacher": "bm25", "weight": 0.05}, ...],
     "fitted_on": {...}}

A part's path argument is read relative to the file's directory when it exists there, so a file kept
inside a model directory can name the model as ``cross-encoder:.``. Raw scores (no per-query
normalisation) keep every pair's score independent of the other candidates: the ensemble is pairwise
when its parts are, and its scores can be stored and reused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tour_pyserini.data.lines import read_text
from tour_pyserini.errors import UserError
from tour_pyserini.teachers.base import TEACHERS, ScoreRequest, Teacher, TeacherContext, get_teacher


def resolve_part(spec: str, base: Path) -> str:
    """``spec`` with its argument made relative to ``base`` when that path exists."""
    kind, sep, argument = spec.partition(":")
    if argument and not Path(argument).is_absolute() and (base / argument).exists():
        return f"{kind}{sep}{base / argument}"
    return spec


def read_ensemble(path: str | Path) -> dict:
    """The ensemble file, checked: a list of parts, each a teacher spec with a finite weight."""
    path = Path(path)
    try:
        record = json.loads(read_text(path))
    except FileNotFoundError:
        raise UserError(f"ensemble file {path}: no such file") from None
    except json.JSONDecodeError as e:
        raise UserError(f"ensemble file {path}: not JSON ({e})") from None
    parts = record.get("parts") if isinstance(record, dict) else None
    if not parts or not all(isinstance(p, dict) and isinstance(p.get("teacher"), str) for p in parts):
        raise UserError(f'ensemble file {path}: needs "parts": [{{"teacher": SPEC, "weight": W}}, ...]')
    for p in parts:
        if not isinstance(p.get("weight"), (int, float)) or not np.isfinite(p["weight"]):
            raise UserError(f"ensemble file {path}: part {p['teacher']!r} has no finite weight")
    return record


def write_ensemble(path: str | Path, parts: Sequence[tuple[str, float]], fitted_on: dict) -> None:
    record = {"parts": [{"teacher": spec, "weight": weight} for spec, weight in parts], "fitted_on": fitted_on}
    Path(path).write_text(json.dumps(record, indent=2) + "\n")


@TEACHERS.register
class EnsembleTeacher(Teacher):
    """``ensemble:FILE``: sum over parts of weight x the part's score."""

    name = "ensemble"
    composite = True
    usage = "ensemble:FILE"

    def __init__(self, parts: Sequence[Teacher], weights: Sequence[float]):
        if len(parts) != len(weights) or not parts:
            raise UserError("an ensemble needs one weight per part and at least one part")
        self.parts = list(parts)
        self.weights = [float(w) for w in weights]
        self.needs_text = any(p.needs_text for p in parts)  # type: ignore[misc]
        self.oracle = any(p.oracle for p in parts)  # type: ignore[misc]
        self.pairwise = all(p.pairwise for p in parts)  # type: ignore[misc]

    @classmethod
    def from_spec(cls, argument: str | None, context: TeacherContext) -> EnsembleTeacher:
        if not argument:
            raise UserError("the ensemble teacher needs a weights file: ensemble:FILE")
        record = read_ensemble(argument)
        base = Path(argument).parent
        parts = [get_teacher(resolve_part(p["teacher"], base), context) for p in record["parts"]]
        return cls(parts, [p["weight"] for p in record["parts"]])

    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        total = [np.zeros(len(r.docids)) for r in requests]
        for part, weight in zip(self.parts, self.weights):
            for j, scores in enumerate(part.score(requests)):
                total[j] += weight * scores
        return total

    @property
    def label(self) -> str:
        return "ensemble(" + "+".join(f"{w:.3g}*{p.label}" for p, w in zip(self.parts, self.weights)) + ")"

    @property
    def fingerprint(self) -> str:
        return "ensemble(" + "+".join(f"{w!r}*{p.fingerprint}" for p, w in zip(self.parts, self.weights)) + ")"
