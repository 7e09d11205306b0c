"""TREC qrels files: ``qid iteration docid relevance`` per line, checked as trec_eval checks them."""

from __future__ import annotations

from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.files.collections import named_split
from tour_pyserini.files.lines import read_fields

# pytrec_eval, which ir-measures scores with, holds a grade in a C int: a larger one comes back as another number (a
# relevant document judged 4294967296 counts as not relevant), where trec_eval stops on it
GRADES = range(-(2**31), 2**31)


def read_qrels(path: str | Path) -> dict[str, dict[str, int]]:
    """``{qid: {docid: relevance}}`` of a qrels file, or of a registered collection's split named ``COLLECTION-SPLIT``
    (``scifact-test``). Each of these raises, naming file and line: a line without exactly four fields
    (fields are separated by ASCII whitespace, as trec_eval separates them), a blank line or a NUL byte (trec_eval
    refuses both), a grade that is not an integer or does not fit a 32-bit one, and a docid judged twice for one
    query (trec_eval's "duplicate docs")."""
    if not Path(path).exists() and (named := named_split(str(path))) is not None:
        collection, split = named
        if split.qrels is None:
            raise UserError(
                f"{path}: {collection.name} is judged by the answer strings of its topics: --answers {path}"
            )
        path = split.qrels
    qrels: dict[str, dict[str, int]] = {}
    first: dict[tuple[str, str], int] = {}
    for lineno, (qid, _, docid, grade) in read_fields(path, "qid iter docid relevance", "qrels", blank_lines=False):
        try:
            value = int(grade)
        except ValueError:
            raise UserError(f"{path}:{lineno}: relevance {grade!r} is not an integer") from None
        if value not in GRADES:
            raise UserError(
                f"{path}:{lineno}: relevance {value} does not fit a 32-bit integer (trec_eval stops on it, "
                "pytrec_eval reads another number)"
            )
        if (qid, docid) in first:
            raise UserError(
                f"{path}:{lineno}: docid {docid!r} is judged twice for query {qid!r} (first at line "
                f"{first[qid, docid]}); trec_eval refuses duplicate judgements"
            )
        first[qid, docid] = lineno
        qrels.setdefault(qid, {})[docid] = value
    if not qrels:
        raise UserError(f"{path}: no judgements")
    return qrels
