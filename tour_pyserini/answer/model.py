"""The extractive reader: any Hugging Face ``AutoModelForQuestionAnswering`` over a question's top-k passages.

Every (question, passage) pair is cut into windows (``windows.py``), the windows of a whole batch of
questions run through the model in length-sorted batches, each window's best span is found
(``spans.best_span``), and a selection rule picks one answer per question (``spans.choose``). The model runs
through torch or, exported once and cached beside its weights, ONNX Runtime or OpenVINO (``runtime``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

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
from tour_pyserini.runtime import RUNTIMES, check_model_directory, resolve_runtime_precision


@dataclass
class ReaderOptions:
    """How the reader reads, each parameter declared once (the answer command's flags derive from it)."""

    k: int = param(10, positive_int, "passages read per question: the run's first k")
    max_length: int = param(256, positive_int, "tokens per window (question and special tokens included)")
    stride: int = param(64, positive_int, "tokens shared by consecutive windows of a long passage")
    max_answer_length: int = param(10, positive_int, "longest answer span, in tokens (ORQA's limit)")
    batch_size: int = param(32, positive_int, "windows per forward pass")
    rule: str = param(
        DEFAULT_RULE,
        str,
        "answer selection: orqa = best retrieval + span score over all passages "
        "(any QA model); dpr = passage by selection logit, then its best span",
        choices=RULES,
    )
    retrieval_weight: float = param(
        DEFAULT_RETRIEVAL_WEIGHT, non_negative_float, "w in S = w * retrieval score + span score (--rule orqa)"
    )
    precision: str = "fp32"  # fp32, bf16 (torch's autocast, OpenVINO's hint) or int8 (ONNX Runtime), resolved
    runtime: str = "torch"  # what runs the model: torch, onnx or openvino (the CPU)
    device: str = "cpu"

    def check(self) -> None:
        check_fields(self)
        if self.stride >= self.max_length // 2:
            raise UserError(f"--stride {self.stride} must be below half of --max-length {self.max_length}")
        if self.precision not in ("fp32", "bf16", "int8"):
            raise UserError(f"precision {self.precision!r}: fp32, bf16 or int8 (resolve 'auto' first)")
        if self.runtime not in RUNTIMES:
            raise UserError(f"runtime {self.runtime!r}: one of {', '.join(RUNTIMES)} (resolve auto first)")


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


def check_reader(
    name: str, *, max_length: int | None = None, stride: int | None = None, runtime: str = "torch"
) -> None:
    """``name`` must be an extractive QA model with weights and a fast tokenizer (offsets map spans back to
    text), a local directory where ``runtime`` is not torch (the exported graph is cached beside it), and windows
    of ``max_length`` tokens overlapping by ``stride`` must leave it room for a question; one line otherwise, read
    from its config and tokenizer before any weights load."""
    from transformers import AutoConfig, AutoTokenizer

    from tour_pyserini.encoders.spec import check_model, check_weights

    check_model("reader", name)
    try:
        config = AutoConfig.from_pretrained(name)
    except (OSError, ValueError) as e:
        raise UserError(f"reader {name!r}: its config does not load ({e})") from None
    architectures = config.architectures or []
    if not any(a.endswith("ForQuestionAnswering") for a in architectures):
        raise UserError(
            f"reader {name!r} is not an extractive QA model: its config names "
            f"{', '.join(architectures) or 'no architecture'}, not a *ForQuestionAnswering one "
            "(train one with train-reader)"
        )
    check_weights("reader", name)
    check_model_directory(name, runtime, "--runtime", f"reader {name!r}")
    tokenizer = AutoTokenizer.from_pretrained(name)
    if not tokenizer.is_fast:
        raise UserError(f"reader {name!r}: its tokenizer has no fast version (needed for character offsets)")
    if max_length is not None and stride is not None:
        question_budget(tokenizer, max_length=max_length, stride=stride)


def resolve_reader_precision(precision: str, runtime: str, device: str) -> str:
    """What the answer command's ``--precision`` means through ``--runtime`` on ``device``: torch's and OpenVINO's
    as for a teacher (``auto``: bf16 where the device multiplies in bfloat16 natively; it answers within 0.002 EM
    and F1 of float32 on nq-oracle through both), but ``auto`` through ONNX Runtime is fp32: int8 moved F1 by
    -0.0025 there (docs/benchmarks.md). One line for anything refused, before any model loads."""
    return resolve_runtime_precision(precision, runtime, device, "--precision", "--runtime", auto={"onnx": "fp32"})


SPAN_LOGITS = "span_logits"  # an exported reader's one output: start and end logits, stacked on the last axis


def load_reader(name: str, **options):
    """The QA model ``name`` in float32 whatever the checkpoint stores (a float16 one is half the size on disk);
    ``options`` go to ``from_pretrained``."""
    import torch
    from transformers import AutoModelForQuestionAnswering

    with checked_loading(f"reader {name!r}"):
        return AutoModelForQuestionAnswering.from_pretrained(name, dtype=torch.float32, **options)


def exported_reader(name: str, tokenizer, precision: str, runtime: str):
    """The QA model in directory ``name`` through ``runtime`` (onnx or openvino) at ``precision``: a callable from
    :func:`~tour_pyserini.answer.windows.collate`'s arrays to (windows, tokens, 2) start and end logits. The graph
    comes from the cache beside the weights, exported there the first time (the torch model loads only then)."""
    import torch

    from tour_pyserini.encoders.spec import weights_sha256
    from tour_pyserini.runtime import exported_model

    class SpanLogits(torch.nn.Module):
        """The model with one output, as a traced graph has: its start and end logits side by side."""

        def __init__(self, model):
            super().__init__()
            self.model = model
            self.config = model.config  # the fusions read its heads and width

        def forward(self, **inputs):
            out = self.model(**inputs)
            return {SPAN_LOGITS: torch.stack((out.start_logits, out.end_logits), dim=-1)}

        def set_attn_implementation(self, attention: str) -> None:
            self.model.set_attn_implementation(attention)

    def export(write, graph: Path) -> None:
        windows = make_windows(
            tokenizer,
            ["a question", "another, longer question"],
            ["a passage", "a longer passage of text"],
            max_length=64,
            stride=16,
        )
        examples = {k: torch.from_numpy(v) for k, v in collate(windows, tokenizer.pad_token_id or 0).items()}
        write(SpanLogits(load_reader(name)).eval(), examples, SPAN_LOGITS, graph)

    return exported_model(name, weights_sha256(name), precision, runtime, export, f"reader {name!r}")


class Reader:
    """A loaded QA model and tokenizer; :meth:`read` answers a batch of questions. ``model`` (a torch model, for
    the trainers) runs as given; else ``name`` loads through ``options.runtime``."""

    def __init__(self, name: str, options: ReaderOptions, model=None, tokenizer=None):
        from transformers import AutoTokenizer

        options.check()
        self.options = options
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(name)
        self.model: Any = None  # the torch model, where torch runs the reader
        self.graph: Callable[[dict[str, np.ndarray]], np.ndarray] | None = None  # else its exported graph
        if model is None and options.runtime != "torch":
            self.graph = exported_reader(name, self.tokenizer, options.precision, options.runtime)
        else:
            self.model = (model or load_reader(name)).to(options.device)

    @contextlib.contextmanager
    def _running(self):
        """The torch model in eval mode under inference mode (and bf16 autocast where asked), its mode restored."""
        import torch

        if self.model is None:
            yield
            return
        was_training = self.model.training
        self.model.eval()
        bf16 = self.options.precision == "bf16"
        try:
            with (
                torch.inference_mode(),
                torch.autocast(torch.device(self.options.device).type, dtype=torch.bfloat16, enabled=bf16),
            ):
                yield
        finally:
            self.model.train(was_training)

    def _span_logits(self, inputs: dict) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) logits of a batch of :func:`collate`'s arrays, float32 numpy (windows, tokens)."""
        import torch

        if self.graph is not None:
            both = self.graph(inputs)
            return both[..., 0], both[..., 1]
        result = self.model(**{k: torch.from_numpy(v).to(self.options.device) for k, v in inputs.items()})
        return result.start_logits.float().cpu().numpy(), result.end_logits.float().cpu().numpy()

    def logits(self, windows: Sequence[Window]) -> list[tuple[np.ndarray, np.ndarray]]:
        """(start, end) logits of each window, float32 numpy arrays of its length."""
        out: list = [None] * len(windows)
        with self._running():
            for batch in length_sorted_batches(windows, self.options.batch_size):
                start, end = self._span_logits(collate([windows[i] for i in batch], self.tokenizer.pad_token_id or 0))
                for row, i in enumerate(batch):
                    n = len(windows[i].input_ids)
                    out[i] = (start[row, :n], end[row, :n])
        return out

    def read(self, questions: Sequence[Question]) -> list[Prediction]:
        """One prediction per question (an empty answer for a question without passages)."""
        o = self.options
        pairs = [(qi, p) for qi, q in enumerate(questions) for p in q.passages[: o.k]]
        windows = make_windows(
            self.tokenizer,
            [questions[qi].text for qi, _ in pairs],
            [p.text for _, p in pairs],
            max_length=o.max_length,
            stride=o.stride,
        )
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
