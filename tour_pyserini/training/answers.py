"""Which indexed passages contain a question's answer: DPR's has-answer rule over the whole collection.

The block encoder is frozen during the early update, so whether a block is answer-bearing never
changes: it is decided once per (question, block) with ``eval.answers.AnswerMatcher`` (DPR's rule, the
one evaluation uses), after a cheap necessary test that skips most pairs: DPR's tokens cover every
non-space character, so a matching answer's letters and digits occur, in order and contiguous, in the
passage's letters and digits.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from tour_pyserini.errors import UserError
from tour_pyserini.eval.answers import AnswerMatcher


def alnum(text: str) -> str:
    return "".join(ch for ch in unicodedata.normalize("NFD", text).lower() if ch.isalnum())


def answer_bearing(topics: Sequence, docids: Sequence[str], matcher: AnswerMatcher) -> list[list[int]]:
    """For each topic, the rows (positions in ``docids``) of the passages containing one of its answers."""
    docs = matcher.docstore.get(list(docids))
    squashed = [alnum(doc.text) for doc in docs]
    rows = []
    for topic in topics:
        keys = [alnum(a) for a in topic.answers]
        rows.append(
            [
                i
                for i, (doc, text) in enumerate(zip(docs, squashed))
                if any(k in text for k in keys) and matcher.has_answer(doc.docid, doc.text, topic.answers)
            ]
        )
    return rows


def check_trainable(rows: Sequence[Sequence[int]], train: Sequence[int], index_dir) -> None:
    """One line, before any model loads, when no training question (positions ``train`` of ``rows``, as
    :func:`answer_bearing` gives them) has an answer-bearing block: every one would be skipped."""
    if any(rows[i] for i in train):
        return
    if held := sum(bool(r) for r in rows):
        raise UserError(
            f"the {held} question(s) whose answers occur in a block of {index_dir} all went to the dev "
            "split: lower --dev-fraction or give more questions"
        )
    raise UserError(
        f"no question's answers occur in any block of {index_dir} (DPR's match): every question would be "
        "skipped, nothing trained"
    )
