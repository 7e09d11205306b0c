"""Inverse Cloze Task pre-training of a dense retriever on any corpus.

ORQA's unsupervised pre-training (Lee et al., ACL 2019; equations in docs/algorithms.md): each document
is split on sentence boundaries into blocks of at most ``--max-wordpieces`` wordpieces (title included);
a random sentence of a block is a pseudo-query, removed from its block in ``--mask-rate`` of the
examples; the other blocks of the batch are its negatives. Trains from the bundled MiniLM (or
``--init DIR``), separate query and block encoders unless ``--tied``. The checkpoint with the best
accuracy on a held-out slice of ICT examples (blocks never trained on) is saved: ``OUTPUT/query`` and
``OUTPUT/document`` (``OUTPUT`` itself with ``--tied``), ready for ``index --encoder`` and ``search --encoder``.

    python -m tour_pyserini train-ict --collection collections/scifact --output models/orqa/scifact-ict
    python -m tour_pyserini.index --collection collections/scifact --encoder models/orqa/scifact-ict/document \\
        --output indexes/scifact.ict
    python -m tour_pyserini.search --index indexes/scifact.ict --encoder models/orqa/scifact-ict/query ...
"""

from __future__ import annotations

import logging
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.numbers import (
    at_least,
    check_fields,
    param,
    positive_float,
    positive_int,
    probability,
)
from tour_pyserini.training.loop import LEARNING_RATE, TrainerSettings

log = logging.getLogger(__name__)


@dataclass
class IctConfig(TrainerSettings):
    """The pre-training's parameters, each declared once: train-ict's flags, their help and ranges derive from it."""

    steps: int = param(300, positive_int, "optimiser steps")
    batch_size: int = param(
        32, at_least(2), "examples per step; the other blocks of the batch are each query's negatives"
    )
    lr: float = param(2e-5, like=LEARNING_RATE)
    mask_rate: float = param(
        0.9, probability, "fraction of the examples whose query sentence is removed from its block"
    )
    max_wordpieces: int = param(288, positive_int, "block size limit, title and special tokens included")
    query_max_length: int = param(64, positive_int, "tokens of a pseudo-query")
    temperature: float = param(0.05, positive_float, "scores are cosines divided by it before the softmax")
    held_out: int = param(
        256, positive_int, "held-out examples scored against each other's blocks to choose the checkpoint"
    )
    eval_every: int = param(50, positive_int, "steps between held-out evaluations")

    def check(self) -> None:
        check_fields(self)


class IctTask:
    """The training loop's task: the query and block encoders (one, tied) and the in-batch ICT loss."""

    name, metric = "ict", "held_out_accuracy"

    def __init__(self, init: str, config: IctConfig, output: Path, *, tied: bool):
        import torch

        from tour_pyserini.training.encoder_io import load_encoder

        torch.manual_seed(config.seed)
        self.config, self.output, self.tied = config, output, tied
        self.spec, self.tokenizer, self.query_model = load_encoder(init)
        self.block_model = self.query_model if tied else load_encoder(init)[2]
        self.modules = [self.query_model] if tied else [self.query_model, self.block_model]
        self.blocks: list = []  # the corpus's blocks, which training items index
        self.held: list = []  # the held-out examples

    def parameters(self) -> list:
        return [p for m in self.modules for p in m.parameters()]

    def loss(self, batch: list[int], run):
        from tour_pyserini.training.encoder_io import encode
        from tour_pyserini.training.ict import draw_example
        from tour_pyserini.training.losses import in_batch_nll

        c, spec = self.config, self.spec
        examples = [draw_example(self.blocks, i, run.rng, c.mask_rate) for i in batch]
        with run.autocast():
            queries = encode(
                self.query_model,
                self.tokenizer,
                [e.query for e in examples],
                max_length=c.query_max_length,
                pooling=spec.pooling,
                l2_norm=spec.l2_norm,
            )
            evidence = encode(
                self.block_model,
                self.tokenizer,
                [e.evidence for e in examples],
                max_length=c.max_wordpieces,
                pooling=spec.pooling,
                l2_norm=spec.l2_norm,
            )
        return in_batch_nll(queries.float(), evidence.float(), c.temperature), {}

    def evaluate(self, run) -> dict[str, float]:
        """Accuracy@1 and MRR of each held-out query among all held-out blocks (their own evidence texts)."""
        from tour_pyserini.training.encoder_io import encode_batches

        c = self.config
        queries = encode_batches(
            self.query_model, self.tokenizer, [e.query for e in self.held], self.spec, c.query_max_length
        )
        blocks = encode_batches(
            self.block_model, self.tokenizer, [e.evidence for e in self.held], self.spec, c.max_wordpieces
        )
        scores = queries @ blocks.T
        ranks = (scores > scores.diagonal()[:, None]).sum(dim=1) + 1
        return {
            "held_out_accuracy": float((ranks == 1).float().mean()),
            "held_out_mrr": float((1.0 / ranks.float()).mean()),
        }

    def save(self, where: Path) -> None:
        from tour_pyserini.encoders import EncoderSpec, encoder_identity
        from tour_pyserini.encoders.pairing import write_pair
        from tour_pyserini.training.encoder_io import save_encoder

        def sha(directory: Path) -> str:
            return encoder_identity(EncoderSpec.resolve(str(directory)))["weights_sha256"]

        if self.tied:
            save_encoder(self.query_model, self.tokenizer, where, self.spec)
            write_pair(where, str(self.output), sha(where))
            return
        document = save_encoder(self.block_model, self.tokenizer, where / "document", self.spec)
        save_encoder(self.query_model, self.tokenizer, where / "query", self.spec)
        write_pair(where / "query", str(self.output / "document"), sha(document))


def train(collection: str, output: Path, init: str, config: IctConfig, *, tied: bool) -> dict:
    """Train from ``init`` on ``collection``'s blocks; writes ``output`` and returns the report (training.json)."""
    from tour_pyserini.index.corpus import corpus_file, read_jsonl_corpus
    from tour_pyserini.training.ict import corpus_blocks, draw_example, usable
    from tour_pyserini.training.loop import LoopSettings, Trainer

    config.check()  # the command line checked its flags already; a library caller gets the same rules
    rng = random.Random(config.seed)  # the held-out blocks, then the training stream
    task = IctTask(init, config, Path(output), tied=tied)
    task.blocks = corpus_blocks(read_jsonl_corpus(corpus_file(collection)), task.tokenizer, config.max_wordpieces)
    pool = usable(task.blocks)
    rng.shuffle(pool)
    n_held = min(config.held_out, len(pool) // 10)
    if n_held < 2 or len(pool) - n_held < config.batch_size:
        raise UserError(
            f"{collection}: {len(pool)} blocks of two or more sentences are too few for batches "
            f"of {config.batch_size} and a held-out slice"
        )
    held_rng = random.Random(config.seed + 1)  # the same held-out examples for every checkpoint
    task.held = [draw_example(task.blocks, i, held_rng, config.mask_rate) for i in pool[:n_held]]
    train_pool = pool[n_held:]
    log.info(f"{len(task.blocks)} blocks ({len(train_pool)} for training, {n_held} held out)")
    about = {
        "config": asdict(config),
        "init": init,
        "collection": str(collection),
        "tied": tied,
        "blocks": len(task.blocks),
        "train_blocks": len(train_pool),
        "held_out_examples": n_held,
        "examples_seen": config.steps * config.batch_size,
    }
    # step 0 (the initial encoder) stays the choice unless training beats it on held-out examples
    return Trainer(task, LoopSettings.of(config), rng=rng).fit(train_pool, output, about)
