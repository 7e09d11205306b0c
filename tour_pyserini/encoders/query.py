"""The query encoder: Pyserini's own, with texts of one token length encoded in one call.

Pyserini's ``FaissSearcher.batch_search`` encodes one query at a time. Its ``AutoQueryEncoder`` averages
every token position, so a padded batch would change the vectors; texts of one length need no padding
and share one matrix product (about 3x faster on SciFact's claims than one at a time). A text encoded
alone gets Pyserini's vector bit for bit, a text in a group one within about 1e-7 (a matrix product of
another shape rounds differently).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tour_pyserini._java import import_pyserini
from tour_pyserini.encoders.spec import EncoderSpec


def same_length_groups(tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """Indices of ``texts`` grouped by their length in tokens as Pyserini's query encoder tokenises them
    (special tokens added, truncated to the model's limit); groups in order of first appearance."""
    groups: dict[int, list[int]] = {}
    for i, ids in enumerate(tokenizer(list(texts), add_special_tokens=True, truncation=True)["input_ids"]):
        groups.setdefault(len(ids), []).append(i)
    return list(groups.values())


class QueryEncoder:
    """Encodes query texts to float32 vectors (n, d) through a Pyserini query encoder object.

    ``threads`` is the torch thread count set before each call (default: torch's own when made): torch
    and Faiss may share one OpenMP runtime, so a search on other threads would silently change it.
    """

    def __init__(self, pyserini_encoder, spec: EncoderSpec | None = None, threads: int | None = None):
        import torch

        self.pyserini = pyserini_encoder
        self.spec = spec  # what the vectors are (TTT-Embed states and pairings check it); None when unknown
        self.threads = threads or torch.get_num_threads()

    @classmethod
    def build(cls, spec: EncoderSpec, device: str = "cpu") -> QueryEncoder:
        """Pyserini's ``AutoQueryEncoder`` for ``spec`` (pooling and normalisation as it says), on ``device``."""
        auto = import_pyserini("pyserini.encode").AutoQueryEncoder
        return cls(auto(encoder_dir=spec.path, pooling=spec.pooling, l2_norm=spec.l2_norm, device=device), spec)

    @property
    def dimension(self) -> int:
        return self.pyserini.model.config.hidden_size

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        torch.set_num_threads(self.threads)
        vectors = np.empty((len(texts), self.dimension), dtype=np.float32)
        with torch.inference_mode():
            for rows in same_length_groups(self.pyserini.tokenizer, texts):
                group = np.asarray(self.pyserini.encode([texts[i] for i in rows]))
                vectors[rows] = group.reshape(len(rows), -1)
        return vectors
