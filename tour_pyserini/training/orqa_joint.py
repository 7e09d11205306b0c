"""ORQA's joint training: the question encoder and the reader fine-tuned together from answer strings.

Lee et al. (ACL 2019), section 3 (equations: docs/algorithms.md). The block encoder is frozen (its vectors
are the dense index); the evidence block is a latent variable. For each training question, the current
question encoder scores every block, S_retr(b, q) = cos(q, b) / ``--temperature``, and two losses are summed:

- the early update over the top ``--top-c`` blocks: -log of the retrieval softmax's mass on blocks that
  contain an answer (DPR's has-answer rule), as ``train-qa`` does it;
- the full update over the top ``--k`` blocks: every span s of every block b is a derivation scored
  S(b, s) = S_retr(b, q) + S_read(b, s, q), and the loss is -log of the softmax mass over all derivations
  on those whose span spells an answer (its tokens are an answer's tokens). Both the reader and, through
  S_retr, the question encoder learn from it.

A question with no match in a beam adds nothing for that beam. The checkpoint is chosen by dev EM of the
whole system (retrieve with the current encoder, read its top-k with the ``orqa`` rule at weight
1 / temperature, so that the rule adds S_retr as training does) on a grouped dev split of the training
questions. Writes ``OUTPUT/query`` (the question encoder, paired with the index) and ``OUTPUT/reader``
(float16); ``answer --reader OUTPUT/reader --retrieval-weight 1/temperature`` over a run searched with
``--encoder OUTPUT/query`` reproduces the dev answers.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.numbers import (
    check_fields,
    fraction,
    param,
    positive_float,
    positive_int,
)
from tour_pyserini.training.loop import LEARNING_RATE, TrainerSettings

log = logging.getLogger(__name__)


@dataclass
class OrqaConfig(TrainerSettings):
    """The joint training's parameters, each declared once: train-orqa's flags, their help and ranges derive
    from it."""

    steps: int = param(60, positive_int, "optimiser steps")
    batch_size: int = param(8, positive_int, "questions per step")
    k: int = param(5, positive_int, "blocks the reader reads: the full update's beam (ORQA: 5)")
    top_c: int = param(5000, positive_int, "blocks of the early update (capped at the index size)")
    lr: float = param(1e-5, like=LEARNING_RATE)
    temperature: float = param(0.05, positive_float, "S_retr is the cosine divided by it")
    query_max_length: int = param(64, positive_int, "tokens of a question")
    max_length: int = param(192, positive_int, "tokens per reader window (question and special tokens included)")
    stride: int = param(48, positive_int, "tokens shared by consecutive windows of a long block")
    max_answer_length: int = param(10, positive_int, "longest answer span, in tokens")
    dev_fraction: float = param(0.1, fraction, "fraction of the training questions held out as the dev split")
    eval_every: int = param(30, positive_int, "steps between dev evaluations")

    def check(self) -> None:
        check_fields(self)
        if self.stride >= self.max_length // 2:
            raise UserError(f"--stride {self.stride} must be below half of --max-length {self.max_length}")


def span_scores(start, end, context, max_answer_length: int):
    """S_read of every span of each window: (w, L, L) with -inf where (s, e) is not an allowed span."""
    import torch

    n = start.shape[1]
    s = torch.arange(n)[:, None]
    e = torch.arange(n)[None, :]
    allowed = (e >= s) & (e - s < max_answer_length) & context[:, :, None] & context[:, None, :]
    return (start[:, :, None] + end[:, None, :]).masked_fill(~allowed, float("-inf"))


def full_update_loss(retrieval, start, end, context, targets, max_answer_length: int):
    """ORQA's full-update loss for one question, and whether it has a matching derivation.

    ``retrieval`` (w,) is S_retr of the block each of the w windows comes from; ``start``, ``end`` (w, L)
    the reader's logits, ``context`` (w, L) the passage tokens, ``targets`` (w, L, L) the spans that spell an
    answer. Loss = -log sum_{matching (b, s)} softmax_{all (b, s)}(S_retr(b) + S_read(b, s)).
    """
    import torch

    derivations = retrieval[:, None, None] + span_scores(start, end, context, max_answer_length)
    matched = targets & torch.isfinite(derivations)
    if not matched.any():
        return derivations.new_zeros(()), False
    log_all = torch.logsumexp(derivations.flatten(), dim=0)
    log_matched = torch.logsumexp(derivations.masked_fill(~matched, float("-inf")).flatten(), dim=0)
    return log_all - log_matched, True


class OrqaTask:
    """The training loop's task: the question encoder and the reader, over the frozen ``blocks`` (the index's
    vectors) and their ``texts``; ``rows[i]`` are the answer-bearing blocks of ``topics[i]``, training items
    topic positions. The saved question encoder is paired with ``pair``, the index's document encoder."""

    name, metric = "orqa joint", "dev_em"

    def __init__(
        self,
        init: str,
        reader_init: str,
        config: OrqaConfig,
        index: tuple,
        topics,
        rows,
        dev: list[int],
        *,
        pair: tuple[str, str | None],
    ):
        import torch
        from transformers import AutoModelForQuestionAnswering, AutoTokenizer

        from tour_pyserini.training.encoder_io import load_encoder

        torch.manual_seed(config.seed)
        self.config, self.topics, self.rows, self.dev, self.pair = config, topics, rows, dev, pair
        self.blocks, self.docids, self.texts = index
        self.top_c, self.k = min(config.top_c, len(self.docids)), min(config.k, len(self.docids))
        self.spec, self.q_tokenizer, self.encoder = load_encoder(init)
        self.r_tokenizer = AutoTokenizer.from_pretrained(reader_init)
        self.reader = AutoModelForQuestionAnswering.from_pretrained(reader_init, dtype=torch.float32)
        self.modules = [self.encoder, self.reader]

    def parameters(self) -> list:
        return list(self.encoder.parameters()) + list(self.reader.parameters())

    def retrieve(self, questions: list[str], run):
        """Cosines (questions, blocks) of the current question encoder."""
        from tour_pyserini.training.encoder_io import encode

        with run.autocast():
            q = encode(
                self.encoder,
                self.q_tokenizer,
                questions,
                max_length=self.config.query_max_length,
                pooling=self.spec.pooling,
                l2_norm=self.spec.l2_norm,
            )
        return q.float() @ self.blocks.T

    def loss(self, batch: list[int], run):
        """The early update over the top-c blocks plus the full update's mean over the questions it matches."""
        import torch

        from tour_pyserini.training.losses import early_update_loss

        cosines = self.retrieve([self.topics[i].text for i in batch], run)
        top = cosines.detach().topk(self.top_c, dim=1).indices
        positives = torch.zeros_like(cosines, dtype=torch.bool)
        for r, i in enumerate(batch):
            positives[r, self.rows[i]] = True
        early, skipped_early = early_update_loss(
            cosines.gather(1, top), positives.gather(1, top), self.config.temperature
        )
        full = self.full_update(batch, cosines / self.config.temperature, top[:, : self.k], run)
        loss = early + (torch.stack(full).mean() if full else 0.0)
        return loss, {"skipped_early": skipped_early / len(batch), "skipped_full": 1 - len(full) / len(batch)}

    def full_update(self, batch: list[int], scores, beams, run) -> list:
        """The full-update loss of each question of ``batch`` with a matching derivation among the spans of its
        ``beams`` (top-k block rows); ``scores`` is S_retr of every block."""
        import torch

        from tour_pyserini.answer.windows import collate, make_windows
        from tour_pyserini.training.reader import occurrences

        c, tokenizer = self.config, self.r_tokenizer
        windows, owners = [], []
        for r, i in enumerate(batch):
            beam = beams[r].tolist()
            ws = make_windows(
                tokenizer,
                [self.topics[i].text] * len(beam),
                [self.texts[b] for b in beam],
                max_length=c.max_length,
                stride=c.stride,
            )
            windows += ws
            owners += [(r, beam[w.pair]) for w in ws]
        inputs = {key: torch.from_numpy(v) for key, v in collate(windows, tokenizer.pad_token_id or 0).items()}
        with run.autocast():
            out = self.reader(**inputs)
        start, end = out.start_logits.float(), out.end_logits.float()
        context = torch.from_numpy(collate_context(windows, start.shape[1]))
        losses = []
        for r, i in enumerate(batch):
            mine = [w for w, (owner, _) in enumerate(owners) if owner == r]
            answer_ids = [
                a for a in (tokenizer(x, add_special_tokens=False)["input_ids"] for x in self.topics[i].answers) if a
            ]
            targets = torch.zeros((len(mine), start.shape[1], start.shape[1]), dtype=torch.bool)
            for row, w in enumerate(mine):
                for s, e in occurrences(windows[w].input_ids, windows[w].context, answer_ids):
                    targets[row, s, e] = True
            retrieval = torch.stack([scores[r, owners[w][1]] for w in mine])
            loss, matched = full_update_loss(
                retrieval, start[mine], end[mine], context[mine], targets, c.max_answer_length
            )
            if matched:
                losses.append(loss)
        return losses

    def evaluate(self, run) -> dict[str, float]:
        """Dev EM of the whole system: retrieve with the current encoder, read its top k with the orqa rule."""
        import torch

        from tour_pyserini.answer import Passage, Question, Reader, ReaderOptions
        from tour_pyserini.eval.exact_match import evaluate_predictions

        c, dev = self.config, self.dev
        scores = torch.cat(
            [self.retrieve([self.topics[i].text for i in dev[j : j + 64]], run) for j in range(0, len(dev), 64)]
        )
        top = scores.topk(self.k, dim=1)
        questions = [
            Question(
                self.topics[i].qid,
                self.topics[i].text,
                tuple(
                    Passage(self.docids[b], self.texts[b], float(s))
                    for b, s in zip(top.indices[r].tolist(), top.values[r].tolist())
                ),
            )
            for r, i in enumerate(dev)
        ]
        options = ReaderOptions(
            k=self.k,
            max_length=c.max_length,
            stride=c.stride,
            max_answer_length=c.max_answer_length,
            retrieval_weight=1 / c.temperature,
        )
        read = Reader("", options, model=self.reader, tokenizer=self.r_tokenizer)
        predictions = {p.qid: p for j in range(0, len(questions), 16) for p in read.read(questions[j : j + 16])}
        return {"dev_em": evaluate_predictions(predictions, [self.topics[i] for i in dev]).means["EM"]}

    def save(self, where: Path) -> None:
        from tour_pyserini.encoders.pairing import write_pair
        from tour_pyserini.training.encoder_io import save_encoder

        save_encoder(self.encoder, self.q_tokenizer, where / "query", self.spec)
        write_pair(where / "query", *self.pair)
        copy.deepcopy(self.reader).half().save_pretrained(where / "reader")
        self.r_tokenizer.save_pretrained(where / "reader")


