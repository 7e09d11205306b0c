"""Training an extractive reader from question–answer strings alone: distant supervision, as DPR and ORQA do it.

A question's passages are the first ``--k`` of a retriever's run over the training questions. A passage
that contains an answer string (DPR's has-answer rule, the one ``eval --answers`` uses) is a positive,
and every occurrence of every answer in its windows is a target span; the others are negatives. Each
step takes, per question, one positive window and ``--passages - 1`` negative windows, and minimises
(equations: docs/algorithms.md)

- the span loss: -log sum over the target spans (s, e) of P_start(s) P_end(e), the softmaxes over the
  positive window's passage tokens (the marginal likelihood over spans: which occurrence is the answer
  is latent), and
- DPR's passage-selection loss: -log softmax of the windows' [CLS] start logits at the positive, which
  trains the selection logit of the ``dpr`` rule.

A question without an answer-bearing passage in its top-k is skipped (the fraction is reported). A seeded
dev split of the training questions, grouped so that no dev question shares an answer-bearing passage
with a training question, chooses the checkpoint by exact match of the whole reader (``--rule``'s
answers over the dev questions' top ``--dev-k`` passages). The model is saved in float16.

    python -m tour_pyserini train-reader --run runs/nq-oracle.minilm.train.trec \\
        --topics collections/nq-oracle/topics.train.jsonl --collection collections/nq-oracle \\
        --output models/nq-oracle-reader
"""

from __future__ import annotations

import copy
import logging
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tour_pyserini.answer.spans import DEFAULT_RULE, RULES
from tour_pyserini.errors import UserError
from tour_pyserini.numbers import (
    check_fields,
    fraction,
    non_negative_float,
    param,
    positive_int,
)
from tour_pyserini.training.loop import LEARNING_RATE, TrainerSettings

if TYPE_CHECKING:
    from tour_pyserini.answer.windows import Window

log = logging.getLogger(__name__)


@dataclass
class ReaderTrainConfig(TrainerSettings):
    """The reader training's parameters, each declared once: train-reader's flags, their help and ranges derive
    from it. The defaults are sized for 2 CPU cores: 240 steps of 16 questions are about 2.5 passes over
    nq-oracle's training set."""

    steps: int = param(240, positive_int, "optimiser steps")
    batch_size: int = param(16, positive_int, "questions per step")
    passages: int = param(2, positive_int, "windows per question: one positive and the rest negatives (DPR: 24)")
    lr: float = param(5e-5, like=LEARNING_RATE)
    k: int = param(20, positive_int, "the run's passages searched for positives and negatives")
    # nq-oracle's passages: 118 tokens median, 149 at the 90th percentile
    max_length: int = param(192, positive_int, "tokens per window (question and special tokens included)")
    stride: int = param(48, positive_int, "tokens shared by consecutive windows of a long passage")
    max_answer_length: int = param(10, positive_int, "longest answer span, in tokens")
    dev_fraction: float = param(0.1, fraction, "fraction of the training questions held out as the dev split")
    dev_k: int = param(5, positive_int, "passages read per dev question")
    rule: str = param(DEFAULT_RULE, str, "selection rule of the dev answers", choices=RULES)
    # the shipped reader's checkpoint was chosen at 1
    retrieval_weight: float = param(1.0, non_negative_float, "the orqa rule's w for the dev answers")
    eval_every: int = param(60, positive_int, "steps between dev evaluations")
    # precision (TrainerSettings): of the training forward passes; the dev questions are read in fp32

    def check(self) -> None:
        check_fields(self)
        if self.stride >= self.max_length // 2:
            raise UserError(f"--stride {self.stride} must be below half of --max-length {self.max_length}")


# ---- the losses: pure functions on logits ----


def span_marginal_nll(start, end, context, starts, ends):
    """-log sum_j P_start(starts[j]) P_end(ends[j]) for one window: ``start``, ``end`` logits (L,), ``context``
    a boolean mask (L,) of the tokens a span may use, ``starts``/``ends`` the target positions (m,)."""
    import torch

    log_start = torch.log_softmax(start.masked_fill(~context, float("-inf")), dim=0)
    log_end = torch.log_softmax(end.masked_fill(~context, float("-inf")), dim=0)
    return -torch.logsumexp(log_start[starts] + log_end[ends], dim=0)


