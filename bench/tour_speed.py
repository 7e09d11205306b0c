"""How fast are the rewriters? Three ratios, each measured side by side in one run.

1. The TOUR update itself (pseudo labels, loss gradient, clipping, SGD step; no teacher, no search)
   per query-iteration at k = 100, d = 768, on one core: target under 2 ms.
2. Batched TOUR (batch 32) against one query at a time, same queries, bm25 teacher: target >= 3x
   throughput (one Faiss search and one teacher call per iteration for the whole batch).
3. Our ``--rewriter rocchio`` CLI against ``python -m pyserini.search.faiss --prf-method rocchio`` on the
   same work: target ratio <= 1.1.

Writes runs/bench-tour-speed.json. Usage: python bench/tour_speed.py [--index indexes/scifact.minilm]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from wrapper_overhead import compare_rankings, ensure_indexes, timed_run


def update_cost_ms(k: int = 100, d: int = 768, repeats: int = 2000) -> dict:
    """Milliseconds per TourHard/TourSoft update step on random unit vectors, single-threaded."""
    from threadpoolctl import threadpool_limits

    from tour_pyserini.rewriters.tour import TourHard, TourSoft
    from tour_pyserini.rewriters.updates import clip_by_norm, sgd_step

    rng = np.random.default_rng(0)
    C = rng.standard_normal((k, d))
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    q = C[:5].mean(axis=0)
    scores = rng.standard_normal(k)
    out = {}
    with threadpool_limits(1):
        for cls in (TourHard, TourSoft):
            rewriter = cls(teacher=None, depth=k)
            buf = None
            start = time.perf_counter()
            for _ in range(repeats):
                step = rewriter.step(q, C.astype(np.float64), scores)
                _, buf = sgd_step(q, clip_by_norm(step.grad, 1.0), buf, 0.2, 0.99, 0.01)
            out[cls.name] = (time.perf_counter() - start) / repeats * 1000
    return out


def batched_vs_sequential(index: str, topics: str, n_queries: int, batch: int) -> dict:
    from tour_pyserini.data import read_topics
    from tour_pyserini.rewriters.tour import TourHard
    from tour_pyserini.search import TourSearcher
    from tour_pyserini.teachers import TeacherContext, get_teacher

    teacher = get_teacher("bm25", TeacherContext(index_dir=index))
    searcher = TourSearcher.from_index(index)
    rewriter = TourHard(teacher, preset="passage")
    queries = read_topics(topics)[:n_queries]
    texts, qids = [q.text for q in queries], [q.qid for q in queries]
    vectors = searcher.encode(texts)  # encode once: compare the rewriting loop alone

    def run(size: int) -> float:
        start = time.perf_counter()
        for i in range(0, len(qids), size):
            searcher.retrieve_vectors(qids[i : i + size], texts[i : i + size], vectors[i : i + size], 1000,
                                      rewriter=rewriter)  # fmt: skip
        return time.perf_counter() - start

    run(batch)  # warm-up: the JVM compiles Lucene's scoring code on first use
    one, batched = [], []
    for i in range(4):
        pair = [(one, 1), (batched, batch)]
        for times, size in pair if i % 2 else pair[::-1]:
            times.append(run(size))
    return {
        "queries": len(qids),
        "batch_size": batch,
        "one_at_a_time_qps": len(qids) / min(one),
        "batched_qps": len(qids) / min(batched),
        "speedup": min(one) / min(batched),
        "teacher_share_of_time": teacher_share(searcher, rewriter, qids, texts, vectors),
    }


def teacher_share(searcher, rewriter, qids, texts, vectors) -> float:
    """Fraction of TOUR's time spent in the teacher, from the traces of one batched pass."""
    results = searcher.retrieve_vectors(qids, texts, vectors, 1000, rewriter=rewriter)
    total = sum(r.trace.total_seconds for r in results)
    return sum(r.trace.seconds["teacher"] for r in results) / total


def rocchio_vs_pyserini(index: str, topics: str, repeats: int) -> dict:
    from tour_pyserini.encoders import bundled_model_dir

    py = sys.executable
    common = ["--index", index, "--topics", topics, "--hits", "1000", "--batch-size", "64", "--prf-depth", "3"]
    with tempfile.TemporaryDirectory() as tmp:
        ours_out, theirs_out = Path(tmp) / "ours.trec", Path(tmp) / "pyserini.trec"
        ours_cmd = [py, "-m", "tour_pyserini.search", *common, "--rewriter", "rocchio", "--output", str(ours_out),
                    "--no-resume"]  # fmt: skip
        theirs_cmd = [py, "-m", "tour_pyserini.run_pyserini", "pyserini.search.faiss", *common, "--prf-method",
                      "rocchio", "--encoder", str(bundled_model_dir()), "--encoder-class", "auto", "--pooling",
                      "mean", "--l2-norm", "--output", str(theirs_out)]  # fmt: skip
        ours_t, theirs_t = [], []
        for i in range(repeats):
            pair = [(ours_t, ours_cmd), (theirs_t, theirs_cmd)]
            for times, cmd in pair if i % 2 else pair[::-1]:
                times.append(timed_run(cmd))
        rankings = compare_rankings(ours_out, theirs_out)
    return {
        "ours_s": statistics.median(ours_t),
        "pyserini_s": statistics.median(theirs_t),
        "ratio": statistics.median(ours_t) / statistics.median(theirs_t),
        "rankings": rankings,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", default="indexes/scifact.minilm")
    ap.add_argument("--bm25-index", default="indexes/scifact.bm25")
    ap.add_argument("--collection", default="collections/scifact")
    ap.add_argument("--topics", default="collections/scifact/topics.test.tsv")
    ap.add_argument("--queries", type=int, default=128, help="queries for the batched-vs-sequential test")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--output", default="runs/bench-tour-speed.json")
    args = ap.parse_args()

    ensure_indexes(args.collection, args.index, args.bm25_index)
    report = {
        "update_ms_per_query_iteration_k100_d768": update_cost_ms(),
        "batched_vs_one_at_a_time_bm25_teacher": batched_vs_sequential(args.index, args.topics, args.queries, 32),
        "rocchio_cli_vs_pyserini": rocchio_vs_pyserini(args.index, args.topics, args.repeats),
    }
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    upd, bat, roc = report.values()
    print(f"TOUR update, k=100 d=768, 1 core: hard {upd['tour-hard']:.3f} ms, soft {upd['tour-soft']:.3f} ms "
          "per query-iteration (target < 2 ms)")  # fmt: skip
    print(f"batched (32) vs one at a time, tour-hard + bm25: {bat['batched_qps']:.1f} vs "
          f"{bat['one_at_a_time_qps']:.1f} queries/s = {bat['speedup']:.2f}x (target >= 3x); the teacher takes "
          f"{bat['teacher_share_of_time']:.0%} of the time")  # fmt: skip
    print(f"rocchio CLI: ours {roc['ours_s']:.2f} s, Pyserini {roc['pyserini_s']:.2f} s, ratio {roc['ratio']:.3f} "
          f"(target <= 1.1); rankings {roc['rankings']}")  # fmt: skip
    print(f"written to {args.output}")


if __name__ == "__main__":
    main()
