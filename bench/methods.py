"""make bench-methods: every test-time method side by side on every shipped collection, at equal teacher budgets.

Collections: SciFact test (nDCG@10, R@100), nq-oracle test (DPR top-k accuracy) and Cranfield (nDCG@10, R@100),
each with its own MiniLM and BM25 index. Teacher-free methods run once: dense, Rocchio, average PRF and DART. With
each teacher (BM25 everywhere; the shipped cross-encoder and its ensemble where they were trained for the
collection) and each budget b of 10, 20 and 100 judgments per query: re-ranking of the top b, ReFIT, TOUR-hard and
TOUR-soft at k = b (the passage preset: T = 1, which may judge up to 2b; the calls are reported), and TTT-Embed's
query-scope state fitted on the teacher's scores of the base top b.

Settings are each method's defaults, chosen on training queries only, never on test: TOUR's passage preset is the
paper's (chosen there on its training data), ReFIT's and DART's were chosen on SciFact's training claims
(docs/algorithms.md), Rocchio and average PRF are Pyserini's, TTT-Embed's fitting defaults its paper's. None is tuned
on nq-oracle or Cranfield.

Per row: the metrics, the paired t-test against dense and against re-ranking at the same teacher and budget (p
values Holm-corrected over the whole table), milliseconds per query (measured end to end after encoding, which
every method shares, teacher included, one process, methods in turn, after one untimed pass of plain search and
one of re-ranking with each teacher) and teacher calls per query.
Writes runs/bench-methods.json, runs/bench-methods.md, runs/bench-methods-<collection>.png and the rows with
their per-query values, runs/bench-methods.per-query.json.gz; runs made apart (one teacher, one budget) become one
table, with one Holm family, through --merge.
Usage: python bench/methods.py [--collections scifact] [--teachers bm25] [--budgets 10 20] [--limit 50]
       python bench/methods.py --merge runs/a.per-query.json.gz runs/b.per-query.json.gz --output runs/x
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from common import ensure_indexes

HITS = 100
BUDGETS = (10, 20, 100)
WARM_UP_DEPTH = 10
COMMAND = "make bench-methods"
TEACHER_KINDS = ("bm25", "cross-encoder", "ensemble")


@dataclass(frozen=True)
class Collection:
    """A collection of the registry (its files and how it is judged) with what this table reports of it."""

    name: str
    metrics: tuple[str, ...]  # the measures the table shows, of those the collection's declaration scores
    teachers: tuple[str, ...]  # teacher specs that apply
    remove_query: bool = False  # BEIR: a document whose id is the query's id is not a result

    @property
    def index(self) -> str:
        return f"indexes/{self.name}.minilm"

    @property
    def bm25_index(self) -> str:
        return f"indexes/{self.name}.bm25"


COLLECTIONS = {
    "scifact": Collection(
        "scifact",
        ("nDCG@10", "R@100"),
        ("bm25", "cross-encoder:models/scifact-rce", "ensemble:models/scifact-rce/ensemble.json"),
        remove_query=True,
    ),
    "nq-oracle": Collection(
        "nq-oracle",
        ("Acc@1", "Acc@20", "Acc@100"),
        ("bm25", "cross-encoder:models/nq-oracle-ce", "ensemble:models/nq-oracle-ce/ensemble.json"),
    ),
    "cranfield": Collection("cranfield", ("nDCG@10", "R@100"), ("bm25",)),
}


class Bench:
    """One collection's test topics, encoded once; each method searched from the same vectors, in batches."""

    def __init__(self, col: Collection, batch_size: int, limit: int | None, repeats: int = 1):
        from tour_pyserini.eval import QrelsJudge
        from tour_pyserini.eval.answers import AnswerJudge, AnswerMatcher
        from tour_pyserini.files import read_qrels, read_topics
        from tour_pyserini.files.collections import find_collection
        from tour_pyserini.pipeline import Resources

        self.col, self.batch_size, self.repeats = col, batch_size, repeats
        self.resources = Resources()  # every method's pipeline shares the index, the query encoder and the teacher
        self.searcher = self.pipeline("none").searcher
        files = find_collection(col.name).split("test")
        self.topics_path = Path(files.topics).relative_to(Path.cwd())
        qrels = read_qrels(files.qrels) if files.qrels else None
        self.topics = [t for t in read_topics(files.topics) if qrels is None or t.qid in qrels][:limit]
        self.texts, self.qids = [t.text for t in self.topics], [t.qid for t in self.topics]
        self.vectors = self.searcher.encode(self.texts)
        if qrels is not None:
            self.judge = QrelsJudge(qrels, col.metrics, qids=self.qids)
        else:
            ks = [int(m.split("@")[1]) for m in col.metrics]
            self.judge = AnswerJudge(self.topics, AnswerMatcher(self.searcher.docstore), ks)
        self.rows: list[dict] = []

    def pipeline(self, rewriter: str, teacher: str | None = None, **options):
        """The search system of ``rewriter`` with its ``options`` (and ``teacher``), assembled by the composition
        root; the query encoder and cross-encoders through torch, as the rows were first measured."""
        from tour_pyserini.pipeline import SearchSpec, build, plan

        spec = SearchSpec(
            self.col.index,
            encoder_runtime="torch",
            rewriter=rewriter,
            rewriter_options=options,
            teacher=teacher,
            teacher_options=torch_runtime(teacher) if teacher else {},
        )
        return build(plan(spec, self.resources))

    def warm_up(self, rewriter) -> None:
        """One untimed pass of ``rewriter`` over the topics: the first pass also pays for Faiss's and the JVM's
        warm-up (page cache, JIT), which would otherwise be charged to whichever method ran first."""
        rewriter.start_run()
        for i in range(0, len(self.topics), self.batch_size):
            at = slice(i, i + self.batch_size)
            self.searcher.retrieve_vectors(self.texts[at], self.qids[at], self.vectors[at], HITS, rewriter=rewriter)

    def run(self, method: str, rewriter, teacher: str = "-", budget: int | None = None, command: str = COMMAND):
        """Search every topic with ``rewriter`` (DART carrying its buffer in topic order) and record the row; with
        ``repeats`` passes, the median pass's time (each pass starts the run afresh, so all give the same results)."""
        times = []
        for _ in range(self.repeats):
            rewriter.start_run()
            start, results = time.perf_counter(), []
            for i in range(0, len(self.topics), self.batch_size):
                at = slice(i, i + self.batch_size)
                results += self.searcher.retrieve_vectors(
                    self.texts[at], self.qids[at], self.vectors[at], HITS, rewriter=rewriter
                )
            times.append(time.perf_counter() - start)
        return self.record(method, teacher, budget, results, float(np.median(times)), command)

    def record(self, method: str, teacher: str, budget: int | None, results, seconds: float, command: str) -> dict:
        drop = self.col.remove_query
        run = {r.qid: {h.docid: h.score for h in r.hits if not (drop and h.docid == r.qid)} for r in results}
        per_query = self.judge.per_query(run)
        row = {
            "collection": self.col.name,
            "method": method,
            "teacher": teacher,
            "budget": budget,
            "metrics": {m: float(np.mean(list(v.values()))) for m, v in per_query.items()},
            "ms_per_query": 1000 * seconds / len(results),
            "teacher_calls_per_query": sum(r.trace.teacher_calls for r in results) / len(results),
            "command": command,
            "per_query": per_query,
        }
        self.rows.append(row)
        print(
            f"{self.col.name:9s} {method:10s} {teacher[:28]:28s} {budget or '-':>4} "
            + " ".join(f"{m} {v:.4f}" for m, v in row["metrics"].items())
            + f"  {row['ms_per_query']:8.1f} ms/q {row['teacher_calls_per_query']:6.1f} calls/q",
            flush=True,
        )
        return row

    def command(self, flags: str) -> str:
        col = self.col
        drop = " --remove-query" if col.remove_query else ""
        # the query encoder through torch, as TourSearcher.from_index opens it here
        return (
            f"python -m tour_pyserini.search --index {col.index} --topics {self.topics_path} --hits {HITS}{drop} "
            f"--encoder-runtime torch {flags} --output runs/methods/{col.name}.trec"
        )

    def ttt_query_scope(self, teacher, spec: str, budget: int) -> dict:
        """TTT-Embed's query-scope state, fitted on the teacher's scores of each query's base top ``budget``, then
        one search with unit(x + alpha v)."""
        from tour_pyserini.results import SearchResult, Trace
        from tour_pyserini.teachers import ScoreCache
        from tour_pyserini.ttt.fitting import RewardedQuery, fit_scope
        from tour_pyserini.ttt.objectives import FitConfig
        from tour_pyserini.ttt.state import State, shift_queries

        start, traces = time.perf_counter(), [Trace() for _ in self.qids]
        found = self.searcher.search_candidates(self.vectors, budget)
        scores = ScoreCache(teacher, self.searcher.docstore).score(
            self.qids, self.texts, [f.docids for f in found], traces, list(self.vectors), self.searcher.query_encoder
        )
        queries = [
            RewardedQuery(self.col.name, qid, x, f.vectors, s)
            for qid, x, f, s in zip(self.qids, self.vectors, found, scores)
            if not np.isnan(s).all()
        ]
        config = FitConfig()
        keys, V, counts = fit_scope(queries, "query", config)
        state = State("query", keys, V, counts, [self.col.name], config.to_json(), {})
        moved = shift_queries(self.vectors, state.residuals(self.qids, self.col.name, self.vectors))
        rankings = self.searcher.search_vectors(moved, HITS)
        seconds = time.perf_counter() - start
        results = [SearchResult(q, r, t) for q, r, t in zip(self.qids, rankings, traces)]
        return self.record("ttt-embed", spec, budget, results, seconds, COMMAND)


