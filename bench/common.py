"""What the benchmarks share: the repository's root, the collections' files by name (from the registry), and building
the indexes a benchmark needs with the project's own command."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def ensure_indexes(collection: str, dense: str, bm25: str | None = None) -> None:
    """Build (or reuse) the indexes a benchmark needs, with the project's own index command."""
    for extra, out in (([], dense), (["--bm25"], bm25)):
        if out is not None:
            cmd = [sys.executable, "-m", "tour_pyserini.index", *extra, "--collection", collection, "--output", out]
            subprocess.run(cmd, cwd=ROOT, check=True)


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
