"""Output files of the commands, checked before any work and written so that a crash never leaves half a file.

:func:`check_output` and :func:`check_outputs` apply the rules of :mod:`tour_pyserini.files.staging`.
:func:`staged_output` hands out a temporary name beside the output, renamed onto it when the work succeeds
and removed when it fails. :func:`locked_output` holds ``<output>.partial``, the name the run, rewards and
state writers stage in, under an exclusive lock for the whole command.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tour_pyserini.files.staging import check_output, check_outputs, output_lock

__all__ = ["check_output", "check_outputs", "locked_output", "staged_output"]


@contextmanager
def staged_output(path: str | Path, flag: str = "--output") -> Iterator[Path]:
    """A temporary path beside ``path`` for the block to write; it becomes ``path`` only if the block succeeds.
    It keeps ``path``'s suffix, for writers that choose the format by it (matplotlib)."""
    target = check_output(path, flag)
    staged = target.with_name(f"{target.name}.partial{target.suffix}")
    target.parent.mkdir(parents=True, exist_ok=True)
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
    with output_lock(target, flag):
        yield target