def torch_runtime(teacher: str) -> dict:
    """The teacher option that runs ``teacher``'s cross-encoders through torch, where it has any."""
    from tour_pyserini.teachers import options_for
    from tour_pyserini.teachers.cross_encoder import RUNTIME

    return options_for(teacher, {RUNTIME.name: "torch"})


def run_collection(
    col: Collection, teachers: list[str], budgets: list[int], batch_size: int, limit: int | None, repeats: int = 1
):
    ensure_indexes(f"collections/{col.name}", col.index, col.bm25_index)
    bench = Bench(col, batch_size, limit, repeats)
    bench.warm_up(bench.pipeline("none").rewriter)
    for method in ("dense", "rocchio", "avg-prf", "dart"):
        name, flags = ("none", "") if method == "dense" else (method, f"--rewriter {method}")
        bench.run(method, bench.pipeline(name).rewriter, command=bench.command(flags))
    for spec in (s for s in col.teachers if s.split(":")[0] in teachers):
        runtime = " --teacher-runtime torch" if torch_runtime(spec) else ""  # in the commands the rows record
        bench.warm_up(bench.pipeline("rerank", spec, depth=WARM_UP_DEPTH).rewriter)  # warms the teacher
        for b in budgets:
            for method in ("rerank", "refit", "tour-hard", "tour-soft"):
                options = {"preset": "passage"} if method.startswith("tour") else {}
                extra = (" --preset passage" if options else "") + runtime
                bench.run(
                    method,
                    bench.pipeline(method, spec, depth=b, **options).rewriter,
                    spec,
                    b,
                    bench.command(f"--rewriter {method} --teacher {spec} --depth {b}{extra}"),
                )
            bench.ttt_query_scope(bench.pipeline("rerank", spec, depth=b).asked_teacher, spec, b)
    return bench.rows


