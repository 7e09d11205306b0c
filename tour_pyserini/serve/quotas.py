"""What the server may write and whose queries it may have judged: the data directory's size, bounded by
``--max-data-mb``, and each client's judged queries a day (``--judged-per-day``).

The directory is measured afresh before every write (score stores, the rewards log, states) and before a query
is judged; a write that would take it past its bound is skipped. A judged query counts against its client's
day only once the teacher has judged it: one refused on the way (the directory full, the teacher failing or
scoring nothing) is given back.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tour_pyserini.serve.access import RateLimit

DAY_SECONDS = 86_400


class DataQuota:
    """The bytes under ``directory``, at most ``max_mb`` MiB (None: no bound). The directory is full once it
    reaches its bound or a write did not fit, until something in it is removed."""

    def __init__(self, directory: str | Path, max_mb: float | None):
        self.directory, self.max_bytes = Path(directory), None if max_mb is None else max_mb * 2**20
        self.lock = threading.Lock()  # the searching thread and the refit thread write here
        self.refused = 0  # writes skipped for want of room
        self.full_at: int | None = None  # the bytes used when a write last did not fit

    def used(self) -> int:
        return sum(f.stat().st_size for f in self.directory.rglob("*") if f.is_file())

    def full(self) -> bool:
        """Whether no query should be judged now: nothing more would be kept."""
        if self.max_bytes is None:
            return False
        used = self.used()
        return used >= self.max_bytes or (self.full_at is not None and used >= self.full_at)

    def status(self) -> dict:
        return {
            "used_mb": round(self.used() / 2**20, 3),
            "max_mb": self.max_bytes and self.max_bytes / 2**20,
            "writes_refused": self.refused,
        }

    @contextmanager
    def writing(self, nbytes: int) -> Iterator[bool]:
        """Whether ``nbytes`` more fit, held until the caller's write is done, so that two threads cannot both
        take the last room."""
        if self.max_bytes is None:
            yield True
            return
        with self.lock:
            used = self.used()
            fits = used + nbytes <= self.max_bytes
            if not fits:
                self.refused, self.full_at = self.refused + 1, used
            yield fits


class JudgedQueries:
    """Whose query may be judged now: the data directory has room, and the client is within its day's quota."""

    def __init__(self, data: DataQuota, per_day: int | None):
        self.data = data
        self.day = RateLimit(per_day, DAY_SECONDS)

    def take(self, client: str) -> bool:
        """Whether ``client``'s query may be judged (counted if so)."""
        return not self.data.full() and self.day.retry_after(client) is None

    def give_back(self, client: str) -> None:
        """Uncount a judged query of ``client`` the teacher did not judge after all."""
        self.day.give_back(client)
