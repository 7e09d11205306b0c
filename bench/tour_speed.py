"""How fast are the rewriters? Three ratios, each measured side by side in one run.

1. The TOUR update itself (pseudo labels, loss gradient, clipping, SGD step; no teacher, no search)
   per query-iteration at k = 100, d = 768, on one core: target under 2 ms.
2. Batched TOUR (batch 32) against one query at a time, same queries, bm25 teacher: target >= 3x
   throughput (one Faiss search and one teacher call per iteration for the whole batch).
3. Our ``--rewriter rocchio`` CLI against ``python -m pyserini.search.faiss --prf-method rocchio`` on the
   same work: target ratio <= 1.1.
4. The BM25 teacher per (query, candidate) pair: Anserini's per-pair ``computeQueryDocumentScore``
   against the vectorised teacher, on the full index: target >= 10x, scores equal within 1e-5.
5. TOUR with the BM25 teacher at batch sizes 1 to 64: seconds per query (wall clock and CPU), each
   batch size checked to give exactly the run of one query at a time; target >= 3x at 32. Once on
   queries encoded beforehand (the rewriting loop alone), once end to end (each batch's texts encoded
   with it, texts of one token length together); plotted, with the per-pair Anserini teacher for
   comparison, to runs/bench-tour-speed.png.
6. The search command's TOUR as users run it (``--rewriter tour-soft --teacher bm25 --depth 20 --hits 100``),
   end to end (texts encoded per batch), one query at a time against batches of 32, with the query
   encoder in float32 (the default) and in bfloat16 (``--encoder-precision bf16``): milliseconds per
   query, the share of each phase in the traced time (encode, search, teacher, update), and the sameness of the two
   runs; target >= 3x and <= 3 ms per query at batch 32.
7. Query encoding per batch size and precision against its floor, and bfloat16's quality bound
   (bench/query_encoding.py).

Writes runs/bench-tour-speed.json. Usage: python bench/tour_speed.py [--index indexes/scifact.minilm]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
from common import compare_rankings, ensure_indexes, split_files, timed_run
from query_encoding import print_report as print_encoding
from query_encoding import query_encoding

from tour_pyserini.files.sameness import diff_runs


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
                step = rewriter.step(q, C.astype(np.float64), scores, 1.0)
                _, buf = sgd_step(q, clip_by_norm(step.grad, 1.0), buf, 0.2, 0.99, 0.01)
            out[cls.name] = (time.perf_counter() - start) / repeats * 1000
    return out


class TourRun:
    """TOUR-hard (passage preset, 1000 hits) with one teacher over the first queries of a topics file, the
    queries encoded once, so that timings compare the rewriting loop alone."""

    def __init__(self, index: str, topics: str, n_queries: int, teacher_spec: str = "bm25"):
        from tour_pyserini.files import read_topics
        from tour_pyserini.rewriters.tour import TourHard
        from tour_pyserini.search import TourSearcher
        from tour_pyserini.teachers import TeacherContext, get_teacher

        self.searcher = TourSearcher.from_index(index)
        self.rewriter = TourHard(get_teacher(teacher_spec, TeacherContext(index_dir=index)), preset="passage")
        queries = read_topics(topics)[:n_queries]
        self.texts, self.qids = [q.text for q in queries], [q.qid for q in queries]
        self.vectors = self.searcher.encode(self.texts)

    def __call__(self, size: int, end_to_end: bool = False) -> list:
        """Every query's result, ``size`` queries per batch; ``end_to_end`` encodes each batch's texts too."""
        results = []
        for i in range(0, len(self.qids), size):
            batch = slice(i, i + size)
            if end_to_end:
                results += self.searcher.retrieve(self.texts[batch], self.qids[batch], 1000, rewriter=self.rewriter)
            else:
                results += self.searcher.retrieve_vectors(
                    self.texts[batch], self.qids[batch], self.vectors[batch], 1000, rewriter=self.rewriter
                )
        return results


def batched_vs_sequential(index: str, topics: str, n_queries: int, batch: int) -> dict:
    tour = TourRun(index, topics, n_queries)
    qids = tour.qids
    tour(batch)  # warm-up: the JVM compiles Lucene's scoring code on first use
    wall, _ = best_times({"one": partial(tour, 1), "batched": partial(tour, batch)}, repeats=4)
    return {
        "queries": len(qids),
        "batch_size": batch,
        "one_at_a_time_qps": len(qids) / wall["one"],
        "batched_qps": len(qids) / wall["batched"],
        "speedup": wall["one"] / wall["batched"],
        "teacher_share_of_time": teacher_share(tour),
    }


def teacher_share(tour: TourRun) -> float:
    """Fraction of TOUR's time spent in the teacher, from the traces of one batched pass."""
    results = tour(len(tour.qids))
    total = sum(r.trace.total_seconds for r in results)
    return sum(r.trace.seconds["teacher"] for r in results) / total


