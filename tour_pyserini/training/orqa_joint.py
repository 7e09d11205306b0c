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
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.numbers import check_fractions, check_positive


@dataclass
class OrqaConfig:
    steps: int = 60
    batch_size: int = 8  # questions per step
    k: int = 5  # blocks the reader reads (ORQA: 5)
    top_c: int = 5000  # blocks of the early update (capped at the index size)
    lr: float = 1e-5
    warmup: float = 0.1
    temperature: float = 0.05
    query_max_length: int = 64
    max_length: int = 192
    stride: int = 48
    max_answer_length: int = 10
    dev_fraction: float = 0.1
    eval_every: int = 30
    seed: int = 13

    def check(self) -> None:
        check_positive(self, ("steps", "batch_size", "k", "top_c", "lr", "temperature", "query_max_length",
                              "max_length", "stride", "max_answer_length", "eval_every"))  # fmt: skip
        check_fractions(self, ("dev_fraction",), ("warmup",))
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


def _question_windows(tokenizer, question, texts, config: OrqaConfig):
    from tour_pyserini.reader.windows import make_windows

    return make_windows(tokenizer, [question] * len(texts), texts, max_length=config.max_length, stride=config.stride)


def train(index_dir: Path, topics, output: Path, init: str, reader_init: str, config: OrqaConfig, *,
          bf16: bool) -> dict:  # fmt: skip
    """Train from the question encoder ``init`` and the reader ``reader_init`` on ``topics`` (with answers)."""
    import torch
    from tqdm import tqdm
    from transformers import AutoModelForQuestionAnswering, AutoTokenizer

    from tour_pyserini.data.staging import staged_directory
    from tour_pyserini.encoders import EncoderSpec
    from tour_pyserini.encoders.pairing import check_pair, index_document_sha, write_pair
    from tour_pyserini.eval.answers import AnswerMatcher
    from tour_pyserini.eval.exact_match import evaluate_predictions
    from tour_pyserini.index.docstore import DocStore
    from tour_pyserini.index.faiss_index import read_vectors
    from tour_pyserini.index.layout import DOCSTORE_FILE, IndexMeta
    from tour_pyserini.reader import Passage, Question, Reader, ReaderOptions
    from tour_pyserini.reader.windows import collate
    from tour_pyserini.training.answers import answer_bearing, check_trainable
    from tour_pyserini.training.encoder_io import encode, load_encoder, save_encoder
    from tour_pyserini.training.losses import early_update_loss
    from tour_pyserini.training.reader import occurrences
    from tour_pyserini.training.schedule import autocast, optimizer
    from tour_pyserini.training.splits import grouped_split

    config.check()
    start_time = time.perf_counter()
    meta = IndexMeta.read(index_dir)
    check_pair(EncoderSpec.resolve(init), meta.encoder, index_dir)
    vectors, docids = read_vectors(index_dir)
    blocks = torch.from_numpy(vectors)
    docstore = DocStore(index_dir / DOCSTORE_FILE)
    texts = [d.contents for d in docstore.get(list(docids))]
    top_c, k = min(config.top_c, len(docids)), min(config.k, len(docids))
    rows = answer_bearing(topics, docids, AnswerMatcher(docstore))
    train_idx, dev_idx = grouped_split(list(range(len(topics))), {i: set(r) for i, r in enumerate(rows)},
                                       dev_fraction=config.dev_fraction, seed=config.seed)  # fmt: skip
    if not train_idx:
        raise UserError("too few training questions for a dev split")
    check_trainable(rows, train_idx, index_dir)
    torch.manual_seed(config.seed)
    rng = random.Random(config.seed)
    spec, q_tokenizer, encoder = load_encoder(init)
    r_tokenizer = AutoTokenizer.from_pretrained(reader_init)
    reader = AutoModelForQuestionAnswering.from_pretrained(reader_init, dtype=torch.float32)
    reader.train()
    params = list(encoder.parameters()) + list(reader.parameters())
    opt, scheduler = optimizer(params, lr=config.lr, steps=config.steps, warmup_fraction=config.warmup)

    def retrieve(questions: list[str]):
        with autocast(bf16):
            q = encode(encoder, q_tokenizer, questions, max_length=config.query_max_length, pooling=spec.pooling,
                       l2_norm=spec.l2_norm)  # fmt: skip
        return q.float() @ blocks.T

    def dev_em() -> float:
        encoder.eval()
        with torch.inference_mode():
            scores = torch.cat([retrieve([topics[i].text for i in dev_idx[j : j + 64]])
                                for j in range(0, len(dev_idx), 64)])  # fmt: skip
        encoder.train()
        top = scores.topk(k, dim=1)
        questions = [Question(topics[i].qid, topics[i].text, tuple(Passage(docids[b], texts[b], float(s))
                     for b, s in zip(top.indices[r].tolist(), top.values[r].tolist())))
                     for r, i in enumerate(dev_idx)]  # fmt: skip
        options = ReaderOptions(k=k, max_length=config.max_length, stride=config.stride,
                                max_answer_length=config.max_answer_length,
                                retrieval_weight=1 / config.temperature)  # fmt: skip
        read = Reader("", options, model=reader, tokenizer=r_tokenizer)
        predictions = {p.qid: p for j in range(0, len(questions), 16) for p in read.read(questions[j : j + 16])}
        return evaluate_predictions(predictions, [topics[i] for i in dev_idx]).means["EM"]

    history = [{"step": 0, "dev_em": dev_em()}]
    best, best_step = history[0]["dev_em"], 0
    best_state = (copy.deepcopy(encoder.state_dict()), copy.deepcopy(reader.state_dict()))
    print(f"{len(train_idx)} training and {len(dev_idx)} dev questions; dev EM before training {best:.4f}", flush=True)
    queue, losses, skipped_early, skipped_full, seen = [], [], 0, 0, 0
    with staged_directory(output, "the model") as tmp:
        bar = tqdm(range(1, config.steps + 1), desc="orqa joint", unit="step")
        for step in bar:
            if len(queue) < config.batch_size:
                queue = queue + rng.sample(train_idx, len(train_idx))
            batch, queue = queue[: config.batch_size], queue[config.batch_size :]
            cosines = retrieve([topics[i].text for i in batch])
            scores = cosines / config.temperature  # S_retr
            top = cosines.detach().topk(top_c, dim=1).indices
            positives = torch.zeros_like(scores, dtype=torch.bool)
            for r, i in enumerate(batch):
                positives[r, rows[i]] = True
            early, n_skipped = early_update_loss(cosines.gather(1, top), positives.gather(1, top), config.temperature)
            windows, owners = [], []
            for r, i in enumerate(batch):
                beam = top[r, :k].tolist()
                ws = _question_windows(r_tokenizer, topics[i].text, [texts[b] for b in beam], config)
                windows += ws
                owners += [(r, beam[w.pair]) for w in ws]
            inputs = {key: torch.from_numpy(v) for key, v in collate(windows, r_tokenizer.pad_token_id or 0).items()}
            with autocast(bf16):
                out = reader(**inputs)
            start_logits, end_logits = out.start_logits.float(), out.end_logits.float()
            context = torch.from_numpy(collate_context(windows, start_logits.shape[1]))
            full_losses = []
            for r, i in enumerate(batch):
                mine = [w for w, (owner, _) in enumerate(owners) if owner == r]
                answer_ids = [a for a in (r_tokenizer(x, add_special_tokens=False)["input_ids"]
                              for x in topics[i].answers) if a]  # fmt: skip
                targets = torch.zeros((len(mine), start_logits.shape[1], start_logits.shape[1]), dtype=torch.bool)
                for row, w in enumerate(mine):
                    for s, e in occurrences(windows[w].input_ids, windows[w].context, answer_ids):
                        targets[row, s, e] = True
                retrieval = torch.stack([scores[r, owners[w][1]] for w in mine])
                loss, matched = full_update_loss(retrieval, start_logits[mine], end_logits[mine], context[mine],
                                                 targets, config.max_answer_length)  # fmt: skip
                if matched:
                    full_losses.append(loss)
            skipped_early, skipped_full = skipped_early + n_skipped, skipped_full + len(batch) - len(full_losses)
            seen += len(batch)
            loss = early + (torch.stack(full_losses).mean() if full_losses else 0.0)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            scheduler.step()
            losses.append(float(loss.detach()))
            bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
            if step % config.eval_every == 0 or step == config.steps:
                em = dev_em()
                history.append({"step": step, "train_loss": sum(losses) / len(losses), "dev_em": em,
                                "skipped_early": skipped_early / seen, "skipped_full": skipped_full / seen,
                                "seconds": round(time.perf_counter() - start_time, 1)})  # fmt: skip
                bar.write(f"step {step}: dev EM {em:.4f} (train loss {history[-1]['train_loss']:.3f})")
                losses, skipped_early, skipped_full, seen = [], 0, 0, 0
                if em > best:
                    best, best_step = em, step
                    best_state = (copy.deepcopy(encoder.state_dict()), copy.deepcopy(reader.state_dict()))
        bar.close()
        encoder.load_state_dict(best_state[0])
        reader.load_state_dict(best_state[1])
        save_encoder(encoder, q_tokenizer, tmp / "query", spec)
        write_pair(tmp / "query", meta.encoder["name"], index_document_sha(meta.encoder))
        copy.deepcopy(reader).half().save_pretrained(tmp / "reader")
        r_tokenizer.save_pretrained(tmp / "reader")
        report = {
            "config": asdict(config), "init": init, "reader_init": reader_init, "index": str(index_dir),
            "bf16": bf16, "top_c": top_c, "train_questions": len(train_idx), "dev_questions": len(dev_idx),
            "dev_qids": sorted(topics[i].qid for i in dev_idx), "history": history, "best_step": best_step,
            "best_dev_em": best, "retrieval_weight": 1 / config.temperature,
            "seconds": round(time.perf_counter() - start_time, 1),
        }  # fmt: skip
        (tmp / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def collate_context(windows, width: int):
    """The windows' passage-token masks, padded to ``width`` with False."""
    import numpy as np

    mask = np.zeros((len(windows), width), dtype=bool)
    for row, w in enumerate(windows):
        mask[row, : len(w.context)] = w.context
    return mask
