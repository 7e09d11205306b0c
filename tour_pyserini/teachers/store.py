"""Teacher scores kept on disk, so that a (query, document) pair is scored once across many runs.

An optional persistent layer under the per-search :class:`~tour_pyserini.teachers.cache.ScoreCache`
(benchmarks run hundreds of configurations over the same pairs). Only teachers whose pair scores do not
depend on the other candidates (``Teacher.pairwise``) can be stored. The file records the fingerprint of
the teacher that filled it and refuses another one, so a retrained teacher, or one reading another index,
never reuses old scores. A store is stamped as such when created (``PRAGMA application_id``): any other
existing file, SQLite or not, is refused untouched. Only finite scores are kept.
"""

from __future__ import annotations

import hashlib
import math
import re
import sqlite3
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from urllib.parse import quote

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.index.docstore import DocStore
from tour_pyserini.teachers.base import ScoreRequest, Teacher, TeacherContext, with_docids, with_texts
from tour_pyserini.teachers.cross_encoder import RUNTIME_NAMES

APPLICATION_ID = 0x544F5552  # "TOUR", in the SQLite header at offset 68
SQLITE_MAGIC = b"SQLite format 3\x00"
TABLES = {"meta", "scores"}  # stores written before the stamp are recognised by their tables
# how a cross-encoder's fingerprint names a runtime other than torch, and which runtime each name is
RUNTIME_PART = re.compile(" runtime (" + "|".join(map(re.escape, RUNTIME_NAMES.values())) + ")")
RUNTIME_OF_NAME = {name: runtime for runtime, name in RUNTIME_NAMES.items()}


def runtime_hint(stored: str, wanted: str) -> str:
    """Where two teachers' fingerprints differ only in the runtimes named, the flag that reads the stored
    scores (a store filled before the runtimes' default became auto names none: torch)."""
    if stored == wanted or RUNTIME_PART.sub("", stored) != RUNTIME_PART.sub("", wanted):
        return ""
    found = {RUNTIME_OF_NAME[m.group(1)] for m in RUNTIME_PART.finditer(stored)} or {"torch"}
    return f" (only the runtime differs: --teacher-runtime {found.pop()} reads it)" if len(found) == 1 else ""


def _is_store(path: Path) -> bool:
    """Whether the SQLite file ``path`` is a score store, read without writing to it."""
    with open(path, "rb") as f:
        header = f.read(100)
    if int.from_bytes(header[68:72], "big") == APPLICATION_ID:
        return True
    try:
        db = sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)
        try:
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            return tables == TABLES and db.execute("SELECT 1 FROM meta WHERE key = 'teacher'").fetchone() is not None
        finally:
            db.close()
    except sqlite3.DatabaseError:
        return False


def check_store_path(path: str | Path) -> Path:
    """Refuse, before any model loads, a path where a score store cannot be kept: a file that is not one of
    ours (left as it is), or a place that cannot be written."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"score store {path} is a directory; name a file")
    if path.exists() and path.stat().st_size:  # an empty file is an empty database to SQLite
        with open(path, "rb") as f:
            if f.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC:
                raise UserError(f"score store {path} exists and is not an SQLite file; name a new file")
        if not _is_store(path):
            raise UserError(
                f"score store {path} is an SQLite file of something else, not a score store; name a new file"
            )
    parent = path.absolute().parent
    nearest = next(p for p in (parent, *parent.parents) if p.exists())  # the rest is created on opening
    try:
        if not nearest.is_dir():
            raise NotADirectoryError(20, f"{nearest} is not a directory")
        if path.exists():
            open(path, "r+b").close()  # opened for writing, nothing written
        tempfile.TemporaryFile(dir=nearest).close()  # SQLite keeps its journal beside the file
    except OSError as e:
        raise UserError(f"score store {path} cannot be written ({e.strerror})") from None
    return path


def query_key(query: str) -> str:
    """How a store names a query: its text's SHA-256, so that a long query is not kept again with every pair."""
    return hashlib.sha256(query.encode("utf-8")).hexdigest()


# what may be written: entered with the bytes a write takes, it yields whether they fit (held until the write is done)
Room = Callable[[int], AbstractContextManager[bool]]


def written_bytes(docids: Sequence[str]) -> int:
    """At most what storing scores of ``docids`` adds to a store's directory while it commits: each row (the
    query's 64-digit key, the docid, the score) is kept twice, in the table and in its primary-key index, and split
    pages hold less than they can; until the commit ends, SQLite's rollback journal beside the file holds every page
    it changes, the header and the split ones included (measured: 50 rows grew a store by 20 KB and its journal held
    25 KB, against 11 KB of rows)."""
    rows = 2 * sum(64 + len(d.encode("utf-8")) + 32 for d in docids)
    return 3 * rows + 6 * 4096


