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

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tour_pyserini.encoders import EncoderSpec
from tour_pyserini.errors import UserError
from tour_pyserini.numbers import check_fractions, check_positive


@dataclass
class IctConfig:
    steps: int = 300
    batch_size: int = 32  # examples per step; the other 31 blocks are each query's negatives
    lr: float = 2e-5
    warmup: float = 0.1  # fraction of the steps
    mask_rate: float = 0.9
    max_wordpieces: int = 288
    query_max_length: int = 64
    temperature: float = 0.05  # scores are cosines: softmax(cos / 0.05)
    held_out: int = 256  # held-out examples scored against each other's blocks for selection
    eval_every: int = 50
    seed: int = 13

    def check(self) -> None:
        check_positive(self, ("steps", "lr", "max_wordpieces", "query_max_length", "temperature", "held_out",
                              "eval_every"))  # fmt: skip
        if self.batch_size < 2:
            raise UserError(f"--batch-size must be at least 2 (in-batch negatives), got {self.batch_size}")
        check_fractions(self, closed_names=("mask_rate", "warmup"))


def held_out_accuracy(query_model, block_model, tokenizer, spec: EncoderSpec, examples, config: IctConfig) -> dict:
    """Accuracy@1 and MRR of each held-out query among all held-out blocks (their own evidence texts)."""
    import torch

    from tour_pyserini.training.encoder_io import encode

    query_model.eval(), block_model.eval()
    with torch.inference_mode():
        vectors = []
        for model, texts, length in ((query_model, [e.query for e in examples], config.query_max_length),
                                     (block_model, [e.evidence for e in examples], config.max_wordpieces)):  # fmt: skip
            parts = [encode(model, tokenizer, texts[i : i + 64], max_length=length, pooling=spec.pooling,
                            l2_norm=spec.l2_norm) for i in range(0, len(texts), 64)]  # fmt: skip
            vectors.append(torch.cat(parts))
        scores = vectors[0] @ vectors[1].T
        ranks = (scores > scores.diagonal()[:, None]).sum(dim=1) + 1
    query_model.train(), block_model.train()
    return {"accuracy": float((ranks == 1).float().mean()), "mrr": float((1.0 / ranks.float()).mean())}


def train(collection: str, output: Path, init: str, config: IctConfig, *, tied: bool, bf16: bool) -> dict:
    import torch
    from tqdm import tqdm

    from tour_pyserini.data.staging import staged_directory
    from tour_pyserini.encoders import encoder_identity
    from tour_pyserini.encoders.pairing import write_pair
    from tour_pyserini.index.corpus import corpus_file, read_jsonl_corpus
    from tour_pyserini.training.encoder_io import encode, load_encoder, save_encoder
    from tour_pyserini.training.ict import corpus_blocks, draw_example, usable
    from tour_pyserini.training.losses import in_batch_nll
    from tour_pyserini.training.schedule import autocast, optimizer

    config.check()  # the command line checked its flags already; a library caller gets the same rules
    rng = random.Random(config.seed)
    torch.manual_seed(config.seed)
    spec, tokenizer, query_model = load_encoder(init)
    block_model = query_model if tied else load_encoder(init)[2]
    blocks = corpus_blocks(read_jsonl_corpus(corpus_file(collection)), tokenizer, config.max_wordpieces)
    pool = usable(blocks)
    rng.shuffle(pool)
    n_held = min(config.held_out, len(pool) // 10)
    if n_held < 2 or len(pool) - n_held < config.batch_size:
        raise UserError(f"{collection}: {len(pool)} blocks of two or more sentences are too few for batches "
                        f"of {config.batch_size} and a held-out slice")  # fmt: skip
    held_rng = random.Random(config.seed + 1)  # the same held-out examples for every checkpoint
    held = [draw_example(blocks, i, held_rng, config.mask_rate) for i in pool[:n_held]]
    train_pool = pool[n_held:]
    params = list(query_model.parameters()) + ([] if tied else list(block_model.parameters()))
    opt, scheduler = optimizer(params, lr=config.lr, steps=config.steps, warmup_fraction=config.warmup)

    def save(where: Path) -> None:
        if tied:
            save_encoder(query_model, tokenizer, where, spec)
            write_pair(where, str(output), encoder_identity(EncoderSpec.resolve(str(where)))["weights_sha256"])
            return
        document = save_encoder(block_model, tokenizer, where / "document", spec)
        save_encoder(query_model, tokenizer, where / "query", spec)
        write_pair(where / "query", str(output / "document"),
                   encoder_identity(EncoderSpec.resolve(str(document)))["weights_sha256"])  # fmt: skip

    history = [{"step": 0, **held_out_accuracy(query_model, block_model, tokenizer, spec, held, config)}]
    best, best_step, order, losses = history[0]["accuracy"], 0, [], []
    print(f"{len(blocks)} blocks ({len(train_pool)} for training, {n_held} held out); "
          f"held-out accuracy before training {best:.4f}", flush=True)  # fmt: skip
    start = time.perf_counter()
    with staged_directory(output, "the model") as tmp:
        save(tmp)  # step 0 (the initial encoder) stays the choice unless training beats it on held-out examples
        bar = tqdm(range(1, config.steps + 1), desc="ict", unit="step")
        for step in bar:
            if len(order) < config.batch_size:
                order = order + rng.sample(train_pool, len(train_pool))
            batch, order = order[: config.batch_size], order[config.batch_size :]
            examples = [draw_example(blocks, i, rng, config.mask_rate) for i in batch]
            with autocast(bf16):
                queries = encode(
                    query_model,
                    tokenizer,
                    [e.query for e in examples],
                    max_length=config.query_max_length,
                    pooling=spec.pooling,
                    l2_norm=spec.l2_norm,
                )
                evidence = encode(
                    block_model,
                    tokenizer,
                    [e.evidence for e in examples],
                    max_length=config.max_wordpieces,
                    pooling=spec.pooling,
                    l2_norm=spec.l2_norm,
                )
            loss = in_batch_nll(queries.float(), evidence.float(), config.temperature)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            scheduler.step()
            losses.append(float(loss.detach()))
            bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
            if step % config.eval_every == 0 or step == config.steps:
                scores = held_out_accuracy(query_model, block_model, tokenizer, spec, held, config)
                history.append({"step": step, "train_loss": sum(losses) / len(losses), **scores})
                losses = []
                bar.write(f"step {step}: held-out accuracy {scores['accuracy']:.4f}, MRR {scores['mrr']:.4f}")
                if scores["accuracy"] > best:
                    best, best_step = scores["accuracy"], step
                    save(tmp)
        bar.close()
        report = {
            "config": asdict(config), "init": init, "collection": str(collection), "tied": tied, "bf16": bf16,
            "blocks": len(blocks), "train_blocks": len(train_pool), "held_out_examples": n_held,
            "history": history, "best_step": best_step, "best_held_out_accuracy": best,
            "seconds": round(time.perf_counter() - start, 1),
            "examples_seen": config.steps * config.batch_size,
        }  # fmt: skip
        (tmp / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
