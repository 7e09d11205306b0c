"""Typed loaders for topics and qrels; every malformed line is reported with its file and line number."""

from tour_pyserini.data.qrels import read_qrels
from tour_pyserini.data.topics import Topic, read_topics

__all__ = ["Topic", "read_qrels", "read_topics"]
