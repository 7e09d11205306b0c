"""Inverse Cloze Task examples: sentence-boundary blocks of a corpus, a sentence of each as its pseudo-query.

Each document is split greedily, on sentence boundaries, into blocks whose input to the block encoder,
"title block-text" with the encoder's special tokens, is at most ``max_wordpieces`` wordpieces (288 in
ORQA). A sentence longer than that on its own is cut between words. An example draws one sentence
of a block as the query; with probability ``mask_rate`` (0.9 in ORQA) the sentence is removed from the
evidence, otherwise the block is kept whole. Only blocks of two or more sentences make examples, so
that masked evidence keeps some text.

Sentences are split by a regular expression (no model or download: end punctuation followed by space
and an upper-case letter, digit or opening bracket/quote), which misses some boundaries (abbreviations
such as "e.g. Foo" split wrongly); a missed boundary only makes a longer sentence. A text without any
upper-case letter (a lower-cased corpus, such as Cranfield) is split at every end punctuation followed
by space, since no capital can mark where its sentences start.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_LOWER_CASE_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]*\s+")


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, stripped, in order; whitespace-only pieces dropped."""
    boundary = _LOWER_CASE_BOUNDARY if text == text.lower() else _BOUNDARY
    return [s.strip() for s in boundary.split(text) if s.strip()]


@dataclass(frozen=True)
class Block:
    docid: str
    title: str
    sentences: tuple[str, ...]

    def text(self, without: int | None = None) -> str:
        """The block as the block encoder reads it, "title text", optionally without sentence ``without``."""
        body = " ".join(s for i, s in enumerate(self.sentences) if i != without)
        return f"{self.title} {body}".strip()


@dataclass(frozen=True)
class IctExample:
    query: str
    evidence: str
    block: int  # index of the block in the list the example was drawn from
    masked: bool


def _word_pieces(sentence: str, count, limit: int) -> list[str]:
    """Cut a sentence longer than ``limit`` wordpieces between words (greedy), each piece within the limit."""
    pieces: list[str] = []
    current: list[str] = []
    for word in sentence.split():
        if current and count(" ".join([*current, word])) > limit:
            pieces.append(" ".join(current))
            current = []
        current.append(word)
    if current:
        pieces.append(" ".join(current))
    return pieces


def make_blocks(docid: str, title: str, text: str, count, max_wordpieces: int = 288) -> list[Block]:
    """Greedy sentence-boundary blocks of one document; ``count(str)`` is its length in wordpieces.

    A block's "title text" plus the two special tokens ([CLS], [SEP]) is at most ``max_wordpieces``:
    wordpieces of separately tokenised pieces add up (WordPiece never merges across a space).
    """
    budget = max_wordpieces - 2 - (count(title) if title else 0)
    if budget < 1:
        raise ValueError(f"document {docid}: its title alone exceeds {max_wordpieces} wordpieces")
    blocks: list[Block] = []
    current: list[str] = []
    used = 0
    for sentence in split_sentences(text):
        n = count(sentence)
        parts = [(sentence, n)] if n <= budget else [(p, count(p)) for p in _word_pieces(sentence, count, budget)]
        for part, size in parts:
            if current and used + size > budget:
                blocks.append(Block(docid, title, tuple(current)))
                current, used = [], 0
            current.append(part)
            used += size
    if current:
        blocks.append(Block(docid, title, tuple(current)))
    return blocks


def wordpiece_counter(tokenizer):
    """``count(str)``: the number of wordpieces ``tokenizer`` makes of a string, without special tokens."""
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


def corpus_blocks(docs: Iterable, tokenizer, max_wordpieces: int = 288) -> list[Block]:
    """Blocks of every document (objects with ``docid``, ``title``, ``text``), in corpus order."""
    count = wordpiece_counter(tokenizer)
    return [b for doc in docs for b in make_blocks(doc.docid, doc.title or "", doc.text, count, max_wordpieces)]


def usable(blocks: Sequence[Block]) -> list[int]:
    """Indices of the blocks that make examples: two sentences or more."""
    return [i for i, b in enumerate(blocks) if len(b.sentences) >= 2]


def draw_example(blocks: Sequence[Block], index: int, rng: random.Random, mask_rate: float) -> IctExample:
    """A random sentence of block ``index`` as the query; removed from the evidence with probability ``mask_rate``."""
    block = blocks[index]
    s = rng.randrange(len(block.sentences))
    masked = rng.random() < mask_rate
    return IctExample(block.sentences[s], block.text(without=s if masked else None), index, masked)
