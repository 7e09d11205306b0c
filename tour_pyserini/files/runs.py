"""TREC run files: ``qid Q0 docid rank score tag``, written atomically and resumably.

Scores are printed with a fixed number of decimals and made strictly decreasing within a query at
that precision, so every evaluation tool sees the ranking in exactly the order it was produced
(tools break score ties differently).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.files.lines import parse_finite, read_fields
from tour_pyserini.files.resumable import ResumableWriter
from tour_pyserini.results import Hit

DECIMALS = 6


def strictly_decreasing(scores: Sequence[float] | np.ndarray, decimals: int = DECIMALS) -> list[float]:
    """Round ``scores`` (given in rank order) and lower any score that does not fall below its predecessor.

    A score that ties with or exceeds the one above it after rounding becomes that score minus one
    unit of the last decimal, so ties keep the rank order and the printed scores strictly decrease.
    """
    if len(scores) == 0:
        return []
    units = np.rint(np.asarray(scores, dtype=np.float64) * 10.0**decimals).astype(np.int64)
    # u'_i = min(u_i, u'_{i-1} - 1) unrolls to min_{j<=i}(u_j + j) - i
    steps = np.arange(len(units))
    units = np.minimum.accumulate(units + steps) - steps
    return (units / 10.0**decimals).tolist()


def format_run_lines(qid: str, hits: Sequence[Hit], tag: str, decimals: int = DECIMALS) -> str:
    scores = strictly_decreasing([h.score for h in hits], decimals)
    return "".join(
        f"{qid} Q0 {hit.docid} {rank} {score:.{decimals}f} {tag}\n"
        for rank, (hit, score) in enumerate(zip(hits, scores), 1)
    )


class RunWriter(ResumableWriter):
    """Write a run (and optionally its per-query trace) so that ``path`` only ever appears complete, resumably:
    the protocol of :mod:`tour_pyserini.files.resumable`. ``write`` is a batch of one; ``trace`` names a JSON-lines
    file of one record per query that follows the run's rules."""

    def __init__(
        self,
        path: str | Path,
        tag: str = "tour_pyserini",
        signature: dict | None = None,
        decimals: int = DECIMALS,
        *,
        resume: bool = True,
        trace: str | Path | None = None,
        others: Mapping[str, str | Path | None] | None = None,
    ):
        self.tag = tag
        self.decimals = decimals
        self.no_hits: list[str] = []  # queries written with no hits, in order
        super().__init__(
            path, signature, resume=resume, companion=trace, holder="another search is writing this run", others=others
        )

    @staticmethod
    def qid_of(line: bytes) -> str:
        return line.split(b" ", 1)[0].decode()

    def write(self, qid: str, hits: Sequence[Hit], trace: dict | None = None) -> None:
        """Append one query's hits (and its trace record) as a batch of one."""
        self.write_batch([(qid, hits, trace)])

    def write_batch(
        self,
        batch: Sequence[tuple[str, Sequence[Hit], dict | None]],
        carried: bytes | None = None,
    ) -> None:
        """Append a batch of ``(qid, hits, trace record)``: kept by an interrupt, resumed after (``carried``: the
        rewriter's state after it, recorded with it)."""
        self.write_texts(
            [(qid, format_run_lines(qid, hits, self.tag, self.decimals), trace) for qid, hits, trace in batch], carried
        )
        self.no_hits += [qid for qid, hits, _ in batch if not hits]


def write_run(path: str | Path, rankings: Iterable[tuple[str, Sequence[Hit]]], tag: str = "tour_pyserini") -> None:
    """Write a whole run atomically (as one batch: nothing to resume in a write that never waits)."""
    with RunWriter(path, tag) as writer:
        writer.write_batch([(qid, hits, None) for qid, hits in rankings])


def read_run(path: str | Path) -> dict[str, dict[str, float]]:
    """``{qid: {docid: score}}`` from a TREC run, each query's docids in rank order: score descending, then the
    rank column (as evaluation tools read a run), whatever the order of the file's lines. Malformed lines,
    non-finite scores and repeated docids raise."""
    hits: dict[str, dict[str, tuple[float, int]]] = {}
    for lineno, (qid, _, docid, rank, score, _) in read_fields(path, "qid Q0 docid rank score tag", "run"):
        value = parse_finite(score, f"{path}:{lineno}", "score")
        try:
            position = int(rank)
        except ValueError:
            raise UserError(f"{path}:{lineno}: rank {rank!r} is not an integer") from None
        docs = hits.setdefault(qid, {})
        if docid in docs:
            raise UserError(f"{path}:{lineno}: docid {docid!r} appears twice for query {qid!r}")
        docs[docid] = (value, position)
    return {
        qid: {d: s for d, (s, _) in sorted(docs.items(), key=lambda item: (-item[1][0], item[1][1]))}
        for qid, docs in hits.items()
    }