def selection_nll(selection):
    """DPR's passage-selection loss for one question: -log softmax(selection)[0], the positive first."""
    import torch

    return -torch.log_softmax(selection, dim=0)[0]


# ---- distant supervision ----


def occurrences(ids: Sequence[int], context, answer_ids: Sequence[list[int]]) -> list[tuple[int, int]]:
    """Every (start, end) token span of the window's passage tokens that spells one of the answers."""
    spans = set()
    for target in answer_ids:
        n = len(target)
        for s in range(len(ids) - n + 1):
            if context[s] and context[s + n - 1] and list(ids[s : s + n]) == target:
                spans.add((s, s + n - 1))
    return sorted(spans)


@dataclass
class Example:
    """One training question's windows: positives with their target spans, and negatives."""

    qid: str
    positives: list[tuple[Window, list[tuple[int, int]]]]  # each with its answer's spans
    negatives: list[Window]


def build_examples(
    tokenizer, questions, answers: dict[str, tuple[str, ...]], bearing: dict[str, set[str]], config: ReaderTrainConfig
) -> list[Example]:
    """``questions`` (``reader.Question``s with their top-k passages) as :class:`Example`s; ``bearing`` holds
    each question's answer-bearing docids. A question without a positive window is left out."""
    from tour_pyserini.answer.windows import make_windows

    examples = []
    for q in questions:
        passages = q.passages[: config.k]
        windows = make_windows(
            tokenizer,
            [q.text] * len(passages),
            [p.text for p in passages],
            max_length=config.max_length,
            stride=config.stride,
        )
        answer_ids = [tokenizer(a, add_special_tokens=False)["input_ids"] for a in answers[q.qid]]
        answer_ids = [a for a in answer_ids if a]
        positive = [p.docid in bearing[q.qid] for p in passages]
        example = Example(q.qid, [], [])
        for w in windows:
            if positive[w.pair]:
                spans = occurrences(w.input_ids, w.context, answer_ids)
                if spans:
                    example.positives.append((w, spans))
            else:
                example.negatives.append(w)
        if example.positives:
            examples.append(example)
    return examples


def step_loss(model, examples: Sequence[Example], config: ReaderTrainConfig, rng: random.Random, pad_id: int):
    """The mean over ``examples`` of span loss + selection loss, on one sampled positive window and up to
    ``passages - 1`` sampled negatives per question (one forward pass for the whole batch)."""
    import torch

    from tour_pyserini.answer.windows import collate

    windows: list[Window] = []
    plan: list[tuple[int, int, list[tuple[int, int]]]] = []  # (first window, windows, answer spans) per question
    for ex in examples:
        window, spans = rng.choice(ex.positives)
        negatives = rng.sample(ex.negatives, min(len(ex.negatives), config.passages - 1))
        plan.append((len(windows), 1 + len(negatives), spans))
        windows += [window, *negatives]
    inputs = {k: torch.from_numpy(v) for k, v in collate(windows, pad_id).items()}
    out = model(**inputs)
    losses = []
    for first, count, spans in plan:
        window = windows[first]
        n = len(window.input_ids)
        context = torch.from_numpy(window.context)
        starts, ends = torch.tensor([s for s, _ in spans]), torch.tensor([e for _, e in spans])
        span = span_marginal_nll(
            out.start_logits[first, :n].float(), out.end_logits[first, :n].float(), context, starts, ends
        )
        losses.append(span + selection_nll(out.start_logits[first : first + count, 0].float()))
    return torch.stack(losses).mean()


def dev_exact_match(model, tokenizer, questions, topics, config: ReaderTrainConfig) -> float:
    from tour_pyserini.answer import Reader, ReaderOptions
    from tour_pyserini.eval.exact_match import evaluate_predictions

    options = ReaderOptions(
        k=config.dev_k,
        max_length=config.max_length,
        stride=config.stride,
        max_answer_length=config.max_answer_length,
        rule=config.rule,
        retrieval_weight=config.retrieval_weight,
    )
    reader = Reader("", options, model=model, tokenizer=tokenizer)
    predictions = {p.qid: p for i in range(0, len(questions), 16) for p in reader.read(questions[i : i + 16])}
    return evaluate_predictions(predictions, topics).means["EM"]


