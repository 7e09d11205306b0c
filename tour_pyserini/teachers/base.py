"""The one small interface every teacher implements, and the registry of teacher specs."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tour_pyserini.index.docstore import Document

_REGISTRY: dict[str, type[Teacher]] = {}


@dataclass(frozen=True)
class ScoreRequest:
    """Candidates of one query to be scored; ``docs`` holds their texts when the teacher reads text."""

    qid: str
    query: str
    docids: list[str]
    docs: list[Document] | None = None


class Teacher(ABC):
    """Scores candidates of queries; higher is more relevant.

    A teacher spec on the command line is ``KIND`` or ``KIND:ARGUMENT`` (``cross-encoder:PATH``,
    ``bm25``, ``oracle:QRELS``, ``fusion:SPEC+SPEC``); each subclass registers its ``kind`` and builds
    itself from the argument with :meth:`from_spec`.
    """

    kind: ClassVar[str]
    needs_text: ClassVar[bool] = True  # whether requests must carry document texts
    oracle: ClassVar[bool] = False  # reads relevance judgements: for tests and upper bounds only

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" in cls.__dict__:
            _REGISTRY[cls.kind] = cls

    @classmethod
    @abstractmethod
    def from_spec(cls, argument: str | None, context: TeacherContext) -> Teacher: ...

    @abstractmethod
    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        """One score array per request, aligned with ``request.docids``."""

    @property
    def label(self) -> str:
        """How results produced with this teacher are labelled (contains 'oracle' for oracle teachers)."""
        return self.kind


@dataclass(frozen=True)
class TeacherContext:
    """What a teacher spec may refer to: the dense index it scores candidates of, and reading limits."""

    index_dir: str | None = None
    max_length: int | None = None  # tokens of query + document a model-based teacher reads
