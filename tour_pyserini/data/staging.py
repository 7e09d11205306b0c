"""Output directories that appear whole or not at all (an index, a trained model)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from tour_pyserini.errors import UserError


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
