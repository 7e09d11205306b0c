"""What the search systems of one process share, each opened once whoever asks first: the dense indexes, the
query encoders, the searchers, the teachers, the score stores and the TTT-Embed states.

A server holds one :class:`Resources` for all its indexes and requests; a command holds one for its search; a
teacher that reads the searcher's index or query encoder reads the very same object (a dense teacher, a residual
cross-encoder, an ensemble's parts).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

from tour_pyserini.encoders.query import QueryEncoders
from tour_pyserini.index.faiss_index import OpenIndexes
from tour_pyserini.rewriters.ttt_embed import StateShift
from tour_pyserini.teachers.store import Room, ScoreStore


class Resources:
    """The shared objects, by what identifies each. ``room``: what every score store may write (a server's data
    directory bound; None: no bound). Safe to share between a server's checking and searching threads."""

    def __init__(self, room: Room | None = None):
        self.indexes = OpenIndexes()
        self.encoders = QueryEncoders()
        self.room = room
        self._built: dict[tuple[str, Hashable], Any] = {}
        self._lock = threading.RLock()

    def shared(self, kind: str, key: Hashable, make: Callable[[], Any]) -> Any:
        """The object of ``kind`` known by ``key``, made by ``make()`` the first time it is asked for."""
        with self._lock:
            if (kind, key) not in self._built:
                self._built[kind, key] = make()
            return self._built[kind, key]

    def state(self, path: str, task: str | None) -> StateShift:
        """The TTT-Embed state in ``path`` for ``task``, read once."""
        resolved = Path(path).resolve()
        return self.shared("state", (resolved, task), lambda: StateShift.load(path, task))

    def store(self, path: str, fingerprint: str) -> ScoreStore:
        """The score store at ``path`` of the teacher with ``fingerprint``, opened once (another teacher's is
        refused as the store refuses it)."""
        return self.shared(
            "store", (Path(path).resolve(), fingerprint), lambda: ScoreStore(path, fingerprint, self.room)
        )

    def close(self) -> None:
        """Close the score stores (the rest is released with the process)."""
        with self._lock:
            for (kind, _), built in self._built.items():
                if kind == "store":
                    built.close()
