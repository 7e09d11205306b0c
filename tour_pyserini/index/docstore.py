"""A docid -> (title, text) store kept next to each index, for teachers and re-rankers.

Pyserini's ``FaissSearcher.doc()`` only works for its prebuilt indexes, so our indexes carry their own
store: one SQLite file, read by key without loading the collection into memory.
"""

from __future__ import annotations

import sqlite3
import tempfile
import threading
from collections.abc import Iterable, Sequence
from contextlib import ExitStack, closing
from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.index.corpus import Document, corpus_file, read_jsonl_corpus
from tour_pyserini.index.layout import DOCSTORE_FILE

__all__ = ["DocStore", "Document", "open_passages", "read_jsonl_corpus"]


class DocStore:
    """Read-only access to the documents of one index by docid."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"no document store at {self.path}")
        # one connection shared by the threads of a batch search or a server: Python's sqlite3 does not
        # serialise statements on a shared connection, so concurrent lookups take turns
        self._db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        self._lock = threading.Lock()

    @staticmethod
    def build(path: str | Path, docs: Iterable[Document]) -> int:
        """Write a new store at ``path`` and return the number of documents."""
        path = Path(path)
        path.unlink(missing_ok=True)
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE docs (docid TEXT PRIMARY KEY, title TEXT, text TEXT)")
            db.executemany("INSERT INTO docs VALUES (?, ?, ?)", ((d.docid, d.title, d.text) for d in docs))
            (n,) = db.execute("SELECT COUNT(*) FROM docs").fetchone()
        return n

    def _rows(self, sql: str, params: Sequence[str] = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, params).fetchall()

    def __len__(self) -> int:
        return self._rows("SELECT COUNT(*) FROM docs")[0][0]

    def __contains__(self, docid: str) -> bool:
        return bool(self._rows("SELECT 1 FROM docs WHERE docid = ?", (docid,)))

    def get(self, docids: Sequence[str]) -> list[Document]:
        """Documents in the order asked for; an unknown docid raises ``UserError``."""
        found: dict[str, Document] = {}
        for start in range(0, len(docids), 500):  # SQLite caps the number of bound parameters
            chunk = list(docids[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for row in self._rows(f"SELECT docid, title, text FROM docs WHERE docid IN ({marks})", chunk):
                found[row[0]] = Document(*row)
        missing = [d for d in docids if d not in found]
        if missing:
            raise UserError(f"docids not in {self.path}: {missing[:5]}")
        return [found[d] for d in docids]

    def __getitem__(self, docid: str) -> Document:
        return self.get([docid])[0]

    def close(self) -> None:
        self._db.close()


def open_passages(
    stack: ExitStack, *, index: str | Path | None = None, collection: str | Path | None = None
) -> DocStore:
    """The passages of an index (its docstore) or of a collection (a store built for the caller's ``stack``, in a
    temporary directory), closed with the stack."""
    if index is not None:
        return stack.enter_context(closing(DocStore(Path(index) / DOCSTORE_FILE)))
    if collection is None:
        raise UserError("the passages need an index or a collection (--index DIR or --collection DIR)")
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory())) / DOCSTORE_FILE
    DocStore.build(tmp, read_jsonl_corpus(corpus_file(collection)))
    return stack.enter_context(closing(DocStore(tmp)))
