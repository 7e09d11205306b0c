"""Build collections/nq-oracle: a small real open-domain QA passage collection from NQ-open.

Pools the gold Wikipedia passage of each of the 2,655 questions in ``nq-open-oracle.jsonl.gz``,
deduplicates them on (title, text) and numbers them in first-appearance order. Question ids are the
line numbers (0-based) of the questions in ``NQ-open.dev.jsonl`` (= DPR's NQ test set), so they match
the NQ test topics. Questions are split with a fixed seed into train and test (1,000 questions), so a
teacher can be trained on train only.

Writes (rerunnable; byte-identical for the same input):
  collections/nq-oracle/corpus.jsonl         {"id", "title", "text", "contents": title + "\\n" + text}
  collections/nq-oracle/topics.train.jsonl   {"qid", "question", "answers"} per line
  collections/nq-oracle/topics.test.jsonl

Usage: python scripts/prepare_nq_oracle.py [--source ../shared/data/nq-open] [--root .]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

SEED = 20230713
TEST_SIZE = 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=Path("../shared/data/nq-open"))
    ap.add_argument("--root", type=Path, default=Path("."))
    args = ap.parse_args()

    with open(args.source / "NQ-open.dev.jsonl", encoding="utf-8") as f:
        qid_of = {json.loads(line)["question"]: str(i) for i, line in enumerate(f)}
    with gzip.open(args.source / "nq-open-oracle.jsonl.gz", "rt", encoding="utf-8") as f:
        oracle = [json.loads(line) for line in f]

    passage_ids: dict[tuple[str, str], str] = {}
    questions = []
    for item in oracle:
        gold = item["ctxs"][0]
        key = (gold["title"].strip(), gold["text"].strip())
        passage_ids.setdefault(key, str(len(passage_ids)))
        questions.append({"qid": qid_of[item["question"]], "question": item["question"], "answers": item["answers"]})

    out = args.root / "collections" / "nq-oracle"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for (title, text), pid in passage_ids.items():
            doc = {"id": pid, "title": title, "text": text, "contents": f"{title}\n{text}"}
            f.write(json.dumps(doc, ensure_ascii=False) + "\n")

    order = list(range(len(questions)))
    random.Random(SEED).shuffle(order)
    test_idx = set(order[:TEST_SIZE])
    for split, keep in (("train", lambda i: i not in test_idx), ("test", lambda i: i in test_idx)):
        with open(out / f"topics.{split}.jsonl", "w", encoding="utf-8") as f:
            for i, q in enumerate(questions):
                if keep(i):
                    f.write(json.dumps(q, ensure_ascii=False) + "\n")
    print(f"{len(passage_ids)} passages, {len(questions) - TEST_SIZE} train and {TEST_SIZE} test questions")


if __name__ == "__main__":
    main()
