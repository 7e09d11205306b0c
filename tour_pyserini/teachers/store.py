"""Teacher scores kept on disk, so that a (query, document) pair is scored once across many runs.

An optional persistent layer under the per-search :class:`~tour_pyserini.teachers.cache.ScoreCache`
(benchmarks run hundreds of configurations over the same pairs). Only teachers whose pair scores do not
depend on the other candidates (``Teacher.pairwise``) can be stored. The file records the label of the
teacher that filled it and refuses another one, so a retrained teacher never reuses old scores: name
the file after the teacher's fingerprint.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path

from tour_pyserini.errors import UserError


class ScoreStore:
    """``(query text, docid) -> score`` in one SQLite file, for one teacher."""

    def __init__(self, path: str | Path, teacher_label: str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path)
        self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        self.db.execute("CREATE TABLE IF NOT EXISTS scores (query TEXT, docid TEXT, score REAL, "
                        "PRIMARY KEY (query, docid))")  # fmt: skip
        self.db.execute("INSERT OR IGNORE INTO meta VALUES ('teacher', ?)", (teacher_label,))
        self.db.commit()
        (stored,) = self.db.execute("SELECT value FROM meta WHERE key = 'teacher'").fetchone()
        if stored != teacher_label:
            raise UserError(f"score store {self.path} holds scores of teacher {stored!r}, not {teacher_label!r}")

    def get(self, query: str, docids: Sequence[str]) -> dict[str, float]:
        """The stored scores among ``docids`` (missing ones are absent)."""
        found: dict[str, float] = {}
        for start in range(0, len(docids), 500):  # SQLite's limit on bound parameters
            chunk = list(docids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            rows = self.db.execute(f"SELECT docid, score FROM scores WHERE query = ? AND docid IN ({marks})",
                                   [query, *chunk])  # fmt: skip
            found.update(rows)
        return found

    def put(self, query: str, scores: Mapping[str, float]) -> None:
        self.db.executemany("INSERT OR REPLACE INTO scores VALUES (?, ?, ?)",
                            [(query, d, float(s)) for d, s in scores.items()])  # fmt: skip
        self.db.commit()

    def close(self) -> None:
        self.db.close()
