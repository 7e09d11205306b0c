"""Lucene 9's BM25 (``BM25Similarity``) as small pure functions on NumPy arrays, float for float.

Lucene scores a term ``t`` of a query in a document ``d`` in 32-bit floats as

    weight = boost * idf,   idf = log(1 + (N - df + 0.5) / (df + 0.5))
    norm_inverse[d] = 1 / (k1 * ((1 - b) + b * dl[d] / avgdl))
    score(t, d) = weight - weight / (1 + tf * norm_inverse[d])      (= weight * tf / (tf + 1 / norm_inverse))

with ``N`` the documents that have the field, ``avgdl`` its tokens per such document, ``boost`` the
times the term occurs in the query (Anserini's bag-of-words query), and ``dl`` the document length
*as its one-byte norm decodes it* (``SmallFloat.intToByte4``: exact below 24 tokens, then four
significant bits). Every step below rounds to float32 where Lucene's does, so the scores are
Lucene's to the last bit rather than merely close.
"""

from __future__ import annotations

import numpy as np

from tour_pyserini.index.bm25 import K1, B

_FREE_VALUES = 24  # 255 - longToInt4(Integer.MAX_VALUE): lengths below this are stored exactly


def _long_to_int4(i: np.ndarray) -> np.ndarray:
    """``SmallFloat.longToInt4``: a 4-bit mantissa (implicit leading one) and the shift above it."""
    bits = np.frexp(i.astype(np.float64))[1]  # bit length: i = m 2^bits with m in [0.5, 1)
    shift = np.maximum(bits - 4, 0)
    normal = ((i >> shift) & 0x07) | ((shift + 1) << 3)
    return np.where(bits < 4, i, normal)


def _int4_to_long(i: np.ndarray) -> np.ndarray:
    shift = (i >> 3) - 1
    return np.where(shift < 0, i & 0x07, (((i & 0x07) | 0x08) << np.maximum(shift, 0)))


def int_to_byte4(length: np.ndarray) -> np.ndarray:
    """Lucene's one-byte norm of document lengths (``SmallFloat.intToByte4``), as uint8."""
    n = np.asarray(length, dtype=np.int64)
    if (n < 0).any():
        raise ValueError("document lengths must be non-negative")
    return np.where(n < _FREE_VALUES, n, _FREE_VALUES + _long_to_int4(n - _FREE_VALUES)).astype(np.uint8)


def byte4_to_int(norm: np.ndarray) -> np.ndarray:
    """The document length a one-byte norm stands for (``SmallFloat.byte4ToInt``)."""
    i = np.asarray(norm, dtype=np.uint8).astype(np.int64)
    return np.where(i < _FREE_VALUES, i, _FREE_VALUES + _int4_to_long(i - _FREE_VALUES))


def idf(df: np.ndarray, doc_count: int) -> np.ndarray:
    """log(1 + (N - df + 0.5) / (df + 0.5)), in double as Lucene computes it, then rounded to float32."""
    df = np.asarray(df, dtype=np.float64)
    return np.log(1.0 + (doc_count - df + 0.5) / (df + 0.5)).astype(np.float32)


def norm_inverse_table(sum_total_tf: int, doc_count: int, k1: float = K1, b: float = B) -> np.ndarray:
    """1 / (k1 ((1 - b) + b dl / avgdl)) for each of the 256 norms, in float32 as Lucene's cache holds it."""
    f32 = np.float32
    avgdl = f32(sum_total_tf / doc_count)  # double division, then float
    dl = byte4_to_int(np.arange(256)).astype(f32)
    return (f32(1) / (f32(k1) * ((f32(1) - f32(b)) + f32(b) * dl / avgdl))).astype(f32)


def term_scores(weight: np.ndarray, tf: np.ndarray, norm_inverse: np.ndarray) -> np.ndarray:
    """weight - weight / (1 + tf * norm_inverse), elementwise in float32; zero where tf is zero."""
    w = np.asarray(weight, dtype=np.float32)
    return w - w / (np.float32(1) + np.asarray(tf, dtype=np.float32) * np.asarray(norm_inverse, dtype=np.float32))


def document_scores(scores: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    """Each document's score as Anserini's ``computeQueryDocumentScore`` returns it, from its terms' scores.

    Lucene sums a document's term scores in double and rounds the sum to float; Anserini's filter
    clause adds a constant 1 in the same way (double sum, float), and subtracts 1 again in float.
    ``owner[i]`` is the document (0..n-1) that term score ``scores[i]`` belongs to.
    """
    summed = np.bincount(owner, weights=np.asarray(scores, dtype=np.float64), minlength=n)
    with_filter = (1.0 + summed.astype(np.float32).astype(np.float64)).astype(np.float32)
    return (with_filter - np.float32(1)).astype(np.float64)