def train(index_dir: Path, topics, output: Path, init: str, reader_init: str, config: OrqaConfig) -> dict:
    """Train from the question encoder ``init`` and the reader ``reader_init`` on ``topics`` (with answers)."""
    import torch

    from tour_pyserini.encoders import EncoderSpec
    from tour_pyserini.encoders.pairing import check_pair, index_document_sha
    from tour_pyserini.eval.answers import AnswerMatcher
    from tour_pyserini.index.docstore import DocStore
    from tour_pyserini.index.faiss_index import read_vectors
    from tour_pyserini.index.layout import DOCSTORE_FILE, recorded_encoder
    from tour_pyserini.training.answers import answer_bearing, check_trainable
    from tour_pyserini.training.early_update import answer_split
    from tour_pyserini.training.loop import LoopSettings, Trainer

    config.check()
    built_by = recorded_encoder(index_dir)
    check_pair(EncoderSpec.resolve(init), built_by, index_dir)
    vectors, docids = read_vectors(index_dir)
    docstore = DocStore(index_dir / DOCSTORE_FILE)
    texts = [d.contents for d in docstore.get(list(docids))]
    rows = answer_bearing(topics, docids, AnswerMatcher(docstore))
    train_idx, dev_idx = answer_split(rows, config.dev_fraction, config.seed)
    if not train_idx:
        raise UserError("too few training questions for a dev split")
    check_trainable(rows, train_idx, index_dir)
    log.info(f"{len(train_idx)} training and {len(dev_idx)} dev questions")
    task = OrqaTask(
        init,
        reader_init,
        config,
        (torch.from_numpy(vectors), docids, texts),
        topics,
        rows,
        dev_idx,
        pair=(built_by["name"], index_document_sha(built_by)),
    )
    about = {
        "config": asdict(config),
        "init": init,
        "reader_init": reader_init,
        "index": str(index_dir),
        "top_c": task.top_c,
        "train_questions": len(train_idx),
        "dev_questions": len(dev_idx),
        "dev_qids": sorted(topics[i].qid for i in dev_idx),
        "retrieval_weight": 1 / config.temperature,
    }
    return Trainer(task, LoopSettings.of(config)).fit(train_idx, output, about)


def collate_context(windows, width: int):
    """The windows' passage-token masks, padded to ``width`` with False."""
    import numpy as np

    mask = np.zeros((len(windows), width), dtype=bool)
    for row, w in enumerate(windows):
        mask[row, : len(w.context)] = w.context
    return mask
