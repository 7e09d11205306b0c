"""Answer predictions: JSON lines ``{"qid", "answer", "docid", "score"}``, one per question, written as runs are
(:mod:`tour_pyserini.files.resumable`: atomic, locked, resumed after the last whole batch)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.files.lines import text_lines
from tour_pyserini.files.resumable import ResumableWriter


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


class PredictionWriter(ResumableWriter):
    """Write predictions so that ``path`` only ever appears complete, resumably (see the module's docstring)."""

    def __init__(self, path: str | Path, signature: dict | None = None, *, resume: bool = True):
        super().__init__(path, signature, resume=resume, holder="another command is writing these predictions")

    @staticmethod
    def qid_of(line: bytes) -> str:
        return json.loads(line)["qid"]

    def write_batch(self, batch: Sequence[Prediction]) -> None:
        self.write_texts([(pred.qid, prediction_line(pred), None) for pred in batch])
