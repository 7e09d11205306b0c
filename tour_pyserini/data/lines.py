"""Whitespace-separated line files (qrels, runs): fields per line, with file and line in every error."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

from tour_pyserini.errors import UserError


def read_fields(path: str | Path, layout: str, kind: str) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` for each non-empty line; a line without ``len(layout.split())`` fields raises."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{kind} file {str(path)!r} does not exist")
    expected = len(layout.split())
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != expected:
                raise UserError(f"{path}:{lineno}: expected '{layout}', found {len(fields)} fields")
            yield lineno, fields


def parse_finite(text: str, where: str, what: str) -> float:
    """``text`` as a finite float; otherwise one error naming ``where`` (file:line) and ``what`` (e.g. "score")."""
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"{where}: {what} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise UserError(f"{where}: {what} {text!r} is not a finite number")
    return value
