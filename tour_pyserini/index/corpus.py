"""JSONL corpora (Pyserini/BEIR): read and checked before indexing, so that no document is lost silently.

Each line is one JSON object with an id (``id``, ``_id`` or ``docid``) and its text: ``title`` and/or
``text``, or ``contents``. ``contents`` follows Pyserini's convention: ``title + "\n" + text``, the one newline
separating the fields (its DPR tools read ``title, text = contents.split("\n")``, its encoder splits ``contents``
at newlines into ``--fields title text``), so a ``contents`` with exactly one newline is read as title and text, and
the ``contents`` a BM25 index stores is written that way, a newline inside a title or text becoming a space
(:func:`lucene_record`). Anserini, meeting a document without a ``contents`` field, stops indexing
the rest of the file, and it skips one with empty contents, each with only a log line; Pyserini's dense
encoder stops at a document without both ``title`` and ``text``. So every line is checked first (UTF-8,
a JSON object, an id without whitespace, unique ids, a text field), each error naming the file and
line, and each indexer is given a normalised copy when the corpus lacks the fields it reads. A document
whose text is empty (Cranfield has two) cannot be found by BM25 and is left out of a Lucene index with
a warning; it stays in the dense index and the document store.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.files.collections import collection_names
from tour_pyserini.files.lines import BOM, text_lines

ID_KEYS = ("id", "_id", "docid")
TEXT_KEYS = ("title", "text", "contents")


@dataclass(frozen=True)
class Document:
    docid: str
    title: str
    text: str

    @property
    def contents(self) -> str:
        return f"{self.title} {self.text}".strip()


@dataclass(frozen=True)
class CorpusCheck:
    """What indexing needs to know about a valid corpus."""

    path: Path
    num_docs: int
    empty: tuple[str, ...]  # ids of documents whose text is empty: Lucene cannot index them
    lucene_ready: bool  # every line is its lucene_record(): 'id', Pyserini's 'contents' (Anserini reads the file)
    pyserini_ready: bool  # every line has 'title' and 'text', as Pyserini's dense encoder reads them


def corpus_file(collection: str | Path) -> Path:
    """The JSONL corpus of a collection directory (``corpus.jsonl``), or the file itself."""
    path = Path(collection)
    if path.is_dir():
        path = path / "corpus.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"no corpus at {path} (expected a collection directory with corpus.jsonl, or a collection's name: "
            f"{', '.join(collection_names()) or 'none is declared here'})"
        )
    return path


def _string(obj: dict, key: str, where: str) -> str:
    value = obj.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise UserError(f"{where}: field {key!r} must be a string, got {type(value).__name__}")
    return value


def _document(obj, where: str) -> Document:
    if not isinstance(obj, dict):
        raise UserError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    docid = next((obj[k] for k in ID_KEYS if k in obj), None)
    if docid is None:
        raise UserError(f"{where}: document has no 'id', '_id' or 'docid' field")
    docid = str(docid)
    if not docid or any(c.isspace() for c in docid):
        # run files are whitespace-separated: such an id would break every run that retrieves it
        raise UserError(f"{where}: document id {docid!r} is empty or contains whitespace")
    if not any(k in obj for k in TEXT_KEYS):
        raise UserError(f"{where}: document {docid!r} has no text field ('title', 'text' or 'contents')")
    doc = Document(docid, _string(obj, "title", where), _string(obj, "text", where))
    if not doc.contents:
        contents = _string(obj, "contents", where)
        title, newline, text = contents.partition("\n")
        # Pyserini's "title\ntext"; with no newline, or several, the whole is the text
        doc = Document(docid, title, text) if newline and "\n" not in text else Document(docid, "", contents)
    return doc


def pyserini_field(value: str) -> str:
    """A title or a text as it stands inside Pyserini's ``contents``: a newline, which separates the fields there,
    becomes a space (to every tokenizer here, and Lucene's, the same word boundary)."""
    return value.replace("\n", " ")


def lucene_record(obj: dict, doc: Document) -> dict | None:
    """The JSON line Anserini indexes for ``doc`` (read from ``obj``), or None for a document without text (which
    Anserini would skip). Its ``contents`` is Pyserini's ``title\ntext`` with newline-free fields, so that Pyserini's
    ``convert_trec_run_to_dpr_retrieval_run`` reads back exactly the title and text (it stops on a third field) and
    matches answers in the text as the answer judge does; its ``title`` and ``text``, where the line has them, are
    newline-free too (its ``--combine-title-text`` joins them with a newline). A document's own ``contents`` that is
    not its title and text (a document expansion, say) is indexed as given."""
    own = obj.get("contents")
    if isinstance(own, str) and own.strip() and own != f"{doc.title}\n{doc.text}":
        contents = own
    else:
        contents = f"{pyserini_field(doc.title)}\n{pyserini_field(doc.text)}"
    if not contents.strip():
        return None
    record = {"id": doc.docid}
    record.update({key: pyserini_field(getattr(doc, key)) for key in ("title", "text") if key in obj})
    record["contents"] = contents
    return record


def _records(path: Path) -> Iterator[tuple[str, dict, Document]]:
    """``(file:line, object, document)`` for each non-blank line, each checked."""
    for lineno, line in text_lines(path):
        where = f"{path}:{lineno}"
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:  # e.lineno counts within the line: report the file's line
            raise UserError(f"{where}: not valid JSON ({e.msg}, column {e.colno})") from None
        yield where, obj, _document(obj, where)


def _unique_records(path: Path) -> Iterator[tuple[str, dict, Document]]:
    first_seen: dict[str, str] = {}
    for where, obj, doc in _records(path):
        if doc.docid in first_seen:
            raise UserError(f"{where}: duplicate document id {doc.docid!r} (first at {first_seen[doc.docid]})")
        first_seen[doc.docid] = where
        yield where, obj, doc


def read_jsonl_corpus(path: str | Path) -> Iterator[Document]:
    """The documents of a JSONL corpus, in file order; a malformed line or a repeated id raises UserError."""
    return (doc for _, _, doc in _unique_records(Path(path)))


def check_corpus(path: str | Path) -> CorpusCheck:
    """Read the whole corpus once: every line valid, ids unique, at least one document with text."""
    path = Path(path)
    num_docs, empty, lucene_ready, pyserini_ready = 0, [], True, True
    for _, obj, doc in _unique_records(path):
        num_docs += 1
        if not doc.contents.strip():
            empty.append(doc.docid)
        record = lucene_record(obj, doc)
        lucene_ready &= (
            "id" in obj and record is not None and all(obj.get(k) == v for k, v in record.items() if k != "id")
        )
        pyserini_ready &= obj.get("title") == doc.title and obj.get("text") == doc.text
    if num_docs == 0:
        raise UserError(f"{path}: the corpus holds no documents")
    if len(empty) == num_docs:
        raise UserError(f"{path}: all {num_docs} documents have empty text; there is nothing to index")
    # both indexers read the file itself: a byte-order mark would join the first line's JSON, and
    # Pyserini's encoder fails on a blank line
    with open(path, "rb") as f:
        bom = f.read(len(BOM.encode())) == BOM.encode()
        f.seek(0)
        pyserini_ready &= not bom and not any(not raw.strip() for raw in f)
    lucene_ready &= not bom
    return CorpusCheck(path, num_docs, tuple(empty), lucene_ready, pyserini_ready)


def write_normalised(path: str | Path, out: Path, fields: str) -> Path:
    """Write the corpus as the lines Anserini indexes (``fields="contents"``: :func:`lucene_record`, Pyserini's
    ``title\ntext`` contents; empty documents, which it cannot index, left out) or else as ``{"id", "title",
    "text"}`` lines (for Pyserini's dense encoder)."""
    with open(out, "w", encoding="utf-8") as f:
        for _, obj, doc in _unique_records(Path(path)):
            if fields == "contents":
                record = lucene_record(obj, doc)
                if record is None:
                    continue
            else:
                record = {"id": doc.docid, "title": doc.title, "text": doc.text}
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return out
