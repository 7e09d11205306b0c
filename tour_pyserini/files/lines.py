"""Reading the package's text inputs (topics, qrels, runs, corpora, rewards): one UTF-8 reader for all, and
whitespace-separated line files (qrels, runs) with file and line in every error."""

from __future__ import annotations

import gzip
import math
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

from tour_pyserini.errors import UserError

BOM = "\ufeff"  # editors on Windows start UTF-8 files with it; it would otherwise join the first field
# characters that show nothing: controls, format characters (zero-width space and joiners, the BOM), separators
INVISIBLE = {"Cc", "Cf", "Zs", "Zl", "Zp"}
FILLERS = "\u115f\u1160\u2800\u3164\uffa0"  # letters and symbols drawn as blank space (Hangul fillers, Braille blank)


def blank(text: str) -> bool:
    """Whether ``text`` shows nothing (a query of zero-width spaces is as empty as one of spaces)."""
    return all(c.isspace() or c in FILLERS or unicodedata.category(c) in INVISIBLE for c in text)


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


# trec_eval splits fields at C's isspace() in the "C" locale: these six ASCII characters and no other; a no-break
# space, U+001C..U+001F or U+0085 (all whitespace to str.split) is part of a field there
ASCII_SPACE = " \t\n\r\v\f"
_FIELD = re.compile(f"[^{re.escape(ASCII_SPACE)}]+")


def split_fields(line: str) -> list[str]:
    """The fields of a qrels or run line as trec_eval reads them: separated by ASCII whitespace only."""
    return _FIELD.findall(line)


def read_fields(path: str | Path, layout: str, kind: str, blank_lines: bool = True) -> Iterator[tuple[int, list[str]]]:
    """``(line number, fields)`` of each line, split as trec_eval splits them (:func:`split_fields`). A line
    without ``len(layout.split())`` fields raises, and so does a NUL byte (trec_eval's format allows none; it
    crashes on one); a blank line is skipped, or raises when not ``blank_lines`` (trec_eval refuses a qrels file
    with one)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{kind} file {str(path)!r} does not exist")
    expected = len(layout.split())
    for lineno, line in text_lines(path):
        if "\0" in line:
            raise UserError(
                f"{path}:{lineno}: a NUL byte at column {line.index(chr(0)) + 1} (trec_eval reads no "
                f"{kind} file holding one)"
            )
        fields = split_fields(line)
        if not fields:
            if blank_lines:
                continue
            raise UserError(f"{path}:{lineno}: a blank line (trec_eval refuses a {kind} file with one)")
        if len(fields) != expected:
            others = sorted({f"U+{ord(c):04X}" for c in line if c.isspace() and c not in ASCII_SPACE})
            why = f" ({', '.join(others)} separates no fields: only ASCII spaces and tabs do)" if others else ""
            raise UserError(f"{path}:{lineno}: expected '{layout}', found {len(fields)} fields{why}")
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
