"""TREC run files: ``qid Q0 docid rank score tag``, written atomically and resumably.

Scores are printed with a fixed number of decimals and made strictly decreasing within a query at
that precision, so every evaluation tool sees the ranking in exactly the order it was produced
(tools break score ties differently).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from tour_pyserini.data.lines import read_fields
from tour_pyserini.results import Hit

DECIMALS = 6


def strictly_decreasing(scores: Sequence[float], decimals: int = DECIMALS) -> list[float]:
    """Round ``scores`` (given in rank order) and lower any score that does not fall below its predecessor.

    A score that ties with or exceeds the one above it after rounding becomes that score minus one
    unit of the last decimal, so ties keep the rank order and the printed scores strictly decrease.
    """
    if len(scores) == 0:
        return []
    units = np.rint(np.asarray(scores, dtype=np.float64) * 10.0**decimals).astype(np.int64)
    # u'_i = min(u_i, u'_{i-1} - 1) unrolls to min_{j<=i}(u_j + j) - i
    steps = np.arange(len(units))
    units = np.minimum.accumulate(units + steps) - steps
    return (units / 10.0**decimals).tolist()


def format_run_lines(qid: str, hits: Sequence[Hit], tag: str, decimals: int = DECIMALS) -> str:
    scores = strictly_decreasing([h.score for h in hits], decimals)
    return "".join(
        f"{qid} Q0 {hit.docid} {rank} {score:.{decimals}f} {tag}\n"
        for rank, (hit, score) in enumerate(zip(hits, scores), 1)
    )


class RunWriter:
    """Write a run so that ``path`` only ever appears complete.

    Queries are appended to ``<path>.partial`` as they finish and the file is renamed onto ``path`` when
    the writer closes without error. If a run is interrupted, a new writer for the same path and the
    same ``signature`` (e.g. the search arguments) resumes it: ``done`` holds the qids already written,
    after dropping the last query of the partial file, which may have been cut off mid-write.
    """

    def __init__(self, path: str | Path, tag: str = "tour_pyserini", signature: dict | None = None,
                 decimals: int = DECIMALS):  # fmt: skip
        self.path = Path(path)
        self.tag = tag
        self.decimals = decimals
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.sidecar = self.path.with_name(self.path.name + ".partial.json")
        signature_text = json.dumps(signature or {}, sort_keys=True)
        self.done: set[str] = set()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        resumable = self.partial.exists() and self.sidecar.exists() and self.sidecar.read_text() == signature_text
        if resumable:
            self.done = _truncate_to_complete_queries(self.partial)
        else:
            self.partial.write_text("")
            self.sidecar.write_text(signature_text)
        self._file = open(self.partial, "a", encoding="utf-8")

    def write(self, qid: str, hits: Sequence[Hit]) -> None:
        if qid in self.done:
            raise ValueError(f"query {qid!r} written twice to {self.path}")
        self._file.write(format_run_lines(qid, hits, self.tag, self.decimals))
        self.done.add(qid)

    def flush(self) -> None:
        self._file.flush()

    def close(self, commit: bool = True) -> None:
        self._file.close()
        if commit:
            os.replace(self.partial, self.path)
            self.sidecar.unlink(missing_ok=True)

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(commit=exc_type is None)


def _truncate_to_complete_queries(partial: Path) -> set[str]:
    """Cut ``partial`` before its last query's lines; return the qids that remain."""
    data = partial.read_bytes()
    qids: list[str] = []
    offsets: list[int] = []  # byte offset where each qid's block starts
    pos = 0
    for line in data.splitlines(keepends=True):
        qid = line.split(b" ", 1)[0].decode()
        if not qids or qid != qids[-1]:
            qids.append(qid)
            offsets.append(pos)
        pos += len(line)
    if not qids:
        return set()
    with open(partial, "r+b") as f:
        f.truncate(offsets[-1])
    return set(qids[:-1])


def write_run(path: str | Path, rankings: Iterable[tuple[str, Sequence[Hit]]], tag: str = "tour_pyserini") -> None:
    """Write a whole run atomically."""
    with RunWriter(path, tag) as writer:
        for qid, hits in rankings:
            writer.write(qid, hits)


def read_run(path: str | Path) -> dict[str, dict[str, float]]:
    """``{qid: {docid: score}}`` from a TREC run; malformed lines and repeated docids raise ``ValueError``."""
    run: dict[str, dict[str, float]] = {}
    for lineno, (qid, _, docid, _, score, _) in read_fields(path, "qid Q0 docid rank score tag", "run"):
        try:
            value = float(score)
        except ValueError:
            raise ValueError(f"{path}:{lineno}: score {score!r} is not a number") from None
        docs = run.setdefault(qid, {})
        if docid in docs:
            raise ValueError(f"{path}:{lineno}: docid {docid!r} appears twice for query {qid!r}")
        docs[docid] = value
    return run
