"""Seconds per ``train-reranker`` step with another collection's questions: residual similarities of the
extra lists from the extra index's stored vectors, or encoded from their texts at every step.

One step as ``make teachers``' SciFact recipe with ``--extra-topics`` takes it: 8 SciFact training lists
and 4 nq-oracle training lists of 1 positive + 7 hard negatives each, at 256 tokens, bf16 where the CPU
has it. The same lists go through both ways, in alternating order, for ``--steps`` steps (the first is a
warm-up and is not counted). Writes runs/bench-reranker-step.json.
Usage: python bench/reranker_step.py [--steps 4]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import statistics
import time
from pathlib import Path

from tour_pyserini.data import read_qrels, read_topics
from tour_pyserini.encoders import bundled_model_dir
from tour_pyserini.index.layout import IndexMeta
from tour_pyserini.search import TourSearcher
from tour_pyserini.search.bm25 import Bm25Searcher
from tour_pyserini.teachers.dense import DenseTeacher
from tour_pyserini.training.examples import draw_lists
from tour_pyserini.training.reranker import ListwiseTrainer, TrainConfig, mine_examples, question_examples

MAIN, EXTRA = "indexes/scifact.minilm", "indexes/nq-oracle.minilm"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args()
    config = TrainConfig(seed=13)
    searcher = TourSearcher.from_index(MAIN)
    topics = read_topics("collections/scifact/topics.train.tsv")[: 8 * args.steps]
    examples, _, _ = mine_examples(searcher, Bm25Searcher.from_index("indexes/scifact.bm25"), topics,
                                   read_qrels("qrels/scifact.train.txt"), depth=config.hard_depth)  # fmt: skip
    encoder = IndexMeta.read(MAIN).encoder
    extra = question_examples(EXTRA, read_topics("collections/nq-oracle/topics.train.jsonl"), None,
                              config.extra_per_step * args.steps, depth=config.hard_depth, rng=random.Random(14),
                              encoder=encoder)  # fmt: skip
    trainer = ListwiseTrainer(str(bundled_model_dir()), searcher.docstore, DenseTeacher.of(MAIN), config,
                              steps=100, encoder=encoder)  # fmt: skip
    rng, seconds = random.Random(13), {"stored vectors": [], "encoded each step": []}
    n = config.extra_per_step
    for i in range(args.steps):
        lists = draw_lists(examples[8 * i : 8 * i + 8], config.negatives, rng)
        lists += draw_lists(extra[n * i : n * i + n], config.negatives, rng)
        for way in list(seconds)[:: 1 if i % 2 else -1]:
            used = lists if way == "stored vectors" else [dataclasses.replace(x, similarities={}) for x in lists]
            start = time.perf_counter()
            trainer.step(used)
            seconds[way].append(time.perf_counter() - start)
            print(f"step {i}: {way} {seconds[way][-1]:.1f} s", flush=True)
    mean = {way: statistics.mean(s[1:]) for way, s in seconds.items()}
    result = {"steps": args.steps, "bf16": trainer.bf16, "seconds_per_step": seconds, "mean_after_warmup": mean,
              "speedup": mean["encoded each step"] / mean["stored vectors"]}  # fmt: skip
    Path("runs/bench-reranker-step.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"stored vectors {mean['stored vectors']:.2f} s/step, encoded {mean['encoded each step']:.2f} s/step: "
          f"{result['speedup']:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
