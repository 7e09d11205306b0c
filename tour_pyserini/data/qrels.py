"""TREC qrels files: ``qid iteration docid relevance`` per line."""

from __future__ import annotations

from pathlib import Path


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """``{qid: {docid: relevance}}``; a line without exactly four fields or an integer grade raises."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"qrels file {str(path)!r} does not exist")
    qrels: dict[str, dict[str, int]] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != 4:
                raise ValueError(f"{path}:{lineno}: expected 'qid iter docid relevance', found {len(fields)} fields")
            qid, _, docid, grade = fields
            try:
                qrels.setdefault(qid, {})[docid] = int(grade)
            except ValueError:
                raise ValueError(f"{path}:{lineno}: relevance {grade!r} is not an integer") from None
    if not qrels:
        raise ValueError(f"{path}: no judgements")
    return qrels
