"""Weakly supervised question-encoder fine-tuning from answer strings.

ORQA's "early update" (Lee et al., ACL 2019; equations in docs/algorithms.md): the block encoder is
frozen and its vectors are read from the dense index; for each training question the current question
encoder retrieves the top ``--top-c`` blocks, P(b|q) is the softmax of their scores (/ ``--temperature``),
and the loss is -log of the mass on the blocks that contain an answer string (DPR's matching, as
``eval --answers`` uses). A question with no such block among its top-c is skipped for that step; the
fraction skipped is logged. Only the question encoder learns. A seeded dev split of the *training*
questions, grouped so that no dev question shares an answer-bearing block with a training question,
selects the checkpoint by Acc@1; the saved encoder is paired with the index's document encoder.

    python -m tour_pyserini train-qa --index indexes/nq-oracle.minilm \\
        --topics collections/nq-oracle/topics.train.jsonl --output models/orqa/nq-oracle-qa
    python -m tour_pyserini.search --index indexes/nq-oracle.minilm --encoder models/orqa/nq-oracle-qa ...
"""

from __future__ import annotations

import logging
import time
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
class QaConfig(TrainerSettings):
    """The early update's parameters, each declared once: train-qa's flags, their help and ranges derive from it."""

    steps: int = param(300, positive_int, "optimiser steps")
    batch_size: int = param(32, positive_int, "questions per step")
    lr: float = param(2e-5, like=LEARNING_RATE)
    top_c: int = param(5000, positive_int, "blocks the loss is normalised over (capped at the index size)")
    temperature: float = param(0.05, positive_float, "scores are cosines divided by it before the softmax")
    query_max_length: int = param(64, positive_int, "tokens of a question")
    dev_fraction: float = param(0.1, fraction, "fraction of the training questions held out as the dev split")
    eval_every: int = param(50, positive_int, "steps between dev evaluations")

    def check(self) -> None:
        check_fields(self)


class EarlyUpdateTask:
    """The training loop's task: the question encoder, over the frozen ``blocks`` (the index's vectors);
    ``rows[i]`` are the answer-bearing blocks of ``topics[i]``; training items are topic positions. The saved
    encoder is paired with ``pair``, the index's document encoder (name, weights' SHA-256)."""

    name, metric = "early update", "dev_acc@1"

    def __init__(
        self,
        init: str,
        config: QaConfig,
        blocks,
        topics,
        rows: list[list[int]],
        dev: list[int],
        *,
        pair: tuple[str, str | None],
    ):
        import torch

        from tour_pyserini.training.encoder_io import load_encoder

        torch.manual_seed(config.seed)
        self.config, self.blocks, self.topics, self.rows, self.dev, self.pair = config, blocks, topics, rows, dev, pair
        self.spec, self.tokenizer, self.model = load_encoder(init)
        self.modules = [self.model]
        self.top_c = min(config.top_c, len(blocks))

    def parameters(self) -> list:
        return list(self.model.parameters())

    def loss(self, batch: list[int], run):
        import torch

        from tour_pyserini.training.encoder_io import encode
        from tour_pyserini.training.losses import early_update_loss

        c, spec = self.config, self.spec
        with run.autocast():
            q = encode(
                self.model,
                self.tokenizer,
                [self.topics[i].text for i in batch],
                max_length=c.query_max_length,
                pooling=spec.pooling,
                l2_norm=spec.l2_norm,
            )
        scores = q.float() @ self.blocks.T
        top = scores.detach().topk(self.top_c, dim=1).indices  # the current encoder's top-c: the early update
        positives = torch.zeros_like(scores, dtype=torch.bool)
        for r, i in enumerate(batch):
            positives[r, self.rows[i]] = True
        loss, skipped = early_update_loss(scores.gather(1, top), positives.gather(1, top), c.temperature)
        return loss, {"skipped_fraction": skipped / len(batch)}

    def evaluate(self, run) -> dict[str, float]:
        """Acc@1 and Acc@20 of the dev questions, retrieving over every indexed block."""
        from tour_pyserini.training.encoder_io import encode_batches

        questions = [self.topics[i].text for i in self.dev]
        vectors = encode_batches(self.model, self.tokenizer, questions, self.spec, self.config.query_max_length)
        top = (vectors @ self.blocks.T).topk(min(20, len(self.blocks)), dim=1).indices.tolist()
        answer_rows = [self.rows[i] for i in self.dev]
        hit1 = [bool(set(t[:1]) & set(rows)) for t, rows in zip(top, answer_rows)]
        hit20 = [bool(set(t) & set(rows)) for t, rows in zip(top, answer_rows)]
        return {"dev_acc@1": sum(hit1) / len(hit1), "dev_acc@20": sum(hit20) / len(hit20)}

    def save(self, where: Path) -> None:
        from tour_pyserini.encoders.pairing import write_pair
        from tour_pyserini.training.encoder_io import save_encoder

        save_encoder(self.model, self.tokenizer, where, self.spec)
        write_pair(where, *self.pair)


