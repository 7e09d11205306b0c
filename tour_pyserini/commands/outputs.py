"""Output files of the commands, checked before any work and written so that a crash never leaves half a file.

:func:`check_output` refuses, in one line, an output that is a directory or whose directory is missing
or read-only. :func:`staged_output` hands out a temporary name beside the output, renamed onto it when
the work succeeds and removed when it fails. :func:`locked_output` holds ``<output>.partial``, the name
the run, rewards and state writers stage in, under an exclusive lock for the whole command, so a second
command on the same output is refused while the first runs (the kernel drops a killed process's lock).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tour_pyserini.data.runs import open_locked
from tour_pyserini.errors import UserError


def check_output(path: str | Path, flag: str = "--output") -> Path:
    """``path``, once a file can be written there."""
    target = Path(path)
    where = target.resolve().parent
    if target.is_dir():
        raise UserError(f"{flag} {path} is a directory; name a file")
    if not where.is_dir():
        raise UserError(f"cannot write {flag} {path}: its directory {where} does not exist")
    if not os.access(where, os.W_OK | os.X_OK):
        raise UserError(f"cannot write {flag} {path}: its directory {where} is read-only")
    return target


@contextmanager
def staged_output(path: str | Path, flag: str = "--output") -> Iterator[Path]:
    """A temporary path beside ``path`` for the block to write; it becomes ``path`` only if the block succeeds.
    It keeps ``path``'s suffix, for writers that choose the format by it (matplotlib)."""
    target = check_output(path, flag)
    staged = target.with_name(f"{target.name}.partial{target.suffix}")
    try:
        yield staged
        os.replace(staged, target)
    finally:
        staged.unlink(missing_ok=True)


@contextmanager
def locked_output(path: str | Path, flag: str = "--output") -> Iterator[Path]:
    """``path`` checked, with its ``.partial`` staging file locked until the block ends; a failed block
    leaves no partial file behind."""
    target = check_output(path, flag)
    partial = target.with_name(target.name + ".partial")
    lock = open_locked(partial, flag, holder=f"another command is writing this {flag}")
    try:
        yield target
    finally:
        try:  # still ours (not renamed onto the output, nor replaced by the next command's): remove it
            if os.stat(partial).st_ino == os.fstat(lock.fileno()).st_ino:
                partial.unlink()
        except FileNotFoundError:
            pass
        lock.close()
