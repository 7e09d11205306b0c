"""python -m tour_pyserini.train_reranker: train a cross-encoder teacher (the TOUR paper's recipe, section 3.4).

From a local encoder (default: the bundled MiniLM, given a new one-logit classification head), on
*training* queries only: candidates are the dense retriever's top ``--candidates``, positives come from
qrels (or, without ``--qrels``, are the candidates that contain one of the topic's answer strings, DPR's
has-answer rule), and every epoch pairs each positive with a freshly sampled negative from the query's candidates.
The loss is pairwise, -log(e^{h+} / (e^{h+} + e^{h-})). A seeded held-out part of the training queries
picks the best epoch by pairwise accuracy; that checkpoint is saved where ``cross-encoder:PATH`` loads it.

    python -m tour_pyserini.train_reranker --index indexes/scifact.minilm \\
        --topics collections/scifact/topics.train.tsv --qrels qrels/scifact.train.txt \\
        --exclude-texts-from collections/scifact/topics.test.tsv --output models/scifact-ce
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tour_pyserini.cli_util import run_cli
from tour_pyserini.errors import UserError


@dataclass
class TrainConfig:
    epochs: int = 3
    batch_size: int = 16  # triplets per step
    lr: float = 2e-5
    max_length: int = 256
    candidates: int = 100
    val_fraction: float = 0.1
    seed: int = 13


@dataclass
class Example:
    qid: str
    query: str
    positives: list[str]  # docids
    negatives: list[str]  # retrieved candidates that are not positives


def build_examples(rankings: dict[str, list], topics, qrels, docstore=None) -> list[Example]:
    """One example per topic with a relevant document and at least one retrieved non-relevant one.

    ``rankings`` maps each qid to its retrieved candidates (hits with a ``docid``). With
    ``qrels=None`` the positives are the candidates that contain an answer string (read from ``docstore``).
    """
    from tour_pyserini.eval.answers import AnswerMatcher, answer_qrels

    if qrels is None:
        run = {qid: {h.docid: -rank for rank, h in enumerate(hits)} for qid, hits in rankings.items()}
        qrels = answer_qrels(run, topics, AnswerMatcher(docstore), max(map(len, rankings.values()), default=0))
    examples = []
    for t in topics:
        positives = [d for d, rel in qrels.get(t.qid, {}).items() if rel > 0]
        negatives = [h.docid for h in rankings.get(t.qid, []) if h.docid not in set(positives)]
        if positives and negatives:
            examples.append(Example(t.qid, t.text, positives, negatives))
    return examples


def triplets(examples: list[Example], rng: random.Random) -> list[tuple[str, str, str]]:
    """(query, positive docid, negative docid), one per positive, with a fresh negative each call."""
    return [(ex.query, pos, rng.choice(ex.negatives)) for ex in examples for pos in ex.positives]


class PairwiseTrainer:
    """Fine-tunes a sequence-classification model so that h(query, positive) > h(query, negative)."""

    def __init__(self, base_model: str, docstore, config: TrainConfig):
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        torch.manual_seed(config.seed)
        self.config = config
        self.docstore = docstore
        self.tokenizer = AutoTokenizer.from_pretrained(base_model)
        self.model = AutoModelForSequenceClassification.from_pretrained(base_model, num_labels=1, dtype=torch.float32)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=config.lr)

    def _scores(self, queries: list[str], docids: list[str]):
        from tour_pyserini.teachers.cross_encoder import pair_inputs, pair_text

        texts = [pair_text(doc) for doc in self.docstore.get(docids)]
        return self.model(**pair_inputs(self.tokenizer, queries, texts, self.config.max_length)).logits[:, 0]

    def train_epoch(self, batch: list[tuple[str, str, str]], rng: random.Random) -> float:
        import torch
        from tqdm import tqdm

        self.model.train()
        rng.shuffle(batch)
        losses = []
        size = self.config.batch_size
        for start in tqdm(range(0, len(batch), size), desc="train", unit="step", leave=False):
            chunk = batch[start : start + size]
            queries = [q for q, _, _ in chunk]
            pos = self._scores(queries, [p for _, p, _ in chunk])
            neg = self._scores(queries, [n for _, _, n in chunk])
            loss = torch.nn.functional.softplus(neg - pos).mean()  # = -log(e^{h+} / (e^{h+} + e^{h-}))
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            losses.append(float(loss.detach()))
        return sum(losses) / max(len(losses), 1)

    def pairwise_accuracy(self, batch: list[tuple[str, str, str]]) -> float:
        import torch

        self.model.eval()
        correct = 0
        with torch.inference_mode():
            for start in range(0, len(batch), 64):
                chunk = batch[start : start + 64]
                queries = [q for q, _, _ in chunk]
                pos = self._scores(queries, [p for _, p, _ in chunk])
                neg = self._scores(queries, [n for _, _, n in chunk])
                correct += int((pos > neg).sum())
        return correct / max(len(batch), 1)

    def save(self, output: Path) -> None:
        save_compact(self.model, self.tokenizer, output, self.config.max_length)


def save_compact(model, tokenizer, output: Path, max_length: int) -> None:
    """Save in float16 (half the size; teachers load it back as float32) with the length it was trained at.

    The tokenizer's ``model_max_length`` becomes ``max_length``, so ``cross-encoder:PATH`` reads as many
    tokens as training did unless told otherwise.
    """
    import copy

    copy.deepcopy(model).half().save_pretrained(output)
    tokenizer.model_max_length = max_length
    tokenizer.save_pretrained(output)


def train(index: str, topics, qrels, output: str | Path, base_model: str, config: TrainConfig) -> dict:
    """Train and save the best checkpoint at ``output``; returns the training report (also in training.json)."""
    from tour_pyserini.search import TourSearcher

    output = Path(output)
    searcher = TourSearcher.from_index(index)
    if searcher.docstore is None:
        raise UserError(f"index {index} has no document store; rebuild it with python -m tour_pyserini.index")
    rng = random.Random(config.seed)
    rankings = searcher.batch_search([t.text for t in topics], [t.qid for t in topics], hits=config.candidates)
    examples = build_examples(rankings, topics, qrels, searcher.docstore)
    if len(examples) < 2:
        raise UserError("fewer than two training queries with a relevant document and a retrieved negative")
    rng.shuffle(examples)
    n_val = max(1, round(len(examples) * config.val_fraction))
    val, train_set = examples[:n_val], examples[n_val:]
    val_triplets = triplets(val, random.Random(config.seed + 1))  # fixed: epochs are compared on the same pairs
    trainer = PairwiseTrainer(base_model, searcher.docstore, config)
    history = [{"epoch": 0, "val_pairwise_accuracy": trainer.pairwise_accuracy(val_triplets)}]
    best = -1.0
    start = time.perf_counter()
    for epoch in range(1, config.epochs + 1):
        loss = trainer.train_epoch(triplets(train_set, rng), rng)
        accuracy = trainer.pairwise_accuracy(val_triplets)
        history.append({"epoch": epoch, "train_loss": loss, "val_pairwise_accuracy": accuracy})
        print(f"epoch {epoch}: train loss {loss:.4f}, held-out pairwise accuracy {accuracy:.4f}", flush=True)
        if accuracy > best:
            best = accuracy
            trainer.save(output)
    report = {
        "config": asdict(config),
        "base_model": base_model,
        "index": str(index),
        "train_queries": len(train_set),
        "val_queries": len(val),
        "val_qids": sorted(ex.qid for ex in val),  # never trained on: safe for tuning what uses this teacher
        "history": history,
        "best_val_pairwise_accuracy": best,
        # the float16 model as saved, read back as teachers read it
        "saved_val_pairwise_accuracy": PairwiseTrainer(str(output), searcher.docstore, config).pairwise_accuracy(
            val_triplets
        ),
        "seconds": round(time.perf_counter() - start, 1),
    }
    (output / "training.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tour_pyserini.train_reranker", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--index", required=True, help="dense index: candidates and document texts")
    ap.add_argument("--topics", required=True, help="training topics")
    ap.add_argument(
        "--qrels",
        help="qrels of the training topics (default: positives are the candidates "
        "containing one of the topic's answers)",
    )
    ap.add_argument("--exclude-texts-from", metavar="TOPICS", help="drop training topics whose text is in these")
    ap.add_argument("--output", required=True, help="model directory to write")
    ap.add_argument("--base-model", help="local HuggingFace encoder directory (default: the bundled MiniLM)")
    defaults = TrainConfig()
    for name, value in asdict(defaults).items():
        ap.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    return ap


def main(argv: list[str] | None = None) -> None:
    from tour_pyserini.data import read_qrels, read_topics
    from tour_pyserini.encoders import bundled_model_dir

    args = parser().parse_args(argv)
    topics = read_topics(args.topics)
    if args.exclude_texts_from:
        held_out = {t.text for t in read_topics(args.exclude_texts_from)}
        topics = [t for t in topics if t.text not in held_out]
    config = TrainConfig(**{k: getattr(args, k) for k in asdict(TrainConfig())})
    if args.qrels is None and not any(t.answers for t in topics):
        raise UserError(f"{args.topics} has no answers; give --qrels")
    report = train(args.index, topics, read_qrels(args.qrels) if args.qrels else None, args.output,
                   args.base_model or str(bundled_model_dir()), config)  # fmt: skip
    print(f"best held-out pairwise accuracy {report['best_val_pairwise_accuracy']:.4f}; model in {args.output} "
          f"(load it as cross-encoder:{args.output})")  # fmt: skip


if __name__ == "__main__":
    run_cli(main)
