"""The cross-encoder teacher: a HuggingFace sequence-classification model reading query and document."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tour_pyserini.teachers.base import ScoreRequest, Teacher, TeacherContext


class CrossEncoderTeacher(Teacher):
    """Scores "query [SEP] title text" with a sequence-classification model.

    Pairs are sorted by length and scored in batches under ``torch.inference_mode`` (less padding,
    same scores); inputs are truncated to ``max_length`` tokens (at most the tokenizer's
    ``model_max_length``, which ``train_reranker`` sets to the training length), document side first. A model with one
    output scores by its logit, one with two by the positive logit minus the negative.
    """

    kind = "cross-encoder"

    def __init__(self, path: str | Path, max_length: int = 512, batch_size: int = 32):
        import torch
        from transformers import AutoConfig, AutoModelForSequenceClassification, AutoTokenizer

        path = str(path)
        if Path(path).exists() and not (Path(path) / "config.json").is_file():
            raise ValueError(f"cross-encoder {path!r} is not a HuggingFace model directory (no config.json)")
        config = AutoConfig.from_pretrained(path)
        architectures = config.architectures or []
        if not any(a.endswith("ForSequenceClassification") for a in architectures):
            raise ValueError(
                f"cross-encoder {path!r} is not a sequence-classification model (architectures: "
                f"{architectures or 'none'}); its classification head would be random"
            )
        self.path = path
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        # float32 whatever the stored precision: CPU kernels for float16 are slow or missing
        self.model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32).eval()
        self.max_length = min(max_length, self.tokenizer.model_max_length)
        self.batch_size = batch_size

    @classmethod
    def from_spec(cls, argument: str | None, context: TeacherContext) -> CrossEncoderTeacher:
        if not argument:
            raise ValueError("the cross-encoder teacher needs a model: cross-encoder:PATH_OR_HUB_ID")
        return cls(argument) if context.max_length is None else cls(argument, max_length=context.max_length)

    def score_pairs(self, queries: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        import torch

        order = sorted(range(len(texts)), key=lambda i: len(queries[i]) + len(texts[i]))
        scores = np.empty(len(texts))
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                inputs = self.tokenizer(
                    [queries[i] for i in idx],
                    [texts[i] for i in idx],
                    truncation="only_second",
                    max_length=self.max_length,
                    padding=True,
                    return_tensors="pt",
                )
                logits = self.model(**inputs).logits.float()
                out = logits[:, 0] if logits.shape[1] == 1 else logits[:, 1] - logits[:, 0]
                scores[idx] = out.numpy()
        return scores

    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        queries = [r.query for r in requests for _ in r.docids]
        texts = [doc.contents for r in requests for doc in r.docs]
        flat = self.score_pairs(queries, texts)
        bounds = np.cumsum([0] + [len(r.docids) for r in requests])
        return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    @property
    def label(self) -> str:
        return f"cross-encoder:{Path(self.path).name}"
