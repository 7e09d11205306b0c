"""Extractive reading over a run's passages: span scores, selection rules, answer predictions."""

from tour_pyserini.reader.model import Passage, Question, Reader, ReaderOptions, check_reader
from tour_pyserini.reader.passages import questions_to_read
from tour_pyserini.reader.spans import DEFAULT_RULE, RULES

__all__ = ["DEFAULT_RULE", "RULES", "Passage", "Question", "Reader", "ReaderOptions", "check_reader",
           "questions_to_read"]  # fmt: skip
