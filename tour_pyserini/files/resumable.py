"""One protocol for every file a long command writes query by query (runs, traces, answer predictions): the file
only ever appears complete, and an interrupted write resumes after its last whole batch.

Each finished batch is appended to ``<path>.partial`` at once, its end recorded in ``<path>.partial.json`` beside a
``signature`` (e.g. the command's arguments), and the file is renamed onto ``path`` when the writer closes without
error. A new writer for the same path and signature resumes an interrupted one from the end of its last whole
batch: ``done`` holds the qids written before it, and anything after it (a batch cut off mid-write) is dropped.
Resuming at a batch boundary matters because a query's vector depends, in its last bits, on which texts share its
matrix product: a rerun of the same batches recomputes the same bits, so a resumed file is byte-identical to an
uninterrupted one. A write that fails before finishing a batch leaves no file behind.

One process writes a file at a time: the partial file is locked (``flock``), and a second writer fails at once.
The kernel releases the lock of a killed process, so it never blocks a rerun. A ``companion`` file (a run's trace:
one JSON record per query) follows the same rules: reset with it, cut on resume to exactly the queries the main file
holds, renamed together with it.

A writer may record a ``carried`` state with each batch (a rewriter's state carried from query to query in run
order, such as DART's buffer), in the same record as the batch's end: a resumed writer's ``carried`` is the state
after exactly the batches it keeps.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from tour_pyserini.files.staging import check_outputs, open_locked, open_writable


def partial_name(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


class ResumableWriter:
    """Writes batches of ``(qid, text, companion record)``; subclasses say how a qid is read back from a line
    (:meth:`qid_of`) and format their records into text."""

    def __init__(
        self,
        path: str | Path,
        signature: dict | None = None,
        *,
        resume: bool = True,
        companion: str | Path | None = None,
        holder: str = "another command is writing this file",
        flag: str = "--output",
        companion_flag: str = "--trace",
        others: Mapping[str, str | Path | None] | None = None,
    ):
        self.path = Path(path)
        self.partial = partial_name(self.path, ".partial")
        self.sidecar = partial_name(self.path, ".partial.json")
        self.companion = Path(companion) if companion else None
        self.companion_partial = partial_name(self.companion, ".partial") if self.companion else None
        self.done: set[str] = set()
        self.carried: bytes | None = None  # the state recorded with the last whole batch (resumed from)
        # the command's other outputs (a score store) checked with these: writable, and no two the same file
        check_outputs({flag: self.path, companion_flag: self.companion, **(others or {})})
        self._file = open_locked(self.partial, flag, holder)
        self._companion_file = None
        self._signature = json.dumps(signature or {}, sort_keys=True)
        self._complete = self._companion_complete = 0  # bytes of the partial files that hold whole batches
        self._recording: bytes | None = None  # the state the next record carries (that of the end it records)
        self._recorded_carried: bytes | None = None  # the state in the record found on disk
        try:
            if self.companion_partial:
                self._companion_file = open_writable(self.companion_partial, companion_flag)
            resumed_end = 0
            if resume and (end := self._recorded_end()) is not None:
                self.done = self._cut_to_whole_batches(end)
                if self.companion_partial and not _cut_companion(self.companion_partial, self.done):
                    self.done = set()  # the companion lacks queries the file holds: start both over
                self.carried = self._recorded_carried if self.done else None
                resumed_end = end
            if self.done:
                # the companion was cut through another handle: its end is the file's, not this handle's position
                companion_end = self._companion_file.seek(0, os.SEEK_END) if self._companion_file else 0
                self._complete, self._companion_complete = resumed_end, companion_end
            else:
                self._file.truncate(0)
                if self._companion_file:
                    self._companion_file.truncate(0)
                self._record(0)
        except BaseException:
            self.close(commit=False)
            raise

    @staticmethod
    def qid_of(line: bytes) -> str:
        raise NotImplementedError

    def write_texts(self, batch: Sequence[tuple[str, str, dict | None]], carried: bytes | None = None) -> None:
        """Append a batch of ``(qid, text, companion record)`` and flush it, then record its end (and ``carried``,
        the state after it), so an interrupt keeps it and a resumed write starts after it."""
        written = set()
        for qid, text, record in batch:
            if qid in self.done or qid in written:
                raise ValueError(f"query {qid!r} written twice to {self.path}")
            self._file.write(text)
            if self._companion_file and record is not None:
                self._companion_file.write(json.dumps({"qid": qid, **record}) + "\n")
            written.add(qid)
        self._file.flush()
        if self._companion_file:
            self._companion_file.flush()
        end, companion_end = self._file.tell(), self._companion_file.tell() if self._companion_file else 0
        self._recording = carried
        self._record(end)
        # stored by one statement after the record: an interrupt sees the batch either done or not
        self._complete, self._companion_complete, self.done, self.carried = (
            end,
            companion_end,
            self.done | written,
            carried,
        )

    def _recorded_end(self) -> int | None:
        """Where the whole batches of an interrupted write with this signature end; None if there is none."""
        try:
            record = json.loads(self.sidecar.read_text())
            carried = record.get("carried")
            self._recorded_carried = None if carried is None else base64.b64decode(carried, validate=True)
            return record["batches_end"] if record["signature"] == self._signature else None
        except (OSError, ValueError, KeyError, TypeError, AttributeError):  # no record, or one from another version
            return None

    def _record(self, end: int) -> None:
        staged = partial_name(self.sidecar, ".tmp")
        record = {"signature": self._signature, "batches_end": end}
        if self._recording is not None:
            record["carried"] = base64.b64encode(self._recording).decode("ascii")
        staged.write_text(json.dumps(record))
        os.replace(staged, self.sidecar)  # a kill never leaves half a record

    def _cut_to_whole_batches(self, end: int) -> set[str]:
        """Cut the partial file after its last whole batch (byte ``end``); the qids that remain."""
        data = self.partial.read_bytes()
        if len(data) < end:  # shorter than recorded: not the file the record describes
            return set()
        with open(self.partial, "r+b") as f:
            f.truncate(end)
        return {self.qid_of(line) for line in data[:end].splitlines()}

    def close(self, commit: bool = True) -> None:
        """Rename the finished files into place, or keep what a rerun can resume from (only that)."""
        try:
            if commit:
                os.replace(self.partial, self.path)
                if self.companion and self.companion_partial:
                    os.replace(self.companion_partial, self.companion)
                self.sidecar.unlink(missing_ok=True)
            elif self._complete == 0:  # no whole batch to resume from
                for leftover in (self.partial, self.sidecar, self._companion_file and self.companion_partial):
                    if leftover:
                        leftover.unlink(missing_ok=True)
            else:  # keep exactly the whole batches ``done`` holds in both files, not a batch an interrupt cut off
                for f, end in ((self._file, self._complete), (self._companion_file, self._companion_complete)):
                    if f:
                        f.flush()
                        os.ftruncate(f.fileno(), end)
                self._recording = self.carried
                self._record(self._complete)  # an interrupt may have come after a newer record
        finally:
            if self._companion_file:
                self._companion_file.close()
            self._file.close()  # releases the lock, after the files are in place

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.close(commit=exc_type is None)


def _cut_companion(path: Path, done: set[str]) -> bool:
    """Keep the first record of each query in ``done``; False if some query of ``done`` has none."""
    kept: dict[str, bytes] = {}
    for line in path.read_bytes().splitlines(keepends=True):
        try:
            qid = json.loads(line)["qid"]
        except (ValueError, KeyError, TypeError):  # a record cut off by a kill
            continue
        if qid in done and qid not in kept:
            kept[qid] = line
    if kept.keys() != done:
        return False
    path.write_bytes(b"".join(kept.values()))
    return True
