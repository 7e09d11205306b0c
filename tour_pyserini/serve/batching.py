"""Requests of many clients batched for one searching thread: a short window, a bounded queue, deadlines.

The thread takes the first waiting job, gathers whatever else arrives within ``window`` seconds (up to
``max_batch`` jobs), and hands them to ``handler`` together, so the encoder and the teacher see one batch.
A full queue refuses at once (:class:`queue.Full`; the server answers 503 with Retry-After); a job whose
client gave up before the thread reached it is skipped. :meth:`close` lets the thread finish every job
already queued, then stops it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

log = logging.getLogger(__name__)

_STOP = object()


@dataclass
class Job:
    payload: Any
    future: Future = field(default_factory=Future)


class Worker(Protocol):
    def handle(self, payloads: Sequence[Any]) -> list:
        """One result, or an exception to raise in the client, per payload."""

    def close(self) -> None: ...


W = TypeVar("W", bound=Worker)


class Batcher(Generic[W]):
    """One thread handing batches of payloads to a :class:`Worker`.

    ``setup`` runs first on that thread and returns the worker; what it opens (SQLite connections, models)
    belongs to the thread, which closes it when it stops. :meth:`start` waits for it and re-raises its error.
    """

    def __init__(self, setup: Callable[[], W], *, window: float = 0.005, max_batch: int = 64, max_queue: int = 256):
        if window < 0 or max_batch < 1 or max_queue < 1:
            raise ValueError("window must be >= 0, max_batch and max_queue >= 1")
        self.setup = setup
        self.window, self.max_batch = window, max_batch
        self.jobs: queue.Queue = queue.Queue(max_queue)
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.worker: W | None = None
        self.thread = threading.Thread(target=self.loop, name="search", daemon=True)
        self.batches = 0
        self.batched = 0  # jobs run, over all batches

    def start(self) -> W:
        """Start the thread; the worker its ``setup`` made there (its error raised here)."""
        self.thread.start()
        self.ready.wait()
        if self.error is not None:
            raise self.error
        assert self.worker is not None  # loop() makes it before it says ready, unless setup raised
        return self.worker

    def submit(self, payload: Any) -> Future:
        """Queue a job; :class:`queue.Full` when ``max_queue`` jobs already wait."""
        job = Job(payload)
        self.jobs.put_nowait(job)
        return job.future

    def gather(self, first: Job) -> tuple[list[Job], bool]:
        """``first`` and the jobs that arrive within the window; whether the stop mark came among them."""
        batch, deadline = [first], time.monotonic() + self.window
        while len(batch) < self.max_batch:
            try:
                job = self.jobs.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if job is _STOP:
                return batch, True
            batch.append(job)
        return batch, False

    def loop(self) -> None:
        try:
            self.worker = worker = self.setup()
        except BaseException as e:  # handed to start(), which raises it in the starting thread
            self.error = e
            self.ready.set()
            return
        self.ready.set()
        try:
            self.serve(worker)
        finally:
            worker.close()

    def serve(self, worker: W) -> None:
        stopping = False
        while True:
            try:
                first = self.jobs.get(timeout=0.1) if stopping else self.jobs.get()
            except queue.Empty:
                return  # stopping, and nothing is left
            if first is _STOP:
                stopping = True
                continue
            batch, stop = self.gather(first)
            stopping = stopping or stop
            self.run(worker, [job for job in batch if job.future.set_running_or_notify_cancel()])

    def run(self, worker: W, batch: list[Job]) -> None:
        if not batch:
            return
        self.batches += 1
        self.batched += len(batch)
        try:
            results = worker.handle([job.payload for job in batch])
        except Exception as e:  # the whole batch failed: each of its clients gets the error
            log.exception("a batch of %d requests failed", len(batch))
            results = [e] * len(batch)
        for job, result in zip(batch, results):
            if isinstance(result, BaseException):
                job.future.set_exception(result)
            else:
                job.future.set_result(result)

    def close(self) -> None:
        """Finish the queued jobs, then stop the thread."""
        if self.thread.is_alive():
            self.jobs.put(_STOP)
            self.thread.join()
