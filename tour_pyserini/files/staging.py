"""Outputs checked before any work, locked while they are written, and directories that appear whole or not
at all (an index, a trained model).

Every command treats its outputs alike: a missing directory on an output's path is created when the output is
written (as Pyserini's own commands do); an output under a regular file, in a read-only directory, a file
output that is a directory, or two outputs of one command that are the same file (after symbolic links) are
refused in one line. A command writing an output holds ``<output>.partial`` under an exclusive lock, so a
second command on the same output is refused while the first runs (the kernel drops a killed process's lock).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TextIO

from tour_pyserini.errors import UserError


def check_place(path: str | Path, flag: str = "--output") -> None:
    """``path`` can be created: its nearest existing ancestor is a directory this process may write in (the
    missing directories between are created when it is written)."""
    parent = Path(path).absolute().parent
    nearest = next(p for p in (parent, *parent.parents) if p.exists())
    if not nearest.is_dir():
        raise UserError(f"cannot write {flag} {path}: {nearest} is a file, not a directory")
    if not os.access(nearest, os.W_OK | os.X_OK):
        raise UserError(f"cannot write {flag} {path}: its directory {nearest} is read-only")


def check_output(path: str | Path, flag: str = "--output") -> Path:
    """``path``, once a file can be written there."""
    target = Path(path)
    if target.is_dir():
        raise UserError(f"{flag} {path} is a directory; name a file")
    check_place(target, flag)
    return target


def check_output_directory(path: str | Path, overwrite: bool, flag: str = "--output") -> Path:
    """``path``, a directory to create, refused if it exists (unless ``overwrite``) or cannot be created."""
    target = Path(path)
    if target.exists() and not overwrite:
        raise UserError(f"{flag} {path} already exists; pass --overwrite to replace it")
    if target.exists() and not target.is_dir():
        raise UserError(f"{flag} {path} is a file; name a directory")
    check_place(target, flag)
    return target


def _same_file(a: Path, b: Path) -> bool:
    """Whether writing ``a`` and ``b`` would write one file: the same path after symbolic links, a hard link of
    it, or one's staging file (``<output>.partial...``)."""
    ra, rb = os.path.realpath(a), os.path.realpath(b)
    if ra == rb or ra.startswith(rb + ".partial") or rb.startswith(ra + ".partial"):
        return True
    return a.exists() and b.exists() and os.path.samefile(a, b)


def check_outputs(outputs: Mapping[str, str | Path | None]) -> None:
    """The file outputs of one command (flag -> path; None: not asked for), each writable and no two the same."""
    checked: dict[str, Path] = {}
    for flag, path in outputs.items():
        if path is None:
            continue
        target = check_output(path, flag)
        if same := next((other for other, p in checked.items() if _same_file(target, p)), None):
            raise UserError(f"{flag} {path} and {same} {checked[same]} are the same file; name two files")
        checked[flag] = target


def open_writable(path: Path, flag: str) -> TextIO:
    """``path`` opened for appending, its directory created; a permission problem is the user's."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, "a", encoding="utf-8")
    except OSError as e:  # a read-only or missing directory, a file where a directory should be
        raise UserError(f"cannot write {path}: {e.strerror} (choose another {flag})") from None


def open_locked(partial: Path, flag: str = "--output", holder: str = "another search is writing this run") -> TextIO:
    """``partial`` opened for appending under an exclusive lock, or one line naming ``flag`` if ``holder``
    (another process) has it. The kernel releases the lock of a killed process, so it never blocks a rerun."""
    while True:
        f = open_writable(partial, flag)
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise UserError(f"{partial} is locked: {holder}; wait for it or choose another {flag}") from None
        try:
            # the holder may have renamed or removed the file just before releasing it: lock the current one
            if os.stat(partial).st_ino == os.fstat(f.fileno()).st_ino:
                return f
        except FileNotFoundError:
            pass
        f.close()


@contextlib.contextmanager
def output_lock(path: str | Path, flag: str = "--output") -> Iterator[None]:
    """``<path>.partial`` held under an exclusive lock until the block ends, or one line if another command
    holds it; the lock file is removed when the block ends (unless a writer renamed it onto ``path``)."""
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    lock = open_locked(partial, flag, holder=f"another command is writing this {flag}")
    try:
        yield
    finally:
        try:  # still ours (not renamed onto the output, nor replaced by the next command's): remove it
            if os.stat(partial).st_ino == os.fstat(lock.fileno()).st_ino:
                partial.unlink()
        except FileNotFoundError:
            pass
        lock.close()


@contextlib.contextmanager
def locked_output_directory(path: str | Path, overwrite: bool, flag: str = "--output") -> Iterator[Path]:
    """The output directory of a command, checked, then locked for the whole block and checked again under the
    lock (a command that held it may have created it meanwhile)."""
    check_output_directory(path, overwrite, flag)  # refused before the lock creates anything
    with output_lock(path, flag):
        yield check_output_directory(path, overwrite, flag)


@contextlib.contextmanager
def staged_directory(output: str | Path, what: str = "the output") -> Iterator[Path]:
    """A temporary directory beside ``output`` that becomes ``output`` only when the block succeeds.

    A failed block (an error, Ctrl-C, SIGTERM) leaves nothing behind; an existing ``output`` is moved aside,
    not deleted, until its replacement is in place, so it stays whole if the swap fails.
    """
    output = Path(output)
    tmp = output.with_name(f"{output.name}.tmp-{os.getpid()}")
    old = output.with_name(f"{output.name}.old-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
    except OSError as e:  # a read-only directory, a file where a directory should be
        raise UserError(f"cannot create {what} {output}: {e.strerror}") from None
    try:
        yield tmp
        if output.exists():
            output.rename(old)
        tmp.rename(output)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old.exists() and not output.exists():
            old.rename(output)
        raise
    if old.is_dir():
        shutil.rmtree(old, ignore_errors=True)
    else:
        old.unlink(missing_ok=True)