def add_significance(rows: list[dict]) -> None:
    """Paired t-tests against dense and against re-ranking at the same teacher and budget, Holm-corrected over
    every test of the table."""
    from tour_pyserini.eval.significance import holm, paired_t_test

    tests = []  # (row, key, metric, p)
    for row in rows:
        dense = next(r for r in rows if r["collection"] == row["collection"] and r["method"] == "dense")
        rerank = next(
            (
                r
                for r in rows
                if (r["collection"], r["teacher"], r["budget"], r["method"])
                == (row["collection"], row["teacher"], row["budget"], "rerank")
            ),
            None,
        )
        for key, base in (("vs_dense", dense), ("vs_rerank", rerank)):
            if base is None or base is row:
                continue
            for metric, values in row["per_query"].items():
                qids = sorted(values)
                p = paired_t_test([values[q] for q in qids], [base["per_query"][metric][q] for q in qids])
                tests.append((row, key, metric, p))
    for (row, key, metric, p), adjusted in zip(tests, holm([t[3] for t in tests])):
        row.setdefault("p", {}).setdefault(key, {})[metric] = {"p": p, "holm": adjusted}


def write_table(rows: list[dict], path: Path, source: str) -> None:
    lines = [
        "# Every test-time method, at equal teacher budgets",
        "",
        f"Rebuilt by `{source}`; paired t-tests, Holm-corrected over the table.",
        "",
    ]
    for name in dict.fromkeys(r["collection"] for r in rows):
        mine = [r for r in rows if r["collection"] == name]
        metrics = list(mine[0]["metrics"])
        lines += [
            f"## {name}",
            "",
            "| method | teacher | budget | " + " | ".join(metrics) + " | ms/query | teacher calls/query |",
            "|---" * (len(metrics) + 5) + "|",
        ]
        for r in mine:
            cells = []
            for m in metrics:
                marks = "".join(
                    s
                    for key, s in (("vs_dense", "ᵈ"), ("vs_rerank", "ʳ"))
                    if r.get("p", {}).get(key, {}).get(m, {}).get("holm", 1) < 0.05
                )
                cells.append(f"{r['metrics'][m]:.4f}{marks}")
            lines.append(
                f"| {r['method']} | {r['teacher']} | {r['budget'] or '-'} | "
                + " | ".join(cells)
                + f" | {r['ms_per_query']:.1f} | {r['teacher_calls_per_query']:.1f} |"
            )
        lines.append("")
    lines.append(
        "ᵈ, ʳ: different from dense, from re-ranking at the same teacher and budget (Holm-corrected p < 0.05)."
    )
    path.write_text("\n".join(lines) + "\n")