def best_times(ways: dict, repeats: int) -> tuple[dict, dict]:
    """The least wall-clock and the least CPU seconds of each way, run ``repeats`` times in alternating order.

    CPU time (of all the process's threads) leaves out the time a shared, oversubscribed machine keeps
    the process waiting for a core, which wall-clock time on such a machine is mostly made of. As in
    ``timeit``, the cyclic garbage collector is paused while a way runs: a full collection walks every
    live object (about 0.3 s with torch loaded) and lands in whichever run is current, not where the
    garbage was made.
    """
    wall: dict = {name: float("inf") for name in ways}
    cpu: dict = dict(wall)
    for i in range(repeats):
        for name in list(ways) if i % 2 else list(ways)[::-1]:
            gc.collect()
            gc.disable()
            start, start_cpu = time.perf_counter(), time.process_time()
            try:
                ways[name]()
            finally:
                gc.enable()
            wall[name] = min(wall[name], time.perf_counter() - start)
            cpu[name] = min(cpu[name], time.process_time() - start_cpu)
    return wall, cpu


def bm25_teacher_per_pair(bm25_index: str, topics: str, n_queries: int, depth: int = 100, repeats: int = 3) -> dict:
    """Microseconds per (query, candidate) pair: Anserini's per-pair BM25 against the vectorised teacher.

    The candidates are each query's BM25 top ``depth`` on the full index; the vectorised teacher scores
    them in one call for all queries (as batched TOUR asks) and in one call per query. Its scores must
    equal Anserini's: the largest difference over all pairs is reported.
    """
    from tour_pyserini.files import read_topics
    from tour_pyserini.search import Bm25Searcher
    from tour_pyserini.teachers import ScoreRequest
    from tour_pyserini.teachers.bm25 import AnseriniBm25Teacher, Bm25Teacher

    queries = read_topics(topics)[:n_queries]
    ranked = Bm25Searcher.from_index(bm25_index).retrieve([q.text for q in queries], [q.qid for q in queries], depth)
    requests = [ScoreRequest(q.qid, q.text, [h.docid for h in r.hits]) for q, r in zip(queries, ranked)]
    pairs = sum(len(r.docids) for r in requests)
    anserini, vectorised = AnseriniBm25Teacher(bm25_index), Bm25Teacher(bm25_index)
    ways = {
        "anserini": lambda: anserini.score(requests),
        "vectorised_one_call": lambda: vectorised.score(requests),
        "vectorised_call_per_query": lambda: [vectorised.score([r])[0] for r in requests],
    }
    scores = {name: np.concatenate(way()) for name, way in ways.items()}  # also the warm-up (JIT, caches)
    wall, cpu = best_times(ways, repeats)
    us, cpu_us = ({name: t / pairs * 1e6 for name, t in times.items()} for times in (wall, cpu))
    return {
        "pairs": pairs,
        "queries": len(requests),
        "us_per_pair": us,
        "cpu_us_per_pair": cpu_us,
        "speedup_one_call": us["anserini"] / us["vectorised_one_call"],
        "speedup_call_per_query": us["anserini"] / us["vectorised_call_per_query"],
        "cpu_speedup_one_call": cpu_us["anserini"] / cpu_us["vectorised_one_call"],
        "cpu_speedup_call_per_query": cpu_us["anserini"] / cpu_us["vectorised_call_per_query"],
        "max_abs_difference": max(float(np.abs(scores[n] - scores["anserini"]).max()) for n in ways),
    }


BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)


def tour_batch_sizes(
    index: str, topics: str, n_queries: int, teacher_spec: str = "bm25", repeats: int = 3, *, end_to_end: bool = False
) -> dict:
    """Seconds per query of TOUR (tour-hard, passage preset) at each batch size, and whether each batch size
    gives the run of one query at a time: the same iterations, teacher calls, cache hits and stop reasons,
    and the run bit for bit (``identical``) or by the sameness rule (``same``: scores within 1e-5, swaps only
    among near-ties; ``end_to_end`` encodes texts per batch, by length, so vectors differ by ~1e-7)."""
    run = TourRun(index, topics, n_queries, teacher_spec)
    qids = run.qids

    def steps(results: list) -> list:
        return [(r.trace.iterations, r.trace.teacher_calls, r.trace.cache_hits, r.trace.stop_reason) for r in results]

    def as_run(results: list) -> dict:
        return {r.qid: {h.docid: h.score for h in r.hits} for r in results}

    first = run(1, end_to_end)  # also the warm-up
    identical, same, score_difference = {}, {}, {}
    for size in BATCH_SIZES:
        results = run(size, end_to_end)
        diff = diff_runs(as_run(first), as_run(results))
        same[size] = diff.same and steps(results) == steps(first)
        identical[size] = same[size] and diff.identical == diff.queries
        score_difference[size] = diff.max_score_diff
    wall, cpu = best_times({size: partial(run, size, end_to_end) for size in BATCH_SIZES}, repeats)
    seconds, cpu_seconds = ({size: t / len(qids) for size, t in times.items()} for times in (wall, cpu))
    return {
        "teacher": teacher_spec,
        "end_to_end": end_to_end,
        "queries": len(qids),
        "seconds_per_query": seconds,
        "cpu_seconds_per_query": cpu_seconds,
        "speedup_vs_one_at_a_time": {size: seconds[1] / s for size, s in seconds.items()},
        "cpu_speedup_vs_one_at_a_time": {size: cpu_seconds[1] / s for size, s in cpu_seconds.items()},
        "identical_to_one_at_a_time": identical,
        "same_as_one_at_a_time": same,
        "max_score_difference_vs_one_at_a_time": score_difference,
    }


PHASES = ("encode", "search", "teacher", "update")


def tour_as_searched(
    index: str, topics: str, precision: str, repeats: int = 3, batch: int = 32, runtime: str = "torch"
) -> dict:
    """tour-soft, bm25 teacher, k 20, 100 hits, every topic, texts encoded per batch (by ``runtime`` at
    ``precision``): batch 1 against ``batch``."""
    from tour_pyserini.encoders.query import QueryEncoder
    from tour_pyserini.files import read_topics
    from tour_pyserini.index.query_side import query_encoder_spec
    from tour_pyserini.rewriters.tour import TourSoft
    from tour_pyserini.search import TourSearcher
    from tour_pyserini.teachers import TeacherContext, get_teacher

    encoder = QueryEncoder.build(query_encoder_spec(index, None), precision=precision, runtime=runtime)
    searcher = TourSearcher.from_index(index, encoder=encoder)
    rewriter = TourSoft(get_teacher("bm25", TeacherContext(index_dir=index)), preset="passage", depth=20)
    queries = read_topics(topics)
    texts, qids = [q.text for q in queries], [q.qid for q in queries]
    results: dict = {}

    def run(size: int) -> None:
        out = []
        for i in range(0, len(qids), size):
            out += searcher.retrieve(texts[i : i + size], qids[i : i + size], 100, rewriter=rewriter)
        results[size] = out

    run(batch)  # warm-up
    wall, _ = best_times({1: partial(run, 1), batch: partial(run, batch)}, repeats)
    ms = {size: t / len(qids) * 1000 for size, t in wall.items()}
    phases = {}
    for size, out in results.items():  # the traces of the last run of each size: each phase's share of them
        spent = {phase: sum(r.trace.seconds[phase] for r in out) for phase in PHASES}
        phases[size] = {phase: t / sum(spent.values()) for phase, t in spent.items()}
    diff = diff_runs(*({r.qid: {h.docid: h.score for h in r.hits} for r in results[size]} for size in (1, batch)))
    return {
        "runtime": runtime,
        "precision": precision,
        "queries": len(qids),
        "batch_size": batch,
        "ms_per_query": ms,
        "speedup": ms[1] / ms[batch],
        "share_of_time_by_phase": phases,
        "same_run": diff.same,
        "identical_queries": diff.identical,
        "max_score_difference": diff.max_score_diff,
    }


