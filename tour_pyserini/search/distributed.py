"""Distributed batch search on Ray: batches of topics go to workers that each open the searcher once.

Each worker is a Ray actor that opens the index (memory-mapped, so workers on one machine share the page
cache), the rewriter and the teacher from the same :class:`SearchConfig` as a single-process search.
Batches are handed to whichever worker is free and their results come back in submission order, so the
run file is written exactly as a single-process search writes it. A worker whose process dies is
restarted by Ray (it opens its searcher again) and the batch it was running is retried on it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

from tour_pyserini._java import ray_init_beside_jvm
from tour_pyserini.errors import UserError
from tour_pyserini.results import SearchResult
from tour_pyserini.search.configure import SearchConfig, open_searcher


class SearchWorker:
    """One Ray actor: a searcher opened from the search's configuration on first use (again after a restart)."""

    def __init__(self, config: SearchConfig):
        self.config = replace(config, threads=config.threads or 1)
        self.searcher = None
        self.teacher_label = None

    def open(self) -> tuple[int, str | None]:
        """Open the searcher now; the worker's process id and the teacher's label."""
        if self.searcher is None:
            self.searcher, self.teacher_label = open_searcher(self.config)
        return os.getpid(), self.teacher_label

    def retrieve(self, texts: Sequence[str], qids: Sequence[str], hits: int) -> list[SearchResult]:
        self.open()
        return self.searcher.retrieve(texts, qids, hits)


class RayPool:
    """``workers`` Ray actors searching for one driver; use as a context manager.

    ``address`` is passed to ``ray.init``: None starts a local Ray instance sized for the workers, ``"auto"``
    joins the cluster started by ``ray start --head`` on this machine, ``"ray://host:10001"`` a remote one.
    Closing a pool it started shuts Ray down, which resets signal handlers that a JVM running in this process
    needs: use one pool per process (as the search command does), not Lucene after it.
    """

    def __init__(self, config: SearchConfig, *, workers: int, address: str | None = None):
        try:
            import ray
        except ImportError:
            raise UserError("--ray needs the ray package: pip install 'tour-pyserini[ray]'") from None
        if workers < 1:
            raise UserError(f"--workers must be positive, got {workers}")
        start = time.perf_counter()
        self.owns_ray = not ray.is_initialized()
        if self.owns_ray:
            local = {"num_cpus": workers * (config.threads or 1), "include_dashboard": False} if address is None else {}
            ray_init_beside_jvm(address=address, logging_level="warning", **local)
        threads = config.threads or 1
        gpus = 1 if config.device.startswith("cuda") else 0  # Ray gives each worker its own GPU as "cuda"
        actor = ray.remote(num_cpus=threads, num_gpus=gpus, max_restarts=-1, max_task_retries=-1)(SearchWorker)
        self.actors = [actor.remote(config) for _ in range(workers)]
        opened = ray.get([a.open.remote() for a in self.actors])
        self.pids = [pid for pid, _ in opened]
        self.teacher_label = opened[0][1]
        self.startup_seconds = time.perf_counter() - start

    def map(self, batches: Iterable[tuple[list[str], list[str], int]]) -> Iterator[list[SearchResult]]:
        """The results of each (texts, qids, hits) batch, in the order the batches were given."""
        from ray.util import ActorPool

        yield from ActorPool(self.actors).map(lambda actor, batch: actor.retrieve.remote(*batch), batches)

    def close(self) -> None:
        import ray

        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        if self.owns_ray:
            ray.shutdown()

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
