"""TOUR against its baselines on SciFact test, with the real BM25 teacher (and the oracle, labelled).

Systems: base dense (MiniLM), BM25, Rocchio, rerank@{10,20,40,100}, tour-hard/soft@{10,20,100} (the
passage preset: lr 0.2, T 1, lambda 1, with k varied). Reports nDCG@10, R@100, seconds per query and
teacher calls per query. Oracle-teacher rows (relevance from qrels: an upper bound, never a system)
show the mechanism: TOUR can raise R@100, re-ranking at k = 100 cannot.

Writes runs/scifact.<system>.trec, runs/bench-tour-quality.md and runs/bench-tour-quality.json.
Usage: python bench/tour_quality.py [--index indexes/scifact.minilm]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from wrapper_overhead import ensure_indexes

METRICS = ["nDCG@10", "R@100"]


def systems(bm25, oracle):
    from tour_pyserini.rewriters import Identity
    from tour_pyserini.rewriters.prf import Rocchio
    from tour_pyserini.rewriters.rerank import Rerank
    from tour_pyserini.rewriters.tour import TourHard, TourSoft

    yield "dense", "-", Identity()
    yield "rocchio", "-", Rocchio()
    for teacher_name, teacher in (("bm25", bm25), ("oracle", oracle)):
        depths = (10, 20, 40, 100) if teacher_name == "bm25" else (100,)
        for k in depths:
            yield f"rerank@{k}", teacher_name, Rerank(teacher, k=k)
        for cls in (TourHard, TourSoft):
            for k in (10, 20, 100) if teacher_name == "bm25" else (100,):
                yield f"{cls.name}@{k}", teacher_name, cls(teacher, preset="passage", k=k)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", default="indexes/scifact.minilm")
    ap.add_argument("--bm25-index", default="indexes/scifact.bm25")
    ap.add_argument("--collection", default="collections/scifact")
    ap.add_argument("--topics", default="collections/scifact/topics.test.tsv")
    ap.add_argument("--qrels", default="qrels/scifact.test.txt")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--output", default="runs/bench-tour-quality")
    args = ap.parse_args()

    ensure_indexes(args.collection, args.index, args.bm25_index)

    from tour_pyserini.data import read_qrels, read_topics
    from tour_pyserini.eval import evaluate
    from tour_pyserini.runs import read_run, write_run
    from tour_pyserini.search import Bm25Searcher, TourSearcher
    from tour_pyserini.teachers import TeacherContext, get_teacher

    topics, qrels = read_topics(args.topics), read_qrels(args.qrels)
    texts, qids = [t.text for t in topics], [t.qid for t in topics]
    searcher = TourSearcher.from_index(args.index)
    bm25 = get_teacher("bm25", TeacherContext(index_dir=args.index))
    oracle = get_teacher(f"oracle:{args.qrels}")

    def measure(name, teacher, retrieve):
        retrieve(texts[:4], qids[:4])  # warm-up (JVM compilation, caches)
        start, results = time.perf_counter(), []
        for i in range(0, len(qids), args.batch_size):
            results += retrieve(texts[i : i + args.batch_size], qids[i : i + args.batch_size])
        seconds = (time.perf_counter() - start) / len(qids)
        hits = [(r.qid, [h for h in r.hits if h.docid != r.qid]) for r in results]  # BEIR: drop the query
        run_path = Path("runs") / f"scifact.{name.replace('@', '-')}{'.' + teacher if teacher != '-' else ''}.trec"
        write_run(run_path, hits, tag=f"{name}.{teacher}" if teacher != "-" else name)
        run = read_run(run_path)  # evaluate the file: its scores break ties in our rank order
        row = {
            "collection": "scifact-test",
            "system": name,
            "teacher": teacher,
            "metrics": evaluate(qrels, run, METRICS).means,
            "seconds_per_query": seconds,
            "teacher_calls_per_query": sum(r.trace.teacher_calls for r in results) / len(results),
            "run": str(run_path),
        }
        print(f"{name:14s} {teacher:7s} " + " ".join(f"{m} {v:.4f}" for m, v in row["metrics"].items())
              + f"  {seconds * 1000:7.2f} ms/q  {row['teacher_calls_per_query']:6.1f} calls/q", flush=True)  # fmt: skip
        return row

    bm25_searcher = Bm25Searcher.from_index(args.bm25_index)
    rows = [measure("bm25", "-", lambda t, q: bm25_searcher.retrieve(t, q, 1000))]
    for name, teacher, rewriter in systems(bm25, oracle):
        searcher.rewriter = rewriter
        rows.append(measure(name, teacher, lambda t, q: searcher.retrieve(t, q, 1000)))

    Path(f"{args.output}.json").write_text(json.dumps(rows, indent=2) + "\n")
    lines = [
        "# TOUR on SciFact test (300 queries), bundled MiniLM retriever",
        "",
        "Produced by `python bench/tour_quality.py` (`make bench`). Teacher `oracle` reads the qrels: an upper",
        "bound that shows the mechanism, never a result. Seconds per query include query encoding.",
        "",
        "| system | teacher | nDCG@10 | R@100 | ms/query | teacher calls/query |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        m = r["metrics"]
        lines.append(f"| {r['system']} | {r['teacher']} | {m['nDCG@10']:.4f} | {m['R@100']:.4f} | "
                     f"{r['seconds_per_query'] * 1000:.1f} | {r['teacher_calls_per_query']:.1f} |")  # fmt: skip
    Path(f"{args.output}.md").write_text("\n".join(lines) + "\n")
    plot(rows, f"{args.output}.png")
    print(f"written to {args.output}.md, .json and .png")


def plot(rows: list[dict], path: str) -> None:
    """Quality against teacher budget for rerank and TOUR as k varies (bm25 teacher), the paper's Figure 2 axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    base = next(r for r in rows if r["system"] == "dense")
    for ax, metric in zip(axes, METRICS):
        for family, marker in (("rerank", "o"), ("tour-hard", "s"), ("tour-soft", "^")):
            points = sorted(
                (r["teacher_calls_per_query"], r["metrics"][metric], r["system"].split("@")[1])
                for r in rows
                if r["teacher"] == "bm25" and r["system"].startswith(family + "@")
            )
            ax.plot([p[0] for p in points], [p[1] for p in points], marker=marker, label=family)
            for x, y, k in points:
                ax.annotate(f"k={k}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
        ax.axhline(base["metrics"][metric], color="grey", linestyle="--", label="dense (no teacher)")
        ax.set_xscale("log")
        ax.set_xlabel("teacher calls per query (bm25 teacher)")
        ax.set_ylabel(metric)
        ax.set_title(f"SciFact test: {metric}")
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
