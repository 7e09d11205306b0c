"""The one small interface every query rewriter implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from tour_pyserini.results import SearchResult

if TYPE_CHECKING:
    from tour_pyserini.search.searcher import TourSearcher

_REGISTRY: dict[str, type[Rewriter]] = {}


@dataclass(frozen=True)
class QueryBatch:
    """Queries that advance through a rewriter together: ids, texts and encoded vectors (n, d)."""

    qids: list[str]
    texts: list[str]
    vectors: np.ndarray

    def __post_init__(self) -> None:
        if not (len(self.qids) == len(self.texts) == len(self.vectors)):
            raise ValueError(
                f"batch has {len(self.qids)} qids, {len(self.texts)} texts and {len(self.vectors)} vectors"
            )

    def __len__(self) -> int:
        return len(self.qids)


class Rewriter(ABC):
    """Turns encoded queries into final rankings.

    A rewriter may search the full, unchanged index as often as it likes through
    ``searcher.search_vectors`` (with ``return_vector=True`` for candidate vectors), ask a teacher
    about candidate texts from ``searcher.docstore``, and move the query vectors. It returns one
    :class:`SearchResult` per query, in batch order, with ``k`` hits and a filled-in trace.
    Subclasses register themselves under their ``name``, the value of ``--rewriter``.
    """

    name: ClassVar[str]

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            _REGISTRY[cls.name] = cls

    @abstractmethod
    def rewrite(self, batch: QueryBatch, searcher: TourSearcher, k: int) -> list[SearchResult]: ...
