"""What the benchmarks share: the repository's root, the collections' files by name (from the registry), building
the indexes a benchmark needs with the project's own command, timing a command, and comparing two runs."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed_run(cmd: list[str]) -> float:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"command failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    return elapsed


def ensure_indexes(collection: str, dense: str, bm25: str | None = None) -> None:
    """Build (or reuse) the indexes a benchmark needs, with the project's own index command."""
    for extra, out in (([], dense), (["--bm25"], bm25)):
        if out is not None:
            cmd = [sys.executable, "-m", "tour_pyserini.index", *extra, "--collection", collection, "--output", out]
            subprocess.run(cmd, cwd=ROOT, check=True)


def compare_rankings(ours: Path, theirs: Path) -> dict:
    """How our run differs from Pyserini's by the library's sameness rule (identical, the same up to ties
    within 1e-5, different): Pyserini encodes one text at a time, we encode texts of one length together,
    so vectors differ by about 1e-7 and near-tied documents may swap."""
    from tour_pyserini.files.runs import read_run
    from tour_pyserini.files.sameness import diff_runs

    return diff_runs(read_run(ours), read_run(theirs)).to_json()


@dataclass(frozen=True)
class SplitFiles:
    """One split of a registered collection, as paths relative to the repository's root (as reports record them)."""

    collection: str  # the collection's directory
    topics: str
    qrels: str | None  # None where the collection is judged by answer strings


def split_files(name: str, split: str = "test") -> SplitFiles:
    """The files of shipped collection ``name``'s ``split``, read from its ``collection.yaml``."""
    from tour_pyserini.files.collections import find_collection

    col = find_collection(ROOT / "collections" / name)
    files = col.split(split)

    def rel(path: Path) -> str:
        return os.path.relpath(path, ROOT)

    return SplitFiles(rel(col.directory), rel(files.topics), rel(files.qrels) if files.qrels else None)
