"""SHA-256 of files read in chunks: what identifies a corpus, a model's weights or a GGUF file on disk."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

CHUNK = 1 << 22


def files_sha256(paths: Iterable[str | Path], *, names: bool = False) -> str:
    """One digest of the files' bytes in the given order; with ``names``, each file's name goes before its bytes
    (a model directory's weights: renaming a shard changes the model)."""
    digest = hashlib.sha256()
    for path in paths:
        if names:
            digest.update(Path(path).name.encode() + b"\0")
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path: str | Path) -> str:
    return files_sha256([path])