class ScoreStore:
    """``(query, docid) -> score`` in one SQLite file, for one teacher. A query is named by its text's SHA-256
    (stores written before keep naming it by its text, which they still read). ``room(nbytes)``, if given, is a
    context manager entered before each write that yields whether ``nbytes`` more may be written: a write that
    may not is skipped (the scores serve the search that asked, and are asked again later)."""

    def __init__(self, path: str | Path, teacher_label: str, room: Room | None = None):
        self.room = room
        self.path = check_store_path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path)
        self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS scores (query TEXT, docid TEXT, score REAL, PRIMARY KEY (query, docid))"
        )
        stored = self.db.execute("SELECT value FROM meta WHERE key = 'teacher'").fetchone()
        if stored is not None and stored[0] != teacher_label:
            self.db.close()
            raise UserError(
                f"score store {self.path} holds scores of teacher {stored[0]!r}, not {teacher_label!r}; "
                f"name another file{runtime_hint(stored[0], teacher_label)}"
            )
        if stored is None:
            self.db.execute("INSERT INTO meta VALUES ('teacher', ?)", (teacher_label,))
            self.db.execute("INSERT INTO meta VALUES ('query', 'sha256')")
        hashed = self.db.execute("SELECT value FROM meta WHERE key = 'query'").fetchone()
        self.key = query_key if hashed is not None else str
        if self.db.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:  # new, or written before stamps
            self.db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        self.db.commit()

    def get(self, query: str, docids: Sequence[str]) -> dict[str, float]:
        """The stored scores among ``docids`` (missing ones are absent)."""
        found: dict[str, float] = {}
        for start in range(0, len(docids), 500):  # SQLite's limit on bound parameters
            chunk = list(docids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            rows = self.db.execute(
                f"SELECT docid, score FROM scores WHERE query = ? AND docid IN ({marks})", [self.key(query), *chunk]
            )
            # a NULL or non-finite score (kept by versions that stored a server's NaN) counts as never scored
            found.update((d, s) for d, s in rows if isinstance(s, (int, float)) and math.isfinite(s))
        return found

    def put(self, query: str, scores: Mapping[str, float]) -> None:
        """Keep the finite ``scores``; a NaN (no score) or an infinity is left out, so a later run asks again."""
        rows = [(self.key(query), d, float(s)) for d, s in scores.items() if math.isfinite(s)]
        if not rows:
            return
        with self.room(written_bytes([d for _, d, _ in rows])) if self.room else nullcontext(True) as fits:
            if fits:
                self.db.executemany("INSERT OR REPLACE INTO scores VALUES (?, ?, ?)", rows)
                self.db.commit()

    def close(self) -> None:
        self.db.close()


class StoredTeacher(Teacher):
    """A teacher whose pair scores are looked up in a :class:`ScoreStore` first; the others are scored by
    the teacher and kept there. Made in code (e.g. around one part of an ensemble), not from a spec.

    With a ``docstore``, requests may come without texts: only the pairs the teacher must score are read.
    """

    name = "stored"

    def __init__(self, teacher: Teacher, store: ScoreStore, docstore: DocStore | None = None):
        if not teacher.pairwise:
            raise ValueError(f"teacher {teacher.label!r} scores depend on the other candidates: they cannot be stored")
        self.teacher = teacher
        self.store = store
        self.docstore = docstore
        self.needs_text = teacher.needs_text  # type: ignore[misc]
        self.oracle = teacher.oracle  # type: ignore[misc]

    @classmethod
    def from_spec(cls, argument: str | None, context: TeacherContext) -> StoredTeacher:
        raise UserError("a stored teacher is made in code: StoredTeacher(teacher, ScoreStore(path, fingerprint))")

    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        stored = [self.store.get(r.query, r.docids) for r in requests]
        todo = [
            (
                i,
                with_docids(
                    r,
                    [d for d in r.docids if d not in stored[i]],
                    [doc for d, doc in zip(r.docids, r.docs) if d not in stored[i]] if r.docs else r.docs,
                ),
            )
            for i, r in enumerate(requests)
        ]
        reads = self.teacher.needs_text and self.docstore is not None
        todo = [(i, with_texts(r, self.docstore) if reads and r.docs is None else r) for i, r in todo if r.docids]
        if todo:

            def keep(j: int, fresh: dict[str, float]) -> None:  # stored as they arrive: an interrupted call keeps them
                self.store.put(todo[j][1].query, fresh)

            scored = self.teacher.score_streaming([r for _, r in todo], keep)
            for (i, request), scores in zip(todo, scored):
                stored[i].update(zip(request.docids, np.asarray(scores, dtype=np.float64).tolist()))
        return [np.array([s[d] for d in r.docids], dtype=np.float64) for r, s in zip(requests, stored)]

    @property
    def label(self) -> str:
        return self.teacher.label

    @property
    def fingerprint(self) -> str:
        return self.teacher.fingerprint
