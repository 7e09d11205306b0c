"""Seconds per ``train-reranker`` step with another collection's questions: residual similarities of the
extra lists from the extra index's stored vectors, or encoded from their texts at every step.

One step as ``make teachers``' SciFact recipe with ``--extra-topics`` takes it: 8 SciFact training lists
and 4 nq-oracle training lists of 1 positive + 7 hard negatives each, at 256 tokens, bf16 where the CPU
has it. Each way is a training run of its own (a ``ListwiseTask`` stepped by the training loop), both
seeded alike and given the same examples, the encoded way's extra examples with their similarities
cleared: the draws do not depend on the similarities, so both ways train on the same lists, taking turns
in alternating order, for ``--steps`` steps (the first is a warm-up and is not counted).
Writes runs/bench-reranker-step.json (``--output``).
Usage: python bench/reranker_step.py [--steps 4] [--output runs/bench-reranker-step.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import time
from pathlib import Path

from tour_pyserini.encoders import bundled_model_dir
from tour_pyserini.files import read_qrels, read_topics
from tour_pyserini.index.layout import IndexMeta
from tour_pyserini.search import TourSearcher
from tour_pyserini.search.bm25 import Bm25Searcher
from tour_pyserini.teachers.dense import DenseTeacher
from tour_pyserini.training.loop import Trainer
from tour_pyserini.training.reranker import ListwiseTask, TrainConfig, mine_examples, question_examples

MAIN, EXTRA = "indexes/scifact.minilm", "indexes/nq-oracle.minilm"
WAYS = ("stored vectors", "encoded each step")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--output", default="runs/bench-reranker-step.json")
    args = ap.parse_args()
    if args.steps < 2:
        ap.error("--steps must be at least 2: the first is a warm-up")
    config = TrainConfig(seed=13)
    searcher = TourSearcher.from_index(MAIN)
    topics = read_topics("collections/scifact/topics.train.tsv")[: config.queries_per_step * args.steps]
    examples, _, _ = mine_examples(
        searcher,
        Bm25Searcher.from_index("indexes/scifact.bm25"),
        topics,
        read_qrels("qrels/scifact.train.txt"),
        depth=config.hard_depth,
    )
    encoder = IndexMeta.read(MAIN).encoder
    extra = question_examples(
        EXTRA,
        read_topics("collections/nq-oracle/topics.train.jsonl"),
        None,
        config.extra_per_step * args.steps,
        depth=config.hard_depth,
        rng=random.Random(config.seed + 1),
        encoder=encoder,
    )
    if not all(ex.similarities for ex in extra):
        raise SystemExit(f"{EXTRA} does not record {MAIN}'s encoder: its lists would be encoded both ways")
    dense, trainers = DenseTeacher.of(MAIN), {}
    for way in WAYS:
        task = ListwiseTask(str(bundled_model_dir()), searcher.docstore, dense, config, encoder=encoder)
        task.extra = extra if way == WAYS[0] else [dataclasses.replace(ex, similarities={}) for ex in extra]
        trainers[way] = Trainer(task, config.loop(len(examples)))
    seconds = {way: [] for way in WAYS}
    size = config.queries_per_step
    for i in range(args.steps):
        for way in WAYS[:: 1 if i % 2 else -1]:
            trainers[way].run.step = i + 1  # which of the task's extra examples the step reads
            start = time.perf_counter()
            trainers[way].step(examples[size * i : size * i + size])
            seconds[way].append(time.perf_counter() - start)
            print(f"step {i}: {way} {seconds[way][-1]:.1f} s", flush=True)
    mean = {way: statistics.mean(s[1:]) for way, s in seconds.items()}
    result = {
        "steps": args.steps,
        "bf16": trainers[WAYS[0]].run.bf16,
        "seconds_per_step": seconds,
        "mean_after_warmup": mean,
        "speedup": mean["encoded each step"] / mean["stored vectors"],
    }
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"stored vectors {mean['stored vectors']:.2f} s/step, encoded {mean['encoded each step']:.2f} s/step: "
        f"{result['speedup']:.2f}x"
    )


if __name__ == "__main__":
    main()
