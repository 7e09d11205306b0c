"""TREC qrels files: ``qid iteration docid relevance`` per line."""

from __future__ import annotations

from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.files.lines import read_fields


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """``{qid: {docid: relevance}}``; a line without exactly four fields or an integer grade raises."""
    qrels: dict[str, dict[str, int]] = {}
    for lineno, (qid, _, docid, grade) in read_fields(path, "qid iter docid relevance", "qrels"):
        try:
            qrels.setdefault(qid, {})[docid] = int(grade)
        except ValueError:
            raise UserError(f"{path}:{lineno}: relevance {grade!r} is not an integer") from None
    if not qrels:
        raise UserError(f"{path}: no judgements")
    return qrels