def nothing_to_train_on(
    bearing: dict[str, set[str]],
    train_ids: Sequence[str],
    answers: dict[str, tuple[str, ...]],
    config: ReaderTrainConfig,
) -> str:
    """Why no training question gave a positive window, by its cause."""
    if not any(bearing.values()):
        return (
            f"no question has a passage containing one of its answers (DPR's match) in its top {config.k}: "
            "a run of another collection, or answers the passages never hold"
        )
    if not (bearing_train := [q for q in train_ids if bearing[q]]):
        held = sum(bool(b) for b in bearing.values())
        return (
            f"the {held} question(s) with an answer-bearing passage in their top {config.k} all went to the dev "
            "split: lower --dev-fraction or give more questions"
        )
    first = bearing_train[0]
    return (
        f"the {len(bearing_train)} training question(s) with an answer-bearing passage never hold a whole answer "
        f"in one window's tokens (e.g. question {first}: {answers[first][0]!r}); answers longer than a window's "
        f"passage part (--max-length {config.max_length}), or matched only after DPR's normalisation"
    )


class ReaderTask:
    """The training loop's task: an extractive QA model, its span + selection loss, dev exact match."""

    name, metric = "train reader", "dev_em"

    def __init__(self, init: str, config: ReaderTrainConfig, tokenizer, dev_questions: list, dev_topics: list):
        import torch
        from transformers import AutoModelForQuestionAnswering

        torch.manual_seed(config.seed)
        self.config, self.tokenizer, self.dev_questions, self.dev_topics = config, tokenizer, dev_questions, dev_topics
        self.model = AutoModelForQuestionAnswering.from_pretrained(init, dtype=torch.float32)
        self.modules = [self.model]

    def parameters(self) -> list:
        return list(self.model.parameters())

    def loss(self, batch: list[Example], run):
        with run.autocast():
            return step_loss(self.model, batch, self.config, run.rng, self.tokenizer.pad_token_id or 0), {}

    def evaluate(self, run) -> dict[str, float]:
        return {"dev_em": dev_exact_match(self.model, self.tokenizer, self.dev_questions, self.dev_topics, self.config)}

    def save(self, where: Path) -> None:
        copy.deepcopy(self.model).half().save_pretrained(where)  # float16: half the size; the reader loads float32
        self.tokenizer.save_pretrained(where)


def train(questions, topics, matcher, output: Path, init: str, config: ReaderTrainConfig) -> dict:
    """Train from ``init`` on ``questions`` (``reader.Question``s over the training topics' top-k; ``topics``
    hold their answers); ``matcher`` is an ``eval.answers.AnswerMatcher``. Writes ``output`` (float16 model,
    tokenizer, ``training.json``) and returns the report."""
    from transformers import AutoTokenizer

    from tour_pyserini.training.loop import LoopSettings, Trainer
    from tour_pyserini.training.splits import grouped_split

    config.check()
    answers = {t.qid: t.answers for t in topics}
    tokenizer = AutoTokenizer.from_pretrained(init)
    bearing = {
        q.qid: {p.docid for p in q.passages[: config.k] if matcher.has_answer(p.docid, p.text, answers[q.qid])}
        for q in questions
    }
    qids = [q.qid for q in questions]
    train_ids, dev_ids = grouped_split(qids, bearing, dev_fraction=config.dev_fraction, seed=config.seed)
    by_qid = {q.qid: q for q in questions}
    examples = build_examples(tokenizer, [by_qid[q] for q in train_ids], answers, bearing, config)
    skipped = 1 - len(examples) / max(1, len(train_ids))
    if not examples:
        raise UserError(nothing_to_train_on(bearing, train_ids, answers, config))
    log.info(
        f"{len(train_ids)} training questions ({len(examples)} with an answer-bearing window, {skipped:.1%} "
        f"skipped), {len(dev_ids)} dev questions"
    )
    dev_topics = [t for t in topics if t.qid in set(dev_ids)]
    task = ReaderTask(init, config, tokenizer, [by_qid[q] for q in dev_ids], dev_topics)
    about = {
        "config": asdict(config),
        "init": init,
        "train_questions": len(train_ids),
        "trained_questions": len(examples),
        "skipped_fraction": skipped,
        "dev_questions": len(dev_ids),
        "dev_qids": sorted(dev_ids),
    }
    # the untrained reader (a new span head) is not evaluated
    return Trainer(task, LoopSettings.of(config, initial="skipped")).fit(examples, output, about, "the reader")
