"""Topics files: TSV (``qid<TAB>text``) and JSON lines (``{"qid", "question"|"text"|"query", ...}``)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

_QID_KEYS = ("qid", "_id", "id", "query_id")
_TEXT_KEYS = ("question", "text", "query", "title")


@dataclass(frozen=True)
class Topic:
    qid: str
    text: str
    answers: tuple[str, ...] = ()


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n").rstrip("\r")
            if line.strip():
                yield lineno, line


def _first(obj: dict, keys: tuple[str, ...]):
    return next((obj[k] for k in keys if k in obj), None)


def _parse_jsonl(path: Path) -> Iterator[tuple[int, Topic]]:
    for lineno, line in _lines(path):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
        qid, text = _first(obj, _QID_KEYS), _first(obj, _TEXT_KEYS)
        if qid is None or text is None:
            raise ValueError(f"{path}:{lineno}: expected a qid ({'/'.join(_QID_KEYS)}) and a text "
                             f"({'/'.join(_TEXT_KEYS)}) field")  # fmt: skip
        answers = obj.get("answers", obj.get("answer", []))
        if not isinstance(answers, list):
            raise ValueError(f"{path}:{lineno}: 'answers' must be a list, got {type(answers).__name__}")
        yield lineno, Topic(str(qid), str(text), tuple(str(a) for a in answers))


def _parse_tsv(path: Path) -> Iterator[tuple[int, Topic]]:
    for lineno, line in _lines(path):
        qid, tab, text = line.partition("\t")
        if not tab:
            raise ValueError(f"{path}:{lineno}: expected 'qid<TAB>text', found no tab")
        yield lineno, Topic(qid.strip(), text)


def read_topics(path: str | Path) -> list[Topic]:
    """Topics in file order. Empty texts, duplicate qids and malformed lines raise ``ValueError``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"unknown topics {str(path)!r}: no such file")
    is_json = path.name.removesuffix(".gz").endswith((".jsonl", ".json"))
    topics, seen = [], set()
    for lineno, topic in (_parse_jsonl if is_json else _parse_tsv)(path):
        if not topic.text.strip():
            raise ValueError(f"{path}:{lineno}: query {topic.qid!r} has empty text")
        if topic.qid in seen:
            raise ValueError(f"{path}:{lineno}: duplicate qid {topic.qid!r}")
        seen.add(topic.qid)
        topics.append(topic)
    if not topics:
        raise ValueError(f"{path}: no topics")
    return topics
