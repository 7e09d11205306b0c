"""Typed files the toolkit reads and writes: topics, qrels, runs and predictions (every malformed line reported
with its file and line number), their resumable writers, staged outputs, digests and run comparisons."""

from tour_pyserini.files.qrels import read_qrels
from tour_pyserini.files.topics import Topic, read_topics

__all__ = ["Topic", "read_qrels", "read_topics"]
