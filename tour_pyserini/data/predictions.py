"""Answer predictions: JSON lines ``{"qid", "answer", "docid", "score"}``, one per question, written as runs are.

:class:`PredictionWriter` follows :class:`~tour_pyserini.data.runs.RunWriter`'s rules: batches appended to
``<path>.partial`` under an exclusive lock, the end of the last whole batch recorded beside a signature in
``<path>.partial.json``, a rerun with the same signature resuming after it, and the file renamed onto
``path`` only when every question is written.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tour_pyserini.data.lines import text_lines
from tour_pyserini.data.staging import open_locked
from tour_pyserini.errors import UserError


@dataclass(frozen=True)
class Prediction:
    qid: str
    answer: str
    docid: str
    score: float


def _parse(line: str, where: str) -> Prediction:
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        raise UserError(f"{where}: not valid JSON ({e.msg})") from None
    if not isinstance(obj, dict) or not {"qid", "answer"} <= set(obj):
        raise UserError(f"{where}: expected an object with 'qid' and 'answer'")
    if not isinstance(obj["answer"], str):  # str() would score null as the answer "None"
        got = json.dumps(obj["answer"])[:40]
        raise UserError(f"{where}: 'answer' must be a string (\"\" for no answer), got {got}")
    score = obj.get("score", 0.0)
    if not isinstance(score, (int, float)) or not math.isfinite(score):
        raise UserError(f"{where}: score {score!r} is not a finite number")
    return Prediction(str(obj["qid"]), obj["answer"], str(obj.get("docid", "")), float(score))


def read_predictions(path: str | Path) -> dict[str, Prediction]:
    """``{qid: Prediction}``; a malformed line, an answer that is not a string, a question predicted twice or
    an empty file raises, naming file and line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"predictions file {str(path)!r} does not exist")
    found: dict[str, Prediction] = {}
    for lineno, line in text_lines(path):
        if not line.strip():
            continue
        pred = _parse(line, f"{path}:{lineno}")
        if pred.qid in found:
            raise UserError(f"{path}:{lineno}: question {pred.qid!r} is predicted twice")
        found[pred.qid] = pred
    if not found:  # a run of the answer command that never finished, or the wrong file: not a score of 0
        raise UserError(f"{path} holds no predictions")
    return found


def prediction_line(pred: Prediction) -> str:
    return json.dumps(asdict(pred), ensure_ascii=False) + "\n"


class PredictionWriter:
    """Write predictions so that ``path`` only ever appears complete, resumably (see the module's docstring)."""

    def __init__(self, path: str | Path, signature: dict | None = None, *, resume: bool = True):
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.sidecar = self.path.with_name(self.path.name + ".partial.json")
        self._signature = json.dumps(signature or {}, sort_keys=True)
        self._file = open_locked(self.partial, holder="another command is writing these predictions")
        self.done: set[str] = set()
        end = self._recorded_end() if resume else None
        data = self.partial.read_bytes()
        if end is not None and len(data) >= end:
            self._file.truncate(end)  # a batch cut off by a kill is dropped
            self.done = {json.loads(line)["qid"] for line in data[:end].splitlines()}
        else:
            end = 0
            self._file.truncate(0)
        self._complete = end
        self._record(end)

    def _recorded_end(self) -> int | None:
        try:
            record = json.loads(self.sidecar.read_text())
            return record["batches_end"] if record["signature"] == self._signature else None
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _record(self, end: int) -> None:
        staged = self.sidecar.with_name(self.sidecar.name + ".tmp")
        staged.write_text(json.dumps({"signature": self._signature, "batches_end": end}))
        os.replace(staged, self.sidecar)  # a kill never leaves half a record

    def write_batch(self, batch: Sequence[Prediction]) -> None:
        written = set()
        for pred in batch:
            if pred.qid in self.done or pred.qid in written:
                raise ValueError(f"question {pred.qid!r} written twice to {self.path}")
            self._file.write(prediction_line(pred))
            written.add(pred.qid)
        self._file.flush()
        end = self._file.tell()
        self._record(end)
        # stored by one statement after the record: an interrupt sees the batch either done or not
        self._complete, self.done = end, self.done | written

    def close(self, commit: bool = True) -> None:
        try:
            if commit:
                os.replace(self.partial, self.path)
                self.sidecar.unlink(missing_ok=True)
            elif self._complete == 0:
                self.partial.unlink(missing_ok=True)
                self.sidecar.unlink(missing_ok=True)
            else:  # keep exactly the whole batches ``done`` holds, not a batch an interrupt cut off
                self._file.flush()
                os.ftruncate(self._file.fileno(), self._complete)
                self._record(self._complete)  # an interrupt may have come after a newer record
        finally:
            self._file.close()

    def __enter__(self) -> PredictionWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(commit=exc_type is None)
