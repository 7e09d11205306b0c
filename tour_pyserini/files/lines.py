"""Reading the package's text inputs (topics, qrels, runs, corpora, rewards): one UTF-8 reader for all, and
whitespace-separated line files (qrels, runs) with file and line in every error."""

from __future__ import annotations

import gzip
import math
from collections.abc import Iterator
from pathlib import Path

from tour_pyserini.errors import UserError

BOM = "\ufeff"  # editors on Windows start UTF-8 files with it; it would otherwise join the first field


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{where}: not valid UTF-8 (byte {raw[e.start]:#04x} at column {e.start + 1})") from None


def text_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a UTF-8 text file (gzipped when its name ends in .gz), line ends kept and a
    leading byte-order mark dropped; a line that is not UTF-8 raises a UserError naming file and line."""
    path = Path(path)
    with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            line = _decode(raw, f"{path}:{lineno}")
            yield lineno, line.removeprefix(BOM) if lineno == 1 else line


def read_text(path: str | Path) -> str:
    """A whole UTF-8 text file, as :func:`text_lines` reads it."""
    return "".join(line for _, line in text_lines(path))


def read_fields(path: str | Path, layout: str, kind: str) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` for each non-empty line; a line without ``len(layout.split())`` fields raises."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{kind} file {str(path)!r} does not exist")
    expected = len(layout.split())
    for lineno, line in text_lines(path):
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