def answer_split(rows: list[list[int]], dev_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, dev) question positions, grouped so that no dev question shares an answer-bearing block
    (``rows``) with a training question."""
    from tour_pyserini.training.splits import grouped_split

    return grouped_split(
        list(range(len(rows))), {i: set(r) for i, r in enumerate(rows)}, dev_fraction=dev_fraction, seed=seed
    )


def train(index_dir: Path, topics, output: Path, init: str, config: QaConfig) -> dict:
    """Fine-tune the question encoder ``init`` on ``topics`` (with answers) over the dense index ``index_dir``;
    writes ``output`` and returns the report (training.json)."""
    import torch

    from tour_pyserini.encoders import EncoderSpec
    from tour_pyserini.encoders.pairing import check_pair, index_document_sha
    from tour_pyserini.eval.answers import AnswerMatcher
    from tour_pyserini.index.docstore import DocStore
    from tour_pyserini.index.faiss_index import read_vectors
    from tour_pyserini.index.layout import DOCSTORE_FILE, recorded_encoder
    from tour_pyserini.training.answers import answer_bearing, check_trainable
    from tour_pyserini.training.loop import LoopSettings, Trainer

    config.check()  # the command line checked its flags already; a library caller gets the same rules
    built_by = recorded_encoder(index_dir)
    check_pair(EncoderSpec.resolve(init), built_by, index_dir)
    vectors, docids = read_vectors(index_dir)
    blocks = torch.from_numpy(vectors)
    start = time.perf_counter()
    rows = answer_bearing(topics, docids, AnswerMatcher(DocStore(index_dir / DOCSTORE_FILE)))
    never = sum(not r for r in rows)
    log.info(
        f"{len(topics)} questions; {never} have no answer-bearing block in the whole index "
        f"({time.perf_counter() - start:.0f} s to match answers)"
    )
    train_set, dev = answer_split(rows, config.dev_fraction, config.seed)
    if not train_set:
        raise UserError("too few training questions for a dev split")
    check_trainable(rows, train_set, index_dir)
    task = EarlyUpdateTask(
        init, config, blocks, topics, rows, dev, pair=(built_by["name"], index_document_sha(built_by))
    )
    if task.model.config.hidden_size != blocks.shape[1]:
        raise UserError(
            f"encoder {init} makes {task.model.config.hidden_size}-d vectors but index {index_dir} "
            f"holds {blocks.shape[1]}-d vectors"
        )
    about = {
        "config": asdict(config),
        "init": init,
        "index": str(index_dir),
        "top_c": task.top_c,
        "train_questions": len(train_set),
        "dev_questions": len(dev),
        "dev_qids": sorted(topics[i].qid for i in dev),
        "questions_without_answer_block": never,
    }
    return Trainer(task, LoopSettings.of(config)).fit(train_set, output, about)