def plot_batch_sizes(curves: list[dict], path: Path) -> None:
    """Milliseconds per query against queries per batch, one wall-clock and one CPU line per teacher."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FormatStrFormatter

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for curve, color in zip(curves, ("C0", "C1", "C2", "C3")):
        for key, style, kind in (("seconds_per_query", "-", "wall clock"), ("cpu_seconds_per_query", "--", "CPU")):
            sizes, seconds = zip(*((int(size), s) for size, s in curve[key].items()))  # JSON keys are strings
            ax.plot(
                sizes,
                [s * 1000 for s in seconds],
                style,
                color=color,
                marker="o",
                label=f"{curve['teacher']} teacher{', encoding included' if curve.get('end_to_end') else ''}, "
                f"{kind} ({curve['queries']} queries)",
            )
    ax.set_xscale("log", base=2)
    ax.set_xticks(BATCH_SIZES, [str(s) for s in BATCH_SIZES])
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
    ax.set_xlabel("queries per batch")
    ax.set_ylabel("milliseconds per query")
    ax.set_title("TOUR (tour-hard, passage preset, 1000 hits) on SciFact test queries")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.15))
    fig.savefig(path, dpi=120, bbox_inches="tight")


def rocchio_vs_pyserini(index: str, topics: str, repeats: int) -> dict:
    from tour_pyserini.encoders import bundled_model_dir

    py = sys.executable
    common = ["--index", index, "--topics", topics, "--hits", "1000", "--batch-size", "64", "--prf-depth", "3"]
    with tempfile.TemporaryDirectory() as tmp:
        ours_out, theirs_out = Path(tmp) / "ours.trec", Path(tmp) / "pyserini.trec"
        ours_cmd = [
            py,
            "-m",
            "tour_pyserini.search",
            *common,
            "--rewriter",
            "rocchio",
            "--output",
            str(ours_out),
            "--no-resume",
        ]
        theirs_cmd = [
            py,
            "-m",
            "tour_pyserini",
            "run-pyserini",
            "pyserini.search.faiss",
            *common,
            "--prf-method",
            "rocchio",
            "--encoder",
            str(bundled_model_dir()),
            "--encoder-class",
            "auto",
            "--pooling",
            "mean",
            "--l2-norm",
            "--output",
            str(theirs_out),
        ]
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
    ap.add_argument("--topics", default=split_files("scifact").topics)
    ap.add_argument("--queries", type=int, default=128, help="queries for the batched-vs-sequential test")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--output", default="runs/bench-tour-speed.json")
    args = ap.parse_args()

    ensure_indexes(args.collection, args.index, args.bm25_index)
    report = {
        "update_ms_per_query_iteration_k100_d768": update_cost_ms(),
        "batched_vs_one_at_a_time_bm25_teacher": batched_vs_sequential(args.index, args.topics, args.queries, 32),
        "rocchio_cli_vs_pyserini": rocchio_vs_pyserini(args.index, args.topics, args.repeats),
        "bm25_teacher_per_pair": bm25_teacher_per_pair(args.bm25_index, args.topics, 32, repeats=args.repeats),
        "tour_batch_sizes": [
            tour_batch_sizes(args.index, args.topics, args.queries, "bm25", repeats=args.repeats + 2),
            tour_batch_sizes(args.index, args.topics, args.queries, "bm25", repeats=args.repeats, end_to_end=True),
            # the per-pair teacher is slow: fewer queries, one timed run per batch size
            tour_batch_sizes(args.index, args.topics, args.queries // 2, "bm25-anserini", repeats=1),
        ],
        "tour_as_searched": [tour_as_searched(args.index, args.topics, p, args.repeats) for p in ("fp32", "bf16")],
        "query_encoding": query_encoding(args.index),
    }
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    plot = Path(args.output).with_suffix(".png")
    plot_batch_sizes(report["tour_batch_sizes"], plot)
    upd, bat, roc, pair, (curve, e2e, _), searched, _ = report.values()
    print(
        f"TOUR update, k=100 d=768, 1 core: hard {upd['tour-hard']:.3f} ms, soft {upd['tour-soft']:.3f} ms "
        "per query-iteration (target < 2 ms)"
    )
    print(
        f"batched (32) vs one at a time, tour-hard + bm25: {bat['batched_qps']:.1f} vs "
        f"{bat['one_at_a_time_qps']:.1f} queries/s = {bat['speedup']:.2f}x (target >= 3x); the teacher takes "
        f"{bat['teacher_share_of_time']:.0%} of the time"
    )
    print(
        f"rocchio CLI: ours {roc['ours_s']:.2f} s, Pyserini {roc['pyserini_s']:.2f} s, ratio {roc['ratio']:.3f} "
        f"(target <= 1.1); rankings {roc['rankings']}"
    )
    print(
        f"bm25 teacher per pair: Anserini {pair['us_per_pair']['anserini']:.1f} us, vectorised "
        f"{pair['us_per_pair']['vectorised_one_call']:.2f} us in one call for {pair['queries']} queries "
        f"({pair['speedup_one_call']:.0f}x; CPU time {pair['cpu_speedup_one_call']:.0f}x), "
        f"{pair['us_per_pair']['vectorised_call_per_query']:.2f} us in one call per query "
        f"({pair['speedup_call_per_query']:.0f}x) (target >= 10x); largest |difference| "
        f"{pair['max_abs_difference']:.1e} over {pair['pairs']} pairs (target <= 1e-5)"
    )
    print(
        f"tour-hard + bm25, batch 32 vs 1: {curve['speedup_vs_one_at_a_time'][32]:.2f}x wall clock, "
        f"{curve['cpu_speedup_vs_one_at_a_time'][32]:.2f}x CPU time (target >= 3x); every batch size gives the run "
        f"of one query at a time bit for bit: {all(curve['identical_to_one_at_a_time'].values())}"
    )
    print(
        f"end to end (texts encoded per batch), batch 32 vs 1: {e2e['speedup_vs_one_at_a_time'][32]:.2f}x wall "
        f"clock, {e2e['cpu_speedup_vs_one_at_a_time'][32]:.2f}x CPU time (target >= 3x); the same run (up to ties "
        f"within 1e-5) and steps at every batch size: {all(e2e['same_as_one_at_a_time'].values())}, bit for bit: "
        f"{all(e2e['identical_to_one_at_a_time'].values())}, scores within "
        f"{max(e2e['max_score_difference_vs_one_at_a_time'].values()):.1e}"
    )
    for row in searched:
        phases = ", ".join(f"{k} {v:.0%}" for k, v in row["share_of_time_by_phase"][32].items())
        print(
            f"tour-soft --teacher bm25 --depth 20 --hits 100, encoder {row['precision']}: batch 1 "
            f"{row['ms_per_query'][1]:.2f} ms/query, batch 32 {row['ms_per_query'][32]:.2f} ms/query = "
            f"{row['speedup']:.2f}x (targets >= 3x, <= 3 ms); batch 32's time by phase: {phases}; the same "
            f"run: {row['same_run']} ({row['identical_queries']}/{row['queries']} queries identical, scores "
            f"within {row['max_score_difference']:.1e})"
        )
    print_encoding(report["query_encoding"])
    print(f"written to {args.output} and {plot}")


if __name__ == "__main__":
    main()
