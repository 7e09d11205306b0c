"""The collections the toolkit knows by name: one ``collection.yaml`` each, in the collection's directory.

A declaration says what a collection is made of and how a run over it is judged::

    name: scifact
    corpus: corpus.jsonl
    judged_by: qrels              # qrels (TREC judgments), or answers (answer strings in the topics)
    metrics: [nDCG@10, R@100, RR@10]
    splits:
      test: {topics: topics.test.tsv, qrels: ../../qrels/scifact.test.txt}
      train: {topics: topics.train.tsv, qrels: ../../qrels/scifact.train.txt}

Paths are relative to the file. A name is looked up as ``NAME/collection.yaml`` in each directory of
``TOUR_PYSERINI_COLLECTIONS`` (separated by ``:``), then in ``./collections``: a user adds a collection by writing
one such file beside its corpus. Every command that takes ``--collection`` takes a name as well as a directory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.files.declarations import read_mapping

DECLARATION = "collection.yaml"
JUDGED_BY = ("qrels", "answers")


class UnknownCollection(UserError):
    """A name that is neither a path nor a collection the registry finds."""


@dataclass(frozen=True)
class Split:
    """One split's topics, and its qrels (None where the topics hold answer strings)."""

    topics: Path
    qrels: Path | None = None


@dataclass(frozen=True)
class Collection:
    name: str
    directory: Path
    corpus: Path
    judged_by: str  # "qrels" or "answers"
    metrics: tuple[str, ...]
    splits: dict[str, Split]

    def index_path(self, kind: str) -> str:
        """Where the commands that build indexes by name put this collection's index of ``kind`` (``minilm``,
        ``bm25``, ...): ``indexes/NAME.KIND``."""
        return f"indexes/{self.name}.{kind}"

    def split(self, name: str) -> Split:
        if name not in self.splits:
            raise UserError(f"collection {self.name} has no split {name!r}; its splits: {', '.join(self.splits)}")
        return self.splits[name]


def search_path() -> list[Path]:
    """Where names are looked up: ``TOUR_PYSERINI_COLLECTIONS``'s directories, then ``./collections``."""
    given = [Path(p) for p in os.environ.get("TOUR_PYSERINI_COLLECTIONS", "").split(os.pathsep) if p]
    return [*given, Path("collections")]


def collection_names() -> list[str]:
    """Every collection a name finds, first found first."""
    names: dict[str, None] = {}
    for directory in search_path():
        if directory.is_dir():
            names.update(dict.fromkeys(sorted(p.parent.name for p in directory.glob(f"*/{DECLARATION}"))))
    return list(names)


def find_collection(name_or_directory: str | Path) -> Collection:
    """The collection a directory holding ``collection.yaml`` declares, or the one named so."""
    path = Path(name_or_directory)
    if (path / DECLARATION).is_file():
        return read_collection(path / DECLARATION)
    if path.is_dir() or "/" in str(name_or_directory):
        raise UserError(f"{name_or_directory}: no {DECLARATION} there (a collection directory declares itself in one)")
    for directory in search_path():
        if (directory / str(name_or_directory) / DECLARATION).is_file():
            return read_collection(directory / str(name_or_directory) / DECLARATION)
    known = ", ".join(collection_names()) or "none"
    raise UnknownCollection(f"unknown collection {str(name_or_directory)!r}; the collections known by name: {known}")


def named_split(name: str) -> tuple[Collection, Split] | None:
    """The split a Pyserini-style topics or qrels name ``COLLECTION-SPLIT`` (``scifact-test``) gives, of a collection
    the registry finds; None for any other name."""
    for collection in collection_names():
        if name.startswith(f"{collection}-"):
            found = find_collection(collection)
            if (split := name.removeprefix(f"{collection}-")) in found.splits:
                return found, found.splits[split]
    return None


def collection_directory(name_or_directory: str | Path) -> Path:
    """A collection's directory: ``name_or_directory`` itself where it is one, else the named collection's."""
    path = Path(name_or_directory)
    return path if path.exists() else find_collection(name_or_directory).directory


def read_collection(path: Path) -> Collection:
    """One declaration, checked: every file it names exists, one line naming the file where something is wrong."""
    raw = read_mapping(path, {"name", "corpus", "judged_by", "metrics", "splits"})
    base = path.parent

    def existing(value: object, what: str) -> Path:
        if not isinstance(value, str) or not (base / value).is_file():
            raise UserError(f"{path}: {what} {value!r} is not a file beside it")
        return (base / value).resolve()

    judged_by = raw.get("judged_by")
    if judged_by not in JUDGED_BY:
        raise UserError(f"{path}: judged_by must be one of {', '.join(JUDGED_BY)}, got {judged_by!r}")
    metrics = raw.get("metrics")
    if not isinstance(metrics, list) or not metrics or not all(isinstance(m, str) for m in metrics):
        raise UserError(f"{path}: metrics must be a list of measure names")
    splits = raw.get("splits")
    if not isinstance(splits, dict) or not splits:
        raise UserError(f"{path}: splits must map split names to their topics (and qrels)")
    parsed = {}
    for split, files in splits.items():
        if not isinstance(files, dict) or "topics" not in files:
            raise UserError(f"{path}: split {split!r} needs its topics")
        qrels = files.get("qrels")
        if (qrels is None) != (judged_by == "answers"):
            raise UserError(
                f"{path}: split {split!r}: a collection judged by {judged_by} "
                + ("has no qrels" if judged_by == "answers" else "needs its qrels")
            )
        parsed[str(split)] = Split(
            existing(files["topics"], f"split {split!r}'s topics"),
            None if qrels is None else existing(qrels, f"split {split!r}'s qrels"),
        )
    name = raw.get("name")
    if name != base.name:
        raise UserError(f"{path}: name {name!r} is not its directory's ({base.name!r}): a name finds its directory")
    return Collection(name, base.resolve(), existing(raw.get("corpus"), "corpus"), judged_by, tuple(metrics), parsed)
