"""Building an index of either kind: staging, timing, peak memory, metadata, reuse."""

from __future__ import annotations

import os
import resource
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.index.layout import IndexMeta


def corpus_file(collection: str | Path) -> Path:
    """The JSONL corpus of a collection directory (``corpus.jsonl``), or the file itself."""
    path = Path(collection)
    if path.is_dir():
        path = path / "corpus.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"no corpus at {path} (expected a collection directory with corpus.jsonl)")
    return path


def check_count(corpus: Path, *, indexer: str, indexed: int, expected: int) -> None:
    """Fail when an index does not hold every document it was given (the indexer's log says why)."""
    if indexed != expected:
        raise UserError(
            f"{corpus}: {indexer} indexed {indexed} of {expected} documents; no index was written "
            "(see the indexer's messages above)"
        )


def build_index(output: str | Path, write: Callable[[Path], IndexMeta], overwrite: bool = False) -> IndexMeta:
    """Run ``write(tmp_dir)`` and move the finished index to ``output`` in one rename.

    An existing index at ``output`` is reused unless ``overwrite``; a failed build leaves nothing
    behind. Build time and the process's peak resident memory are recorded in the metadata.
    """
    output = Path(output)
    if output.exists() and not overwrite:
        meta = IndexMeta.read(output)
        if meta is not None:
            return meta
        raise UserError(f"{output} exists but was not built by tour_pyserini; pass --overwrite")
    tmp = output.with_name(f"{output.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
    except OSError as e:  # a read-only directory, a file where a directory should be
        raise UserError(f"cannot create the index {output}: {e.strerror}") from None
    start = time.perf_counter()
    try:
        meta = write(tmp)
        meta.build_seconds = round(time.perf_counter() - start, 2)
        meta.peak_rss_mb = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        meta.write(tmp)
        shutil.rmtree(output, ignore_errors=True)
        tmp.rename(output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta
