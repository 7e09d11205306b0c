"""A sentence-transformers model run through its whole module pipeline, for the models whose vectors
Pyserini's auto classes cannot reproduce: Dense projection layers after pooling, a model's own pooling mode,
named prompts (EmbeddingGemma's ``task: search result | query: ``).

The vectors are sentence-transformers' own ``encode`` output: it pads a batch and pools with the attention
mask, so a text's vector depends on its batch within about 1e-7.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class PipelineEncoder:
    """Queries or documents through ``SentenceTransformer(path)``; ``prefix`` (a prompt) goes before each
    text, as sentence-transformers' ``prompt`` puts it (no space added)."""

    has_model = True

    def __init__(self, path: str, device: str = "cpu", prefix: str | None = None, batch_size: int = 32):
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(path, device=device)
        self.prefix = prefix
        self.batch_size = batch_size

    @property
    def dimension(self) -> int:
        dimension = self.model.get_sentence_embedding_dimension()
        if dimension is None:
            raise ValueError("this sentence-transformers model does not say the dimension of its vectors")
        return dimension

    def encode(self, texts: Sequence[str] | str, titles: Sequence[str] | None = None, **_) -> np.ndarray:
        """(n, d) float32 vectors; one text (a string) gives a 1-d vector, as Pyserini's query classes do;
        ``titles`` go before their texts, as Pyserini's auto document class joins them."""
        single = isinstance(texts, str)
        inputs = [texts] if isinstance(texts, str) else list(texts)
        if titles is not None:
            inputs = [f"{title} {text}" for title, text in zip(titles, inputs)]
        vectors = self.model.encode(
            inputs, prompt=self.prefix, batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False
        ).astype(np.float32)
        return vectors[0] if single else vectors