def plot(rows: list[dict], out: str) -> None:
    """One quality-against-cost plot per collection: the first metric against milliseconds per query, a colour per
    method and a marker per teacher."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    markers = dict(zip(("-", *TEACHER_KINDS), "oDs^"))
    for name in dict.fromkeys(r["collection"] for r in rows):
        mine = [r for r in rows if r["collection"] == name]
        metric = next(iter(mine[0]["metrics"]))
        methods = list(dict.fromkeys(r["method"] for r in mine))
        teachers = list(dict.fromkeys(r["teacher"].split(":")[0] for r in mine))
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r in mine:
            colour = colours[methods.index(r["method"]) % len(colours)]
            ax.scatter(
                r["ms_per_query"],
                r["metrics"][metric],
                color=colour,
                marker=markers.get(r["teacher"].split(":")[0], "v"),
            )
        handles = [
            Line2D([], [], color=colours[i % len(colours)], marker="o", ls="", label=m) for i, m in enumerate(methods)
        ]
        handles += [
            Line2D([], [], color="black", marker=markers.get(t, "v"), ls="", label="no teacher" if t == "-" else t)
            for t in teachers
        ]
        ax.set_xscale("log")
        ax.set(xlabel="ms per query (log)", ylabel=metric, title=f"{name}: quality against cost")
        ax.legend(handles=handles, fontsize=7, ncol=2)
        fig.tight_layout()
        fig.savefig(f"{out}-{name}.png", dpi=120)
        plt.close(fig)


def write(rows: list[dict], output: str, source: str = COMMAND) -> None:
    """The table, the plots, the rows without their per-query values (``.json``) and with them
    (``.per-query.json.gz``, what ``--merge`` reads; no time stamp in it, so the same rows give the same bytes)."""
    add_significance(rows)
    Path(output).parent.mkdir(parents=True, exist_ok=True)  # not found only after an hour's measuring
    Path(f"{output}.per-query.json.gz").write_bytes(gzip.compress(json.dumps(rows).encode(), mtime=0))
    Path(f"{output}.json").write_text(
        json.dumps([{k: v for k, v in r.items() if k != "per_query"} for r in rows], indent=1) + "\n"
    )
    write_table(rows, Path(f"{output}.md"), source)
    plot(rows, output)


def merge(paths: list[str]) -> list[dict]:
    """The rows of several runs as one table, the p values computed again over it. A teacher-free row measured by
    more than one run is kept once, from the first, and only if every run gave it the same per-query values (they
    differ only in time); every row of a collection must be over the same queries."""
    rows, seen, queries = [], {}, {}
    for path in paths:
        with gzip.open(path, "rt") as f:
            for row in json.load(f):
                key = (row["collection"], row["method"], row["teacher"], row["budget"])
                qids = queries.setdefault(row["collection"], sorted(next(iter(row["per_query"].values()))))
                if any(sorted(values) != qids for values in row["per_query"].values()):
                    raise SystemExit(f"{path}: {key} is over other {row['collection']} queries than the rows before")
                if key in seen:
                    if row["teacher"] != "-" or row["per_query"] != seen[key]:
                        raise SystemExit(f"{path}: {key} is measured by an earlier file too, with other results")
                    continue
                seen[key] = row["per_query"]
                rows.append({k: v for k, v in row.items() if k != "p"})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collections", nargs="+", default=list(COLLECTIONS), choices=list(COLLECTIONS))
    ap.add_argument("--teachers", nargs="+", default=list(TEACHER_KINDS), choices=TEACHER_KINDS)
    ap.add_argument("--budgets", nargs="+", type=int, default=list(BUDGETS))
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--limit", type=int, help="the first N test queries only (a smoke run)")
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="timed passes per method (the median is reported; TTT-Embed's row is one pass)",
    )
    ap.add_argument(
        "--merge",
        nargs="+",
        metavar="PER_QUERY_JSON_GZ",
        help="measure nothing: one table and Holm family from runs' .per-query.json.gz",
    )
    ap.add_argument("--output", default="runs/bench-methods")
    args = ap.parse_args()
    if args.merge:
        write(merge(args.merge), args.output, "python bench/methods.py --merge " + " ".join(args.merge))
        return
    rows = []
    for name in args.collections:
        rows += run_collection(
            COLLECTIONS[name], args.teachers, args.budgets, args.batch_size, args.limit, args.repeats
        )
    write(rows, args.output)


if __name__ == "__main__":
    main()
