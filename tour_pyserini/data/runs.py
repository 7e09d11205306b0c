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

from tour_pyserini.data.lines import parse_finite, read_fields
from tour_pyserini.data.staging import check_outputs, open_locked, open_writable
from tour_pyserini.errors import UserError
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
    """Write a run (and optionally its per-query trace) so that ``path`` only ever appears complete.

    Each finished batch of queries is appended to ``<path>.partial`` at once, its end recorded in
    ``<path>.partial.json`` beside the ``signature`` (e.g. the search arguments), and the file is renamed
    onto ``path`` when the writer closes without error. If a run is interrupted, a new writer for the
    same path and signature resumes it from the end of the last whole batch: ``done`` holds the qids
    written before it, and anything after it (a batch cut off mid-write) is dropped. Resuming at a batch
    boundary matters because a query's vector depends, in its last bits, on which texts share its
    matrix product: a rerun of the same batches recomputes the same bits, so a resumed run is
    byte-identical to an uninterrupted one with the same batch size and threads. ``write`` is a batch
    of one. A run that fails before finishing a batch leaves no file behind.

    One process writes a run at a time: the partial file is locked (``flock``), and a second writer
    fails at once. The kernel releases the lock of a killed process, so it never blocks a rerun.

    ``trace`` names a JSON-lines file of one record per query that follows the run's rules: reset
    with it, truncated on resume to exactly the queries the run holds, renamed together with it.
    """

    def __init__(self, path: str | Path, tag: str = "tour_pyserini", signature: dict | None = None,
                 decimals: int = DECIMALS, *, resume: bool = True, trace: str | Path | None = None):  # fmt: skip
        self.path = Path(path)
        self.tag = tag
        self.decimals = decimals
        self.partial = _partial_name(self.path, ".partial")
        self.sidecar = _partial_name(self.path, ".partial.json")
        self.trace = Path(trace) if trace else None
        self.trace_partial = _partial_name(self.trace, ".partial") if self.trace else None
        self.done: set[str] = set()
        self.no_hits: list[str] = []  # queries written with no hits, in order
        check_outputs({"--output": self.path, "--trace": self.trace})
        self._file = open_locked(self.partial)
        self._signature = json.dumps(signature or {}, sort_keys=True)
        self._complete = self._trace_complete = 0  # bytes of the partial files that hold whole batches
        try:
            self._trace_file = open_writable(self.trace_partial, "--trace") if self.trace else None
            if resume and (end := _batches_end(self.sidecar, self._signature)) is not None:
                self.done = _truncate_to_whole_batches(self.partial, end)
                if self.trace and not _truncate_trace(self.trace_partial, self.done):
                    self.done = set()  # the trace lacks queries the run holds: start both over
            if self.done:
                # the trace was cut through another handle: its end is the file's, not this handle's position
                trace_end = self._trace_file.seek(0, os.SEEK_END) if self._trace_file else 0
                self._complete, self._trace_complete = end, trace_end
            else:
                self._file.truncate(0)
                if self._trace_file:
                    self._trace_file.truncate(0)
                self._record_batches_end(0)
        except BaseException:
            self.close(commit=False)
            raise

    def write(self, qid: str, hits: Sequence[Hit], trace: dict | None = None) -> None:
        """Append one query's hits (and its trace record) as a batch of one."""
        self.write_batch([(qid, hits, trace)])

    def write_batch(self, batch: Sequence[tuple[str, Sequence[Hit], dict | None]]) -> None:
        """Append a batch of ``(qid, hits, trace record)`` and flush it, then record its end, so an interrupt
        keeps it and a resumed run starts after it."""
        written = set()
        for qid, hits, trace in batch:
            if qid in self.done or qid in written:
                raise ValueError(f"query {qid!r} written twice to {self.path}")
            self._file.write(format_run_lines(qid, hits, self.tag, self.decimals))
            if self._trace_file and trace is not None:
                self._trace_file.write(json.dumps({"qid": qid, **trace}) + "\n")
            written.add(qid)
            if not hits:
                self.no_hits.append(qid)
        self._file.flush()
        if self._trace_file:
            self._trace_file.flush()
        end, trace_end = self._file.tell(), self._trace_file.tell() if self._trace_file else 0
        self._record_batches_end(end)
        # stored by one statement after the record: an interrupt sees the batch either done or not
        self._complete, self._trace_complete, self.done = end, trace_end, self.done | written

    def _record_batches_end(self, end: int) -> None:
        staged = _partial_name(self.sidecar, ".tmp")
        staged.write_text(json.dumps({"signature": self._signature, "batches_end": end}))
        os.replace(staged, self.sidecar)  # a kill never leaves half a record

    def close(self, commit: bool = True) -> None:
        """Rename the finished files into place, or keep what a rerun can resume from (only that)."""
        trace_file = getattr(self, "_trace_file", None)
        try:
            if commit:
                os.replace(self.partial, self.path)
                if self.trace:
                    os.replace(self.trace_partial, self.trace)
                self.sidecar.unlink(missing_ok=True)
            elif self._complete == 0:  # no whole batch to resume from
                for leftover in (self.partial, self.sidecar, trace_file and self.trace_partial):
                    if leftover:
                        leftover.unlink(missing_ok=True)
            else:  # keep exactly the whole batches ``done`` holds in both files, not a batch an interrupt cut off
                for f, end in ((self._file, self._complete), (trace_file, self._trace_complete)):
                    if f:
                        f.flush()
                        os.ftruncate(f.fileno(), end)
                self._record_batches_end(self._complete)  # an interrupt may have come after a newer record
        finally:
            if trace_file:
                trace_file.close()
            self._file.close()  # releases the lock, after the files are in place

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(commit=exc_type is None)


