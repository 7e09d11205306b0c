"""The monoT5 teacher (Nogueira et al., 2020, as pygaggle runs it): a T5 model reads
"Query: q Document: d Relevant:" and the score is log P(true) - log P(false) at the first decoding step.

pygaggle ranks by log P(true) after a softmax over the two tokens alone; that is the log-sigmoid of this
log-odds, so the order is the same, and the log-odds is what is stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tour_pyserini.devices import DEFAULT_PRECISION, check_precision, resolve_precision
from tour_pyserini.encoders import weights_sha256
from tour_pyserini.encoders.checkpoints import checked_loading
from tour_pyserini.encoders.spec import check_model
from tour_pyserini.errors import UserError
from tour_pyserini.teachers.base import TEACHERS, ScoreRequest, Teacher, TeacherContext
from tour_pyserini.teachers.cross_encoder import pair_text, run_in_float32
from tour_pyserini.teachers.prompts import prompt_ids

TEMPLATE = "Query: {query} Document: {document} Relevant:"


@TEACHERS.register
class MonoT5Teacher(Teacher):
    """Scores (query, "title text") pairs with a T5 sequence-to-sequence model's first decoder step.

    Inputs longer than ``max_length`` tokens lose the end of the document (pygaggle cuts the end of the
    whole input, " Relevant:" included; here the query and the cue stay whole). Pairs are length-sorted into
    batches; ``precision`` as for the cross-encoder, the output layer in float32.
    """

    name = "monot5"
    usage = "monot5:PATH"

    def __init__(
        self,
        path: str,
        *,
        max_length: int = 512,
        batch_size: int = 16,
        device: str = "cpu",
        precision: str = DEFAULT_PRECISION,
    ):
        import torch
        from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer

        self.precision = resolve_precision(precision, device, "--teacher-precision")
        check_model("monot5 teacher", path)
        try:
            config = AutoConfig.from_pretrained(path)
        except OSError as e:
            raise UserError(f"monot5 teacher {path!r} cannot be loaded: {str(e).splitlines()[0]}") from None
        if not config.is_encoder_decoder:
            raise UserError(f"monot5 teacher {path!r} is not an encoder-decoder model (model type {config.model_type})")
        self.path = path
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        if not self.tokenizer.is_fast:
            raise UserError(f"monot5 teacher {path!r}: needs a fast tokenizer (it cuts documents by character offsets)")
        self.true_id, self.false_id = (self.answer_id(w) for w in ("true", "false"))
        with checked_loading(f"monot5 teacher {path!r}"):
            model = AutoModelForSeq2SeqLM.from_pretrained(path, dtype=torch.float32)
        self.model = model.eval().to(device)
        self.device = device
        if self.precision == "bf16":
            run_in_float32(self.model.get_output_embeddings(), torch.device(device).type)
        self.max_length = min(max_length, self.tokenizer.model_max_length)
        self.batch_size = batch_size

    def answer_id(self, word: str) -> int:
        ids = self.tokenizer.encode(word, add_special_tokens=False)
        if len(ids) != 1:
            raise UserError(
                f"monot5 teacher {self.path!r}: {word!r} is not one token of its vocabulary "
                f"({len(ids)} tokens); not a monoT5 model"
            )
        return ids[0]

    @classmethod
    def from_spec(cls, argument: str | None, context: TeacherContext) -> MonoT5Teacher:
        if not argument:
            raise UserError("the monot5 teacher needs a model: monot5:PATH_OR_HUB_ID")
        options: dict[str, Any] = {"device": context.device}
        if context.max_length is not None:
            options["max_length"] = context.max_length
        if context.precision is not None:
            options["precision"] = check_precision(context.precision, "--teacher-precision")
        return cls(argument, **options)

    def input_ids(self, query: str, document: str) -> list[int]:
        """The encoder's input: the template, its document cut to fit, then the end-of-sequence token."""
        before, _, after = TEMPLATE.replace("{query}", query).partition("{document}")
        return prompt_ids(self.tokenizer, before, document.strip(), after, self.max_length - 1) + [
            self.tokenizer.eos_token_id
        ]

    def score_pairs(self, queries: Sequence[str], texts: Sequence[str]) -> np.ndarray:
        import torch

        inputs = [self.input_ids(q, t) for q, t in zip(queries, texts)]
        order = sorted(range(len(inputs)), key=lambda i: len(inputs[i]))
        scores = np.empty(len(inputs))
        start_id = self.model.config.decoder_start_token_id
        bf16 = torch.autocast(torch.device(self.device).type, dtype=torch.bfloat16, enabled=self.precision == "bf16")
        with torch.inference_mode(), bf16:
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                width = max(len(inputs[i]) for i in idx)
                ids = torch.full((len(idx), width), self.tokenizer.pad_token_id, dtype=torch.long)
                mask = torch.zeros((len(idx), width), dtype=torch.long)
                for row, i in enumerate(idx):
                    ids[row, : len(inputs[i])] = torch.tensor(inputs[i])
                    mask[row, : len(inputs[i])] = 1
                decoder = torch.full((len(idx), 1), start_id, dtype=torch.long)
                logits = (
                    self.model(
                        input_ids=ids.to(self.device),
                        attention_mask=mask.to(self.device),
                        decoder_input_ids=decoder.to(self.device),
                    )
                    .logits[:, 0]
                    .float()
                )
                scores[idx] = (logits[:, self.true_id] - logits[:, self.false_id]).cpu().numpy()
        return scores

    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        queries = [r.query for r in requests for _ in r.docids]
        flat = self.score_pairs(queries, [pair_text(doc) for r in requests for doc in r.documents])
        bounds = np.cumsum([0] + [len(r.docids) for r in requests])
        return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    @property
    def label(self) -> str:
        return f"monot5:{Path(self.path).name}"

    @property
    def fingerprint(self) -> str:
        sha = weights_sha256(self.path)
        return (
            f"{self.label} max_length {self.max_length} precision {self.precision} "
            f"weights {sha[:16] if sha else self.path}"
        )
