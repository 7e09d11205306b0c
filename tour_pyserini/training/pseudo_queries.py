"""Training signal for a teacher from the corpus alone: sentences of documents as pseudo-queries.

No query or label of any topic set is read, so these examples may be mixed into a teacher's training
whatever its dev and test queries are. Two ways to label a sentence drawn from document d:

- ``ict`` (the Inverse Cloze Task): the positive is d itself, with the sentence removed from its text
  (so that the pair is not matched word for word); the negatives are the other candidates.
- ``ensemble`` (pseudo-labels of a cheap ensemble): d is dropped from the candidates, and the document
  that BM25 and the retriever rank first by reciprocal-rank fusion is the positive; the fused ranks from
  ``skip + 2`` on are the negatives (ranks 2 to ``skip + 1`` may be relevant too, so neither side uses them).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from tour_pyserini.training.examples import Example
from tour_pyserini.training.ict import split_sentences


@dataclass
class PseudoQuery:
    docid: str  # the document the sentence was drawn from
    query: str
    masked_contents: str  # the document's "title text" without the sentence


def draw_sentences(docs: Sequence, count: int, rng: random.Random, *, min_words: int = 6) -> list[PseudoQuery]:
    """``count`` sentences of at least ``min_words`` words, each from a random document (objects with
    ``docid``, ``title`` and ``text``) of two sentences or more; a document may give several."""
    eligible = [(doc, sentences) for doc in docs if len(sentences := split_sentences(doc.text)) >= 2]
    if not eligible:
        raise ValueError("no document has two sentences or more: no pseudo-query can be drawn")
    out: list[PseudoQuery] = []
    while len(out) < count:
        doc, sentences = rng.choice(eligible)
        s = rng.randrange(len(sentences))
        if len(sentences[s].split()) < min_words:
            continue
        rest = " ".join(x for i, x in enumerate(sentences) if i != s)
        out.append(PseudoQuery(doc.docid, sentences[s], f"{doc.title} {rest}".strip()))
    return out


def rrf(*rankings: Sequence[str], k: int = 60) -> list[str]:
    """Reciprocal-rank fusion: docids by the sum over ``rankings`` of 1 / (k + rank), rank from 1; ties keep
    the order in which documents were first seen."""
    score: dict[str, float] = {}
    for ranking in rankings:
        for rank, docid in enumerate(ranking, start=1):
            score[docid] = score.get(docid, 0.0) + 1.0 / (k + rank)
    return sorted(score, key=lambda d: -score[d])


def ict_example(i: int, pq: PseudoQuery, candidates: Sequence[str]) -> Example:
    """The sentence's own document (read without the sentence) against the other candidates."""
    negatives = [d for d in candidates if d != pq.docid]
    return Example(f"ict{i}", pq.query, [pq.docid], negatives, {pq.docid: pq.masked_contents})


def ensemble_example(i: int, pq: PseudoQuery, dense: Sequence[str], bm25: Sequence[str], *, skip: int = 2) -> Example:
    """The fused first of dense and BM25 (the source document left out) against fused ranks ``skip + 2`` on."""
    fused = [d for d in rrf(dense, bm25) if d != pq.docid]
    return Example(f"pl{i}", pq.query, fused[:1], fused[1 + skip :])
