"""Flag helpers every command shares: old names kept for one release, printed as deprecated."""

from __future__ import annotations

import argparse
import sys

# old flag -> the flag that replaced it (same meaning)
RENAMED = {
    "--reranker": "--teacher",
    "--reranker-max-length": "--teacher-max-length",
    "--reranker-precision": "--teacher-precision",
}


def add_renamed(ap, old: str, **kind) -> None:
    """Accept ``old`` (hidden from --help) as the flag that replaced it; ``kind``: its type or choices."""
    ap.add_argument(old, dest=_dest(old), help=argparse.SUPPRESS, **kind)


def apply_renamed(ap: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Move the values given under old names to their new flags, with one warning each; both names is an error.
    The old names leave ``args``, so a run resumes whichever name it was started with."""
    for old, new in RENAMED.items():
        if not hasattr(args, _dest(old)):
            continue
        value = getattr(args, _dest(old))
        delattr(args, _dest(old))
        if value is None:
            continue
        if getattr(args, _dest(new)) is not None:
            ap.error(f"{old} is the old name of {new}: give one of them")
        print(f"warning: {old} is deprecated, use {new} (same meaning)", file=sys.stderr)
        setattr(args, _dest(new), value)
    return args


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")