def _partial_name(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def _batches_end(sidecar: Path, signature: str) -> int | None:
    """Where the whole batches of an interrupted run with this ``signature`` end; None if there is no such run."""
    try:
        record = json.loads(sidecar.read_text())
        return record["batches_end"] if record["signature"] == signature else None
    except (OSError, ValueError, KeyError, TypeError):  # no record, or one from another version
        return None


def _truncate_to_whole_batches(partial: Path, end: int) -> set[str]:
    """Cut ``partial`` after its last whole batch (byte ``end``); return the qids that remain."""
    data = partial.read_bytes()
    if len(data) < end:  # shorter than recorded: not the file the record describes
        return set()
    with open(partial, "r+b") as f:
        f.truncate(end)
    return {line.split(b" ", 1)[0].decode() for line in data[:end].splitlines()}


def _truncate_trace(trace_partial: Path, done: set[str]) -> bool:
    """Keep the first record of each query in ``done``; False if some query of ``done`` has none."""
    kept: dict[str, bytes] = {}
    for line in trace_partial.read_bytes().splitlines(keepends=True):
        try:
            qid = json.loads(line)["qid"]
        except (ValueError, KeyError, TypeError):  # a record cut off by a kill
            continue
        if qid in done and qid not in kept:
            kept[qid] = line
    if kept.keys() != done:
        return False
    trace_partial.write_bytes(b"".join(kept.values()))
    return True


def write_run(path: str | Path, rankings: Iterable[tuple[str, Sequence[Hit]]], tag: str = "tour_pyserini") -> None:
    """Write a whole run atomically (as one batch: nothing to resume in a write that never waits)."""
    with RunWriter(path, tag) as writer:
        writer.write_batch([(qid, hits, None) for qid, hits in rankings])


def read_run(path: str | Path) -> dict[str, dict[str, float]]:
    """``{qid: {docid: score}}`` from a TREC run, each query's docids in rank order: score descending, then the
    rank column (as evaluation tools read a run), whatever the order of the file's lines. Malformed lines,
    non-finite scores and repeated docids raise."""
    hits: dict[str, dict[str, tuple[float, int]]] = {}
    for lineno, (qid, _, docid, rank, score, _) in read_fields(path, "qid Q0 docid rank score tag", "run"):
        value = parse_finite(score, f"{path}:{lineno}", "score")
        try:
            position = int(rank)
        except ValueError:
            raise UserError(f"{path}:{lineno}: rank {rank!r} is not an integer") from None
        docs = hits.setdefault(qid, {})
        if docid in docs:
            raise UserError(f"{path}:{lineno}: docid {docid!r} appears twice for query {qid!r}")
        docs[docid] = (value, position)
    return {qid: {d: s for d, (s, _) in sorted(docs.items(), key=lambda item: (-item[1][0], item[1][1]))}
            for qid, docs in hits.items()}  # fmt: skip
