"""Sharded dense builds on Ray: workers encode the shards of a collection, which the driver then merges.

Each shard is a Ray task (one CPU, or one GPU with ``--device cuda``) that builds one shard directory in
``<output>.shards/`` with :func:`tour_pyserini.index.shards.write_dense_shard`, staged and renamed into place
when complete. At most ``workers`` tasks run at once. A task whose worker process dies is run again by Ray
(the shard is encoded again from its start); finished shards stay on disk, so a build stopped for any
reason resumes where it was when run again, reusing every finished shard that records the same build.
The shards directory is removed once the merged index is in place.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tour_pyserini._java import ray_init_beside_jvm
from tour_pyserini.encoders import EncoderSpec
from tour_pyserini.errors import USER_ERRORS, UserError
from tour_pyserini.files.staging import output_lock
from tour_pyserini.index.build import build_index
from tour_pyserini.index.faiss_index import FaissIndexSpec
from tour_pyserini.index.layout import IndexMeta
from tour_pyserini.index.shards import Shard, shard_request, write_dense_shard

if TYPE_CHECKING:
    from ray import ObjectRef

log = logging.getLogger(__name__)

RETRIES = 3  # runs of a shard after its worker died, before the build stops (its finished shards kept)
POLL_SECONDS = 0.2


@dataclass(frozen=True)
class ShardedBuild:
    """One dense build split into ``shards`` shards: what every shard task encodes with."""

    collection: str
    encoder: EncoderSpec
    shards: int
    batch_size: int = 64
    faiss_spec: FaissIndexSpec = field(default_factory=FaissIndexSpec)
    device: str = "cpu"

    def shard(self, shard_id: int) -> Shard:
        return Shard(shard_id, self.shards)


@dataclass
class ShardProgress:
    """Documents encoded so far in each shard, and how many times each shard's encoding started."""

    total: int
    done: dict[int, int] = field(default_factory=dict)
    starts: dict[int, int] = field(default_factory=dict)
    pids: dict[int, int] = field(default_factory=dict)  # the process encoding each shard now (or last)
    kept: tuple[int, ...] = ()  # shards finished by an earlier run, reused

    @property
    def documents(self) -> int:
        return sum(self.done.values())


class ProgressBoard:
    """A Ray actor the shard tasks report to: a shard's start (by which process) and each batch encoded."""

    def __init__(self) -> None:
        self.done: dict[int, int] = {}
        self.starts: dict[int, int] = {}
        self.pids: dict[int, int] = {}

    def started(self, shard_id: int, pid: int) -> None:
        self.done[shard_id] = 0  # a shard encoded again counts from its start
        self.starts[shard_id] = self.starts.get(shard_id, 0) + 1
        self.pids[shard_id] = pid

    def add(self, shard_id: int, documents: int) -> None:
        self.done[shard_id] = self.done.get(shard_id, 0) + documents

    def snapshot(self) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
        return self.done, self.starts, self.pids


def shards_directory(output: str | Path) -> Path:
    """Where a Ray build keeps its shards until they are merged into ``output``."""
    output = Path(output)
    return output.with_name(f"{output.name}.shards")


def shard_directory(root: Path, shard: Shard) -> Path:
    return root / f"shard-{shard.id}-of-{shard.of}"


def encode_shard(build: ShardedBuild, shard_id: int, directory: str, board) -> IndexMeta | Exception:
    """One shard task: the shard built into ``directory`` (reused when finished), or the user error that
    stopped it, returned so that the driver prints one line rather than the worker's traceback."""
    shard = build.shard(shard_id)
    board.started.remote(shard_id, os.getpid())
    request = shard_request(build.collection, build.encoder, shard, build.faiss_spec, build.batch_size)
    try:
        return build_index(
            directory,
            lambda tmp: write_dense_shard(
                build.collection,
                tmp,
                build.encoder,
                shard,
                build.batch_size,
                faiss_spec=build.faiss_spec,
                device=build.device,
                progress=lambda n: board.add.remote(shard_id, n),
            ),
            request=request,
        )
    except USER_ERRORS as e:
        return e


