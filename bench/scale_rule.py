"""TOUR on an unnormalised encoder, with and without the scale rule (``--similarity-scale norms|fixed``).

The unnormalised encoder is the bundled MiniLM without its L2 normalisation (mean pooling, inner products;
``make bench-scale-rule`` builds its indexes and runs this), beside the same MiniLM normalised. For each, it runs the
dense search and TOUR-hard / TOUR-soft with the BM25 teacher at the passage preset on SciFact (nDCG@10,
R@100) and at the odqa preset on nq-oracle (Acc@1, Acc@20), on training queries (where a rule may be
chosen) and on test queries (reported once). The rule works if TOUR's gain over its own dense search is
about the same for the unnormalised encoder as for the normalised one.

Writes runs/bench-scale-rule.json.
Usage: python bench/scale_rule.py [--queries 300]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

COLLECTIONS = {
    "scifact": {
        "unit": "indexes/scifact.minilm",
        "raw": "indexes/scifact.minilm-unnorm",
        "preset": "passage",
        "depth": 20,
        "topics": {"train": "collections/scifact/topics.train.tsv", "test": "collections/scifact/topics.test.tsv"},
        "qrels": {"train": "qrels/scifact.train.txt", "test": "qrels/scifact.test.txt"},
    },
    "nq-oracle": {
        "unit": "indexes/nq-oracle.minilm",
        "raw": "indexes/nq-oracle.minilm-unnorm",
        "preset": "odqa",
        "depth": 10,
        "topics": {
            "train": "collections/nq-oracle/topics.train.jsonl",
            "test": "collections/nq-oracle/topics.test.jsonl",
        },
    },
}


def judge_for(collection: dict, split: str, topics, docstore):
    from tour_pyserini.eval.answers import AnswerJudge, AnswerMatcher
    from tour_pyserini.eval.judge import QrelsJudge
    from tour_pyserini.files import read_qrels

    if "qrels" in collection:
        qrels = read_qrels(collection["qrels"][split])
        return QrelsJudge({q: qrels[q] for q in (t.qid for t in topics) if q in qrels}, ["nDCG@10", "R@100"])
    return AnswerJudge(topics, AnswerMatcher(docstore), (1, 20))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=300, help="the first N queries of each split")
    ap.add_argument("--output", default="runs/bench-scale-rule.json")
    args = ap.parse_args()

    from tour_pyserini.files import read_topics
    from tour_pyserini.index.faiss_index import read_vectors
    from tour_pyserini.rewriters import Identity, get_rewriter
    from tour_pyserini.search import TourSearcher
    from tour_pyserini.teachers import TeacherContext, get_teacher

    rows = []
    for name, collection in COLLECTIONS.items():
        for encoder in ("unit", "raw"):
            index = collection[encoder]
            searcher = TourSearcher.from_index(index)
            vectors, _ = read_vectors(index)
            teacher = get_teacher("bm25", TeacherContext(index_dir=index))
            for split, path in collection["topics"].items():
                topics = read_topics(path)[: args.queries]
                judge = judge_for(collection, split, topics, searcher.docstore)
                qids, texts = [t.qid for t in topics], [t.text for t in topics]
                queries = searcher.encode(texts)
                settings = [("dense", None)] + [
                    (r, rule)
                    for r in ("tour-hard", "tour-soft")
                    for rule in (("norms", "fixed") if encoder == "raw" else ("norms",))
                ]
                for rewriter_name, rule in settings:
                    rewriter = (
                        Identity()
                        if rule is None
                        else get_rewriter(
                            rewriter_name,
                            teacher=teacher,
                            preset=collection["preset"],
                            depth=collection["depth"],
                            similarity_scale=rule,
                        )
                    )
                    start = time.perf_counter()
                    results = []
                    for i in range(0, len(topics), 64):
                        results += searcher.retrieve_vectors(
                            texts[i : i + 64], qids[i : i + 64], queries[i : i + 64], 100, rewriter=rewriter
                        )
                    seconds = (time.perf_counter() - start) / len(topics)
                    per_query = judge.per_query({r.qid: {h.docid: h.score for h in r.hits} for r in results})
                    metrics = {m: float(np.mean(list(v.values()))) for m, v in per_query.items()}
                    row = {
                        "collection": name,
                        "split": split,
                        "encoder": encoder,
                        "rewriter": rewriter_name,
                        "similarity_scale": rule,
                        "metrics": metrics,
                        "seconds_per_query": seconds,
                        "query_norm_median": float(np.median(np.linalg.norm(queries, axis=1))),
                        "document_norm_median": float(np.median(np.linalg.norm(vectors, axis=1))),
                    }
                    rows.append(row)
                    print(
                        f"{name} {split} {encoder} {rewriter_name} {rule or ''}: "
                        + " ".join(f"{m} {v:.4f}" for m, v in metrics.items()),
                        flush=True,
                    )
    report = {
        "queries": args.queries,
        "teacher": "bm25",
        "rows": rows,
        "command": f"python bench/scale_rule.py --queries {args.queries}",
    }
    Path(args.output).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
