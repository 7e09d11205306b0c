"""Weakly supervised question-encoder fine-tuning from answer strings.

ORQA's "early update" (Lee et al., ACL 2019; equations in docs/algorithms.md): the block encoder is
frozen and its vectors are read from the dense index; for each training question the current question
encoder retrieves the top ``--top-c`` blocks, P(b|q) is the softmax of their scores (/ ``--temperature``),
and the loss is -log of the mass on the blocks that contain an answer string (DPR's matching, as
``eval --answers`` uses). A question with no such block among its top-c is skipped for that step; the
fraction skipped is logged. Only the question encoder learns. A seeded dev split of the *training*
questions selects the checkpoint by Acc@1; the saved encoder is paired with the index's document encoder.

    python -m tour_pyserini train-qa --index indexes/nq-oracle.minilm \\
        --topics collections/nq-oracle/topics.train.jsonl --output models/orqa/nq-oracle-qa
    python -m tour_pyserini.search --index indexes/nq-oracle.minilm --encoder models/orqa/nq-oracle-qa ...
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.numbers import check_fractions, check_positive


@dataclass
class QaConfig:
    steps: int = 300
    batch_size: int = 32  # questions per step
    lr: float = 2e-5
    warmup: float = 0.1
    top_c: int = 5000  # capped at the number of indexed blocks
    temperature: float = 0.05  # scores are cosines: softmax(cos / 0.05)
    query_max_length: int = 64
    dev_fraction: float = 0.1
    eval_every: int = 50
    seed: int = 13

    def check(self) -> None:
        check_positive(self, ("steps", "batch_size", "lr", "top_c", "temperature", "query_max_length", "eval_every"))
        check_fractions(self, ("dev_fraction",), ("warmup",))


def dev_accuracy(model, tokenizer, spec, questions, answer_rows, blocks, config: QaConfig) -> dict:
    """Acc@1 and Acc@20 of the dev questions, retrieving over every indexed block."""
    import torch

    from tour_pyserini.training.encoder_io import encode

    model.eval()
    with torch.inference_mode():
        vectors = torch.cat(
            [
                encode(
                    model,
                    tokenizer,
                    questions[i : i + 64],
                    max_length=config.query_max_length,
                    pooling=spec.pooling,
                    l2_norm=spec.l2_norm,
                )
                for i in range(0, len(questions), 64)
            ]
        )
        top = (vectors @ blocks.T).topk(min(20, len(blocks)), dim=1).indices.tolist()
    model.train()
    hit1 = [bool(set(t[:1]) & set(rows)) for t, rows in zip(top, answer_rows)]
    hit20 = [bool(set(t) & set(rows)) for t, rows in zip(top, answer_rows)]
    return {"acc@1": sum(hit1) / len(hit1), "acc@20": sum(hit20) / len(hit20)}


def train(index_dir: Path, topics, output: Path, init: str, config: QaConfig, *, bf16: bool) -> dict:
    import torch
    from tqdm import tqdm

    from tour_pyserini.data.staging import staged_directory
    from tour_pyserini.encoders import EncoderSpec
    from tour_pyserini.encoders.pairing import check_pair, index_document_sha, write_pair
    from tour_pyserini.eval.answers import AnswerMatcher
    from tour_pyserini.index.docstore import DocStore
    from tour_pyserini.index.faiss_index import read_vectors
    from tour_pyserini.index.layout import DOCSTORE_FILE, IndexMeta
    from tour_pyserini.training.answers import answer_bearing, check_trainable
    from tour_pyserini.training.encoder_io import encode, load_encoder, save_encoder
    from tour_pyserini.training.losses import early_update_loss
    from tour_pyserini.training.schedule import autocast, optimizer

    config.check()  # the command line checked its flags already; a library caller gets the same rules
    meta = IndexMeta.read(index_dir)
    check_pair(EncoderSpec.resolve(init), meta.encoder, index_dir)
    vectors, docids = read_vectors(index_dir)
    blocks = torch.from_numpy(vectors)
    top_c = min(config.top_c, len(docids))
    start = time.perf_counter()
    rows = answer_bearing(topics, docids, AnswerMatcher(DocStore(index_dir / DOCSTORE_FILE)))
    never = sum(not r for r in rows)
    print(f"{len(topics)} questions; {never} have no answer-bearing block in the whole index "
          f"({time.perf_counter() - start:.0f} s to match answers)", flush=True)  # fmt: skip
    order = list(range(len(topics)))
    rng = random.Random(config.seed)
    rng.shuffle(order)
    n_dev = max(1, round(len(order) * config.dev_fraction))
    dev, train_set = order[:n_dev], order[n_dev:]
    if len(train_set) < 1:
        raise UserError("too few training questions for a dev split")
    check_trainable(rows, train_set, index_dir)
    torch.manual_seed(config.seed)
    spec, tokenizer, model = load_encoder(init)
    if model.config.hidden_size != blocks.shape[1]:
        raise UserError(f"encoder {init} makes {model.config.hidden_size}-d vectors but index {index_dir} holds "
                        f"{blocks.shape[1]}-d vectors")  # fmt: skip
    dev_q, dev_rows = [topics[i].text for i in dev], [rows[i] for i in dev]
    opt, scheduler = optimizer(model.parameters(), lr=config.lr, steps=config.steps, warmup_fraction=config.warmup)
    built_by = index_document_sha(meta.encoder)

    def save(where: Path) -> None:
        save_encoder(model, tokenizer, where, spec)
        write_pair(where, meta.encoder["name"], built_by)

    history = [{"step": 0, **dev_accuracy(model, tokenizer, spec, dev_q, dev_rows, blocks, config)}]
    best, best_step, queue, losses, skipped, seen = history[0]["acc@1"], 0, [], [], 0, 0
    print(f"dev ({n_dev} training questions held out) Acc@1 before training {best:.4f}", flush=True)
    with staged_directory(output, "the model") as tmp:
        save(tmp)
        bar = tqdm(range(1, config.steps + 1), desc="early update", unit="step")
        for step in bar:
            if len(queue) < config.batch_size:
                queue = queue + rng.sample(train_set, len(train_set))
            batch, queue = queue[: config.batch_size], queue[config.batch_size :]
            with autocast(bf16):
                q = encode(model, tokenizer, [topics[i].text for i in batch], max_length=config.query_max_length,
                           pooling=spec.pooling, l2_norm=spec.l2_norm)  # fmt: skip
            scores = q.float() @ blocks.T
            top = scores.detach().topk(top_c, dim=1).indices  # the current encoder's top-c: the early update
            positives = torch.zeros_like(scores, dtype=torch.bool)
            for r, i in enumerate(batch):
                positives[r, rows[i]] = True
            loss, n_skipped = early_update_loss(scores.gather(1, top), positives.gather(1, top), config.temperature)
            skipped, seen = skipped + n_skipped, seen + len(batch)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            scheduler.step()
            losses.append(float(loss.detach()))
            bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}", skipped=f"{skipped / seen:.3f}")
            if step % config.eval_every == 0 or step == config.steps:
                scores_dev = dev_accuracy(model, tokenizer, spec, dev_q, dev_rows, blocks, config)
                history.append({"step": step, "train_loss": sum(losses) / len(losses),
                                "skipped_fraction": skipped / seen, **scores_dev})  # fmt: skip
                bar.write(f"step {step}: dev Acc@1 {scores_dev['acc@1']:.4f}, Acc@20 {scores_dev['acc@20']:.4f}, "
                          f"skipped {skipped / seen:.3f} of questions")  # fmt: skip
                losses, skipped, seen = [], 0, 0
                if scores_dev["acc@1"] > best:
                    best, best_step = scores_dev["acc@1"], step
                    save(tmp)
        bar.close()
        report = {
            "config": asdict(config), "init": init, "index": str(index_dir), "bf16": bf16, "top_c": top_c,
            "train_questions": len(train_set), "dev_questions": n_dev,
            "dev_qids": sorted(topics[i].qid for i in dev), "questions_without_answer_block": never,
            "history": history, "best_step": best_step, "best_dev_acc@1": best,
            "seconds": round(time.perf_counter() - start, 1),
        }  # fmt: skip
        (tmp / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
