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

from tour_pyserini.errors import UserError
from tour_pyserini.files.lines import read_text
from tour_pyserini.numbers import Param
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


def resolve_part(spec: str, base: Path) -> str:
    """``spec`` with its argument made relative to ``base`` when that path exists."""
    parsed = TeacherSpec.parse(spec)
    if parsed.argument and not Path(parsed.argument).is_absolute() and (base / parsed.argument).exists():
        return str(parsed.with_argument(str(base / parsed.argument)))
    return spec


def read_ensemble(path: str | Path) -> dict:
    """The ensemble file, checked: a list of parts, each a teacher spec with a finite weight, not all 0."""
    path = Path(path)
    if path.is_dir():
        raise UserError(
            f"ensemble file {path} is a directory; name the JSON file in it (e.g. {path / 'ensemble.json'})"
        )
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
        weight = p.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not np.isfinite(weight):
            raise UserError(f"ensemble file {path}: part {p['teacher']!r} has no finite weight (a number)")
    if not any(p["weight"] for p in parts):
        raise UserError(f"ensemble file {path}: every weight is 0, so it would score every pair 0")
    return record


def ensemble_files(spec: str, base: Path | None) -> list[Path]:
    """The ensemble files a teacher spec names, itself or through a fusion's parts, as they are built: an
    ensemble's part read beside the file's directory ``base``, a fusion's parts as given."""
    parsed = TeacherSpec.parse(resolve_part(spec, base) if base else spec)
    if parsed.kind == "fusion" and parsed.argument:
        return [path for part in parsed.argument.split("+") for path in ensemble_files(part, None)]
    return [Path(parsed.argument)] if parsed.kind == "ensemble" and parsed.argument else []


def check_ensemble(path: Path, chain: tuple[Path, ...] = ()) -> dict:
    """:func:`read_ensemble` of ``path`` and of every ensemble file its parts name, down to the last; a file
    that names itself through its parts is one line showing the circle."""
    here = path.resolve()
    if here in chain:
        circle = " -> ".join(str(p) for p in (*chain[chain.index(here) :], here))
        raise UserError(f"ensemble file {path} names itself through its parts: {circle}")
    record = read_ensemble(path)
    for part in record["parts"]:
        for nested in ensemble_files(part["teacher"], path.parent):
            check_ensemble(nested, (*chain, here))
    return record


def write_ensemble(path: str | Path, parts: Sequence[tuple[str, float]], fitted_on: dict) -> None:
    record = {"parts": [{"teacher": spec, "weight": weight} for spec, weight in parts], "fitted_on": fitted_on}
    Path(path).write_text(json.dumps(record, indent=2) + "\n")


@TEACHERS.register
class EnsembleTeacher(Teacher):
    """``ensemble:FILE``: sum over parts of weight x the part's score."""

    name = "ensemble"
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
        record = check_ensemble(Path(argument))
        base = Path(argument).parent
        parts = [get_teacher(resolve_part(p["teacher"], base), context) for p in record["parts"]]
        return cls(parts, [p["weight"] for p in record["parts"]])

    @classmethod
    def options_read(cls, argument: str | None) -> list[Param]:
        """Its parts' flags; every teacher's while its file cannot be read (refused, in its own words, when built)."""
        if not argument:
            return []
        try:
            parts = check_ensemble(Path(argument))["parts"]
        except UserError:
            return teacher_options()
        base = Path(argument).parent
        return list(dict.fromkeys(o for p in parts for o in options_read_by(resolve_part(p["teacher"], base))))

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
