"""Two rankings fused into one, as Pyserini's hybrid search fuses a dense and a sparse one.

Each list's scores are centred on the middle of their range and divided by the range, (s - (min + max) / 2) /
(max - min); a document missing from one list takes that list's lowest score; the fused score is
alpha * sparse + dense (Pyserini's ``HybridSearcher._hybrid_results`` with normalisation). Two deviations, both
where Pyserini's arithmetic is undefined: a list whose scores are all equal (no range) contributes 0 to every
document instead of dividing by zero, and equal fused scores are ordered by docid instead of by a set's order.
"""

from __future__ import annotations

from collections.abc import Mapping


def normalised(scores: Mapping[str, float], docids) -> dict[str, float]:
    """Each of ``docids``' score in ``scores`` (missing: the lowest), centred and divided by the range."""
    low, high = (min(scores.values()), max(scores.values())) if scores else (0.0, 1.0)
    span = high - low
    return {d: 0.0 if span == 0 else (scores.get(d, low) - (low + high) / 2) / span for d in docids}


def hybrid_fusion(
    dense: Mapping[str, float], sparse: Mapping[str, float], k: int = 10, alpha: float = 1.0
) -> list[tuple[str, float]]:
    """The top ``k`` (docid, score) of the two runs fused, best first.

    >>> hybrid_fusion({"a": 3.0, "b": 1.0}, {"b": 10.0, "c": 6.0}, k=3)
    [('a', 0.0), ('b', 0.0), ('c', -1.0)]
    """
    docids = set(dense) | set(sparse)
    d, s = normalised(dense, docids), normalised(sparse, docids)
    fused = {doc: alpha * s[doc] + d[doc] for doc in docids}
    return sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:k]
