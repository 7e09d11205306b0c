"""Distributed batch search on Ray: batches of topics go to workers that each open the searcher once.

Each worker is a Ray actor that plans and builds its pipeline (the index memory-mapped, so workers on one machine
share the page cache; the rewriter and the teacher) from the same :class:`SearchSpec` as a single-process search, but
for a limit of the whole search that a teacher declares (an API teacher's requests in flight), which the
workers split between them.
Batches are handed to whichever worker is free and their results come back in submission order, so the
run file is written exactly as a single-process search writes it. A worker whose process dies is
restarted by Ray (it opens its searcher again) and the batch it was running is retried on it.
"""

from __future__ import annotations

import functools
import os
import platform
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace

from tour_pyserini._java import ray_init_beside_jvm
from tour_pyserini.errors import USER_ERRORS, UserError
from tour_pyserini.pipeline.build import Pipeline, TeacherInfo, build
from tour_pyserini.pipeline.plan import plan
from tour_pyserini.pipeline.spec import SearchSpec
from tour_pyserini.results import SearchResult
from tour_pyserini.runtime import AUTO, missing_auto_modules
from tour_pyserini.teachers import options_read_by, runtime_is_auto


def returns_user_errors(method):
    """A user error inside a worker comes back as a value, which the driver raises (:func:`raise_user_error`):
    raised in the actor, Ray would print the actor's traceback before the driver's one line."""

    @functools.wraps(method)
    def wrapper(*args, **kwargs):
        try:
            return method(*args, **kwargs)
        except USER_ERRORS as e:
            return e

    return wrapper


def raise_user_error(value):
    if isinstance(value, USER_ERRORS):
        raise value
    return value


def worker_specs(spec: SearchSpec, workers: int) -> list[SearchSpec]:
    """Each worker's spec: the search's, with every shared limit the teacher reads split as
    floor(N / W) per worker and one more for the first N mod W, so that together they never exceed N. A
    limit given below W is refused; the default, below W, becomes 1 per worker (an ensemble may have no part
    that reads it)."""
    specs = [spec] * workers
    for option in options_read_by(spec.teacher) if spec.teacher else []:
        if not option.shared:
            continue
        given = spec.teacher_options.get(option.name)
        if given is not None and given < workers:
            raise UserError(
                f"{option.option} {given} is below --workers {workers}: the workers share it, and each needs at least 1"
            )
        total = max(option.default, workers) if given is None else given
        shares = [total // workers + (i < total % workers) for i in range(workers)]
        specs = [replace(c, teacher_options={**c.teacher_options, option.name: n}) for c, n in zip(specs, shares)]
    return specs


class SearchWorker:
    """One Ray actor: a pipeline built from the search's spec on first use (again after a restart).
    ``missing``: the runtime extra's modules the driver lacks; a worker resolves the runtimes' auto as the driver
    does only where it lacks the same ones, so a node that differs is refused in one line."""

    def __init__(self, spec: SearchSpec, missing: Sequence[str] = ()):
        self.spec = replace(spec, threads=spec.threads or 1)
        self.missing = list(missing)
        self.pipeline: Pipeline | None = None

    @returns_user_errors
    def open(self) -> tuple[int, TeacherInfo | None]:
        """Open the searcher now; the worker's process id and what its teacher is."""
        spec, here = self.spec, missing_auto_modules()
        auto = spec.encoder_runtime == AUTO or runtime_is_auto(spec.teacher, spec.teacher_options)
        if auto and here != self.missing:
            raise UserError(
                f"ray worker on {platform.node()}: the runtime extra is "
                f"{'not ' if here else ''}installed here, but "
                f"{'not ' if self.missing else ''}on the driver, so the runtimes' auto would differ: "
                "install the same extras on every node, or name --encoder-runtime and "
                "--teacher-runtime"
            )
        return os.getpid(), self.built().info

    def built(self) -> Pipeline:
        """The pipeline, built on first use."""
        if self.pipeline is None:
            self.pipeline = build(plan(self.spec))
        return self.pipeline

    @returns_user_errors
    def run(self, texts: Sequence[str], qids: Sequence[str], k: int) -> list[SearchResult]:
        raise_user_error(self.open())
        return self.built().run(texts, qids, k)


class RayPool:
    """``workers`` Ray actors searching for one driver; use as a context manager.

    ``address`` is passed to ``ray.init``: None starts a local Ray instance sized for the workers, ``"auto"``
    joins the cluster started by ``ray start --head`` on this machine, ``"ray://host:10001"`` a remote one.
    Closing a pool it started shuts Ray down, which resets signal handlers that a JVM running in this process
    needs: use one pool per process (as the search command does), not Lucene after it.
    """

    def __init__(self, spec: SearchSpec, *, workers: int, address: str | None = None):
        if address is None:  # a local instance listens on 127.0.0.1 only: Ray's non-cluster mode, read when Ray
            # is first imported (a program that imported it before keeps Ray's default, the machine's address)
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        try:
            import ray
        except ImportError:
            raise UserError("--ray needs the ray package: pip install 'tour-pyserini[ray]'") from None
        if workers < 1:
            raise UserError(f"--workers must be positive, got {workers}")
        specs = worker_specs(spec, workers)
        start = time.perf_counter()
        self.owns_ray = not ray.is_initialized()
        if self.owns_ray:
            local = {"num_cpus": workers * (spec.threads or 1), "include_dashboard": False} if address is None else {}
            ray_init_beside_jvm(address=address, logging_level="warning", **local)
        threads = spec.threads or 1
        gpus = 1 if spec.device.startswith("cuda") else 0  # Ray gives each worker its own GPU as "cuda"
        actor = ray.remote(num_cpus=threads, num_gpus=gpus, max_restarts=-1, max_task_retries=-1)(SearchWorker)
        self.actors = [actor.remote(c, missing_auto_modules()) for c in specs]
        opened = [raise_user_error(value) for value in ray.get([a.open.remote() for a in self.actors])]
        self.pids = [pid for pid, _ in opened]
        self.teacher = opened[0][1]
        self.startup_seconds = time.perf_counter() - start

    def map(self, batches: Iterable[tuple[list[str], list[str], int]]) -> Iterator[list[SearchResult]]:
        """The results of each (texts, qids, hits) batch, in the order the batches were given."""
        from ray.util import ActorPool

        # ActorPool's map reads every batch as it is called: a list of them submits the same, at the same time
        for results in ActorPool(self.actors).map(lambda actor, batch: actor.run.remote(*batch), list(batches)):
            yield raise_user_error(results)

    def close(self) -> None:
        import ray

        for actor in self.actors:
            # ray types a new actor as its handle or its class (ActorProxy); kill takes the handle it is
            ray.kill(actor, no_restart=True)  # type: ignore[arg-type]
        if self.owns_ray:
            ray.shutdown()

    def __enter__(self) -> RayPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