def kept_shards(build: ShardedBuild, root: Path, overwrite: bool) -> dict[int, int]:
    """The shards an earlier run finished for this build (shard -> documents), after clearing what a killed
    worker left half-written; a finished shard of another build is refused, or removed with ``overwrite``."""
    kept: dict[int, int] = {}
    names = {shard_directory(root, build.shard(i)).name: i for i in range(build.shards)}
    for path in sorted(root.iterdir()):
        shard_id = names.get(path.name)
        meta = IndexMeta.read(path) if shard_id is not None and path.is_dir() else None
        # a staging directory, a lock file or a shard of another --shards: not reused
        if shard_id is None or meta is None:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
            continue
        request = shard_request(
            build.collection, build.encoder, build.shard(shard_id), build.faiss_spec, build.batch_size
        )
        if differences := request.differences(meta):
            if not overwrite:
                raise UserError(
                    f"{path}, kept from an earlier run, was built with {'; '.join(differences)}; "
                    "pass --overwrite to encode it again"
                )
            shutil.rmtree(path)
            continue
        kept[shard_id] = meta.num_docs
    return kept


def encode_shards_on_ray(
    build: ShardedBuild,
    output: str | Path,
    *,
    total: int,
    workers: int,
    address: str | None = None,
    overwrite: bool = False,
    on_progress: Callable[[ShardProgress], None] | None = None,
) -> list[Path]:
    """Encode every shard of ``build`` not finished already into ``<output>.shards/`` on ``workers`` Ray workers;
    the shard directories, in shard order, for :func:`tour_pyserini.index.shards.check_shards`.

    ``address`` is passed to ``ray.init`` (None: a local instance of ``workers`` CPUs; ``"auto"``, a running
    cluster); ``total`` is the collection's number of documents; ``on_progress`` is called a few times a second.
    """
    if address is None:  # a local instance listens on 127.0.0.1 only (read when Ray is first imported)
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ImportError:
        raise UserError("--ray needs the ray package: pip install 'tour-pyserini[ray]'") from None
    root = shards_directory(output)
    root.mkdir(parents=True, exist_ok=True)
    with output_lock(root, "--output"):  # one build of this output at a time
        progress = ShardProgress(total)
        kept = kept_shards(build, root, overwrite)
        progress.kept, progress.done = tuple(sorted(kept)), dict(kept)
        pending = [i for i in range(build.shards) if i not in kept]
        if pending:
            owns_ray = not ray.is_initialized()
            if owns_ray:
                local = {"num_cpus": workers, "include_dashboard": False} if address is None else {}
                ray_init_beside_jvm(address=address, logging_level="warning", **local)
            try:
                run_tasks(ray, build, root, pending, workers, progress, on_progress)
            finally:
                if owns_ray:
                    ray.shutdown()
        if on_progress is not None:
            on_progress(progress)
    return [shard_directory(root, build.shard(i)) for i in range(build.shards)]


def run_tasks(
    ray,
    build: ShardedBuild,
    root: Path,
    pending: list[int],
    workers: int,
    progress: ShardProgress,
    on_progress: Callable[[ShardProgress], None] | None,
) -> None:
    """Run the ``pending`` shards' tasks, at most ``workers`` at a time, until all are finished."""
    gpus = 1 if build.device.startswith("cuda") else 0  # Ray gives each task its own GPU as "cuda"
    # the workers' own progress bars would interleave with the driver's one
    task = ray.remote(num_cpus=1, num_gpus=gpus, max_retries=RETRIES, runtime_env={"env_vars": {"TQDM_DISABLE": "1"}})(
        encode_shard
    )
    board = ray.remote(num_cpus=0)(ProgressBoard).remote()
    queue = list(pending)
    running: dict[ObjectRef, int] = {}  # each shard's task
    while queue or running:
        while queue and len(running) < workers:
            shard_id = queue.pop(0)
            directory = str(shard_directory(root, build.shard(shard_id)))
            running[task.remote(build, shard_id, directory, board)] = shard_id
        finished, _ = ray.wait(list(running), num_returns=1, timeout=POLL_SECONDS)
        for ref in finished:
            shard_id = running.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as e:
                reason = str(e).strip().splitlines()[0][:200]
                raise UserError(
                    f"shard {shard_id} of {build.shards} failed {RETRIES + 1} times ({reason}); the "
                    f"finished shards are kept in {root}: run again to resume"
                ) from None
            if isinstance(result, USER_ERRORS):
                raise result
            progress.done[shard_id] = result.num_docs
        done, starts, pids = ray.get(board.snapshot.remote())
        progress.starts, progress.pids = starts, pids
        progress.done = {**progress.done, **{i: n for i, n in done.items() if i in running}}
        if on_progress is not None:
            on_progress(progress)
