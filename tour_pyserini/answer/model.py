"""The extractive reader: any Hugging Face ``AutoModelForQuestionAnswering`` over a question's top-k passages.

Every (question, passage) pair is cut into windows (``windows.py``), the windows of a whole batch of
questions run through the model in length-sorted batches, each window's best span is found
(``spans.best_span``), and a selection rule picks one answer per question (``spans.choose``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tour_pyserini.answer.spans import (
    DEFAULT_RETRIEVAL_WEIGHT,
    DEFAULT_RULE,
    RULES,
    best_span,
    choose,
    passage_candidate,
)
from tour_pyserini.answer.windows import Window, collate, length_sorted_batches, make_windows, question_budget
from tour_pyserini.encoders.checkpoints import checked_loading
from tour_pyserini.errors import UserError
from tour_pyserini.files.predictions import Prediction
from tour_pyserini.numbers import check_fields, non_negative_float, param, positive_int


@dataclass
class ReaderOptions:
    """How the reader reads, each parameter declared once (the answer command's flags derive from it)."""

    k: int = param(10, positive_int, "passages read per question: the run's first k")
    max_length: int = param(256, positive_int, "tokens per window (question and special tokens included)")
    stride: int = param(64, positive_int, "tokens shared by consecutive windows of a long passage")
    max_answer_length: int = param(10, positive_int, "longest answer span, in tokens (ORQA's limit)")
    batch_size: int = param(32, positive_int, "windows per forward pass")
    rule: str = param(DEFAULT_RULE, str, "answer selection: orqa = best retrieval + span score over all passages "
                      "(any QA model); dpr = passage by selection logit, then its best span", choices=RULES)
    retrieval_weight: float = param(DEFAULT_RETRIEVAL_WEIGHT, non_negative_float, "w in S = w * retrieval score + "
                                    "span score (--rule orqa)")  # fmt: skip
    precision: str = "fp32"  # fp32 or bf16 (autocast), as devices.resolve_precision resolves it
    device: str = "cpu"

    def check(self) -> None:
        check_fields(self)
        if self.stride >= self.max_length // 2:
            raise UserError(f"--stride {self.stride} must be below half of --max-length {self.max_length}")
        if self.precision not in ("fp32", "bf16"):
            raise UserError(f"precision {self.precision!r}: fp32 or bf16 (resolve 'auto' first)")


@dataclass(frozen=True)
class Passage:
    docid: str
    text: str  # title and text, as the index holds them
    score: float  # the retriever's


@dataclass(frozen=True)
class Question:
    qid: str
    text: str
    passages: tuple[Passage, ...]


# the files transformers loads a PyTorch model's weights from (whole, or sharded with an index)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                "pytorch_model.bin.index.json")


def has_weights(name: str) -> bool:
    """Whether the model ``name`` (a directory, or a hub id in the local cache) holds weights transformers reads."""
    from huggingface_hub import try_to_load_from_cache

    local = Path(name).expanduser()
    if local.is_dir():
        return any((local / f).is_file() for f in WEIGHT_FILES)
    return any(isinstance(try_to_load_from_cache(name, f), str) for f in WEIGHT_FILES)


def check_reader(name: str, *, max_length: int | None = None, stride: int | None = None) -> None:
    """``name`` must be an extractive QA model with weights and a fast tokenizer (offsets map spans back to
    text), and windows of ``max_length`` tokens overlapping by ``stride`` must leave it room for a question;
    one line otherwise, read from its config and tokenizer before any weights load."""
    from transformers import AutoConfig, AutoTokenizer

    from tour_pyserini.encoders.spec import check_model

    check_model("reader", name)
    try:
        config = AutoConfig.from_pretrained(name)
    except (OSError, ValueError) as e:
        raise UserError(f"reader {name!r}: its config does not load ({e})") from None
    architectures = config.architectures or []
    if not any(a.endswith("ForQuestionAnswering") for a in architectures):
        raise UserError(f"reader {name!r} is not an extractive QA model: its config names "
                        f"{', '.join(architectures) or 'no architecture'}, not a *ForQuestionAnswering one "
                        "(train one with train-reader)")  # fmt: skip
    if not has_weights(name):
        raise UserError(f"reader {name!r} has a config but no weights (none of {', '.join(WEIGHT_FILES)})")
    tokenizer = AutoTokenizer.from_pretrained(name)
    if not tokenizer.is_fast:
        raise UserError(f"reader {name!r}: its tokenizer has no fast version (needed for character offsets)")
    if max_length is not None and stride is not None:
        question_budget(tokenizer, max_length=max_length, stride=stride)


class Reader:
    """A loaded QA model and tokenizer; :meth:`read` answers a batch of questions."""

    def __init__(self, name: str, options: ReaderOptions, model=None, tokenizer=None):
        import torch
        from transformers import AutoModelForQuestionAnswering, AutoTokenizer

        options.check()
        self.options = options
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(name)
        # float32 whatever the checkpoint stores (a float16 one is half the size on disk)
        if model is None:
            with checked_loading(f"reader {name!r}"):
                model = AutoModelForQuestionAnswering.from_pretrained(name, dtype=torch.float32)
        self.model = model.to(options.device)

    def _autocast(self):
        import torch

        if self.options.precision != "bf16":
            return contextlib.nullcontext()
        return torch.autocast(torch.device(self.options.device).type, dtype=torch.bfloat16)

    def logits(self, windows: Sequence[Window]) -> list[tuple]:
        """(start, end) logits of each window, float32 numpy arrays of its length."""
        import torch

        out: list = [None] * len(windows)
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.inference_mode(), self._autocast():
                for batch in length_sorted_batches(windows, self.options.batch_size):
                    inputs = collate([windows[i] for i in batch], self.tokenizer.pad_token_id or 0)
                    inputs = {k: torch.from_numpy(v).to(self.options.device) for k, v in inputs.items()}
                    result = self.model(**inputs)
                    start, end = result.start_logits.float().cpu().numpy(), result.end_logits.float().cpu().numpy()
                    for row, i in enumerate(batch):
                        n = len(windows[i].input_ids)
                        out[i] = (start[row, :n], end[row, :n])
        finally:
            self.model.train(was_training)
        return out

    def read(self, questions: Sequence[Question]) -> list[Prediction]:
        """One prediction per question (an empty answer for a question without passages)."""
        o = self.options
        pairs = [(qi, p) for qi, q in enumerate(questions) for p in q.passages[: o.k]]
        windows = make_windows(self.tokenizer, [questions[qi].text for qi, _ in pairs], [p.text for _, p in pairs],
                               max_length=o.max_length, stride=o.stride)  # fmt: skip
        logits = self.logits(windows)
        by_pair: dict[int, list[int]] = {}
        for w, window in enumerate(windows):
            by_pair.setdefault(window.pair, []).append(w)
        candidates: list[list] = [[] for _ in questions]
        for pair, (qi, passage) in enumerate(pairs):
            spans = [best_span(*logits[w], windows[w].context, o.max_answer_length) for w in by_pair.get(pair, [])]
            candidate = passage_candidate(pair, passage.score, spans)
            if candidate is not None:
                candidates[qi].append(candidate)
        predictions = []
        for q, cands in zip(questions, candidates):
            chosen = choose(cands, o.rule, o.retrieval_weight)
            if chosen is None:
                predictions.append(Prediction(q.qid, "", "", 0.0))
                continue
            candidate, score = chosen
            window = windows[by_pair[candidate.passage][candidate.window]]
            passage = pairs[candidate.passage][1]
            begin, end = window.offsets[candidate.span.start][0], window.offsets[candidate.span.end][1]
            predictions.append(Prediction(q.qid, passage.text[begin:end], passage.docid, float(score)))
        return predictions
