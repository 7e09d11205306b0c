"""Answering questions from retrieved passages: the extractive span reader, its selection rules and answer
predictions (``python -m tour_pyserini.answer`` runs the ``answer`` command)."""

from tour_pyserini.answer.model import (
    Passage,
    Question,
    Reader,
    ReaderOptions,
    check_reader,
    resolve_reader_precision,
)
from tour_pyserini.answer.passages import questions_to_read
from tour_pyserini.answer.spans import DEFAULT_RULE, RULES

__all__ = [
    "DEFAULT_RULE",
    "RULES",
    "Passage",
    "Question",
    "Reader",
    "ReaderOptions",
    "check_reader",
    "questions_to_read",
    "resolve_reader_precision",
]
