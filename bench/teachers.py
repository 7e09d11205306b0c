"""make bench-teachers: is the trained teacher better than the retriever, and does TOUR turn it into quality?

On SciFact test (300 claims; never used for training, selection or tuning), with the teacher that
``make teachers`` trains (models/scifact-rce, a residual cross-encoder) and the ensemble fitted on its dev
queries (models/scifact-rce/ensemble.json):

1. **Teachers alone**: rerank@100 of the dense top-100 with the cross-encoder, the ensemble, the a-priori
   fusion of BM25 and the retriever (``fusion:bm25+dense``, nothing fitted) and BM25; the dense and BM25
   runs for reference.
2. **TOUR, one configuration chosen on dev queries**: {tour-hard, tour-soft} x k in {10, 20} x final in
   {search, union} x retriever temperature in {1 (the paper's), 0.05 (MiniLM's training scale)} at the
   passage preset, with the ensemble teacher, run on the teacher's dev split of the
   *training* claims (which no test claim shares a relevant abstract with); the best by nDCG@10 is run
   once on test and compared with the base and with re-ranking at its own teacher budget (rerank@K, K its
   mean teacher calls per query). Paired t-tests; Holm's adjustment over the whole family of tests this
   bench reports.
3. **Seconds per query, measured end to end**: the chosen TOUR and rerank@40 on the first 50 test claims,
   each with no stored scores (cold), interleaved, three repeats; min and median, with
   the load average.

The cross-encoder computes in ``--precision`` (fp32 by default: the reference arithmetic; ``search``'s
default on a CPU with bfloat16 units is bf16, which bench/cross_encoder_speed.py bounds against it).
Teacher scores are kept in runs/teachers/*.sqlite (named after each teacher's fingerprint) so every
(query, document) pair is scored once across the rows; the commands recorded with each row rebuild its
run from a fresh clone (after ``make install``, the indexes and ``make teachers``) without them.
Writes runs/teachers/*.trec, runs/bench-teachers.{json,md}.
Usage: python bench/teachers.py [--model models/scifact-rce] [--precision fp32]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
from common import ensure_indexes, split_files

OUT = Path("runs/teachers")
INDEX, BM25 = "indexes/scifact.minilm", "indexes/scifact.bm25"
TEST, QRELS = split_files("scifact", "test").topics, split_files("scifact", "test").qrels
TRAIN, TRAIN_QRELS = split_files("scifact", "train").topics, split_files("scifact", "train").qrels
HITS = 100
METRICS = ("nDCG@10", "R@100")
GRID = [
    (rw, k, final, temperature)
    for rw in ("tour-hard", "tour-soft")
    for k in (10, 20)
    for final in ("search", "union")
    for temperature in (1.0, 0.05)
]
TIMED_QUERIES, REPEATS = 30, 3


def command(
    teacher_spec: str | None,
    rewriter: str,
    out: str,
    *,
    k: int | None = None,
    final: str | None = None,
    temperature: float | None = None,
    precision: str = "fp32",
    topics: str = TEST,
) -> str:
    """The search command that rebuilds a run (scores are the teacher's own; the stores only save time)."""
    cmd = f"python -m tour_pyserini.search --index {INDEX} --topics {topics} --hits {HITS} --remove-query"
    if teacher_spec:
        cmd += f" --teacher {teacher_spec} --teacher-precision {precision} --rewriter {rewriter} --depth {k}"
        if rewriter.startswith("tour"):
            cmd += f" --preset passage --final {final} --retriever-temperature {temperature:g}"
    return cmd + f" --output {out}"


class Bench:
    def __init__(self, model: str, precision: str):
        from tour_pyserini.eval import QrelsJudge
        from tour_pyserini.files import read_qrels, read_topics
        from tour_pyserini.search import Bm25Searcher, TourSearcher

        self.model, self.precision = model, precision
        self.searcher = TourSearcher.from_index(INDEX)
        self.bm25 = Bm25Searcher.from_index(BM25)
        self.test = read_topics(TEST)
        dev_qids = set(json.loads((Path(model) / "training.json").read_text())["dev_qids"])
        self.dev = [t for t in read_topics(TRAIN) if t.qid in dev_qids]
        train_qrels = read_qrels(TRAIN_QRELS)
        self.judges = {
            "test": QrelsJudge(read_qrels(QRELS), METRICS),
            "dev": QrelsJudge({t.qid: train_qrels.get(t.qid, {}) for t in self.dev}, METRICS),
        }

    def teacher(self, spec: str, stored: bool = True):
        """The teacher of ``spec``; with ``stored``, its pairwise parts look up and keep scores in runs/teachers/."""
        from tour_pyserini.teachers import ScoreStore, StoredTeacher, TeacherContext, get_teacher
        from tour_pyserini.teachers.ensemble import EnsembleTeacher

        teacher = get_teacher(spec, TeacherContext(index_dir=INDEX, precision=self.precision))
        if not stored:
            return teacher

        def store(t):
            name = hashlib.sha256(t.fingerprint.encode()).hexdigest()[:12]
            return StoredTeacher(t, ScoreStore(OUT / f"{t.name}-{name}.sqlite", t.fingerprint))

        if isinstance(teacher, EnsembleTeacher):  # each part stored: the cross-encoder's scores serve both rows
            teacher.parts = [store(p) if p.pairwise else p for p in teacher.parts]
            return teacher
        return store(teacher) if teacher.pairwise else teacher

    def run(self, name: str, split: str, rewriter=None) -> dict:
        """Run the split's topics (BM25 when ``rewriter`` is None), write the run, return metrics and calls."""
        from tour_pyserini.files.runs import write_run

        topics = self.test if split == "test" else self.dev
        qids, texts = [t.qid for t in topics], [t.text for t in topics]
        if rewriter is None:
            results = self.bm25.retrieve(texts, qids, HITS)
        else:
            results = []
            for i in range(0, len(topics), 32):
                results += self.searcher.retrieve(texts[i : i + 32], qids[i : i + 32], HITS, rewriter=rewriter)
        path = OUT / split / f"{name}.trec"
        ranked = [(r.qid, [h for h in r.hits if h.docid != r.qid]) for r in results]  # BEIR: drop the query's own id
        write_run(path, ranked, tag=name)
        run = {qid: {h.docid: h.score for h in hits} for qid, hits in ranked}
        per_query = self.judges[split].per_query(run)
        row = {
            "name": name,
            "split": split,
            "run": str(path),
            "metrics": {m: float(np.mean(list(v.values()))) for m, v in per_query.items()},
            "teacher_calls_per_query": sum(r.trace.teacher_calls for r in results) / len(results),
            "per_query": per_query,
        }
        print(
            f"{split:4s} {name:34s} "
            + " ".join(f"{m} {v:.4f}" for m, v in row["metrics"].items())
            + f"  {row['teacher_calls_per_query']:6.1f} calls/q",
            flush=True,
        )
        return row


def rerank(teacher, k: int):
    from tour_pyserini.rewriters import get_rewriter

    return get_rewriter("rerank", teacher=teacher, depth=k)


def tour(teacher, rewriter: str, k: int, final: str, temperature: float):
    from tour_pyserini.rewriters import get_rewriter

    return get_rewriter(
        rewriter, teacher=teacher, preset="passage", depth=k, final=final, retriever_temperature=temperature
    )


def timed(bench: Bench, make_rewriter) -> float:
    """Wall seconds per query of one search of the first test claims, end to end (encoding included)."""
    topics = bench.test[:TIMED_QUERIES]
    start = time.perf_counter()
    bench.searcher.retrieve([t.text for t in topics], [t.qid for t in topics], HITS, rewriter=make_rewriter())
    return (time.perf_counter() - start) / len(topics)


def measure_timing(bench: Bench, ensemble: str, rw: str, k: int, final: str, temp: float) -> dict:
    """Measured seconds per query of the chosen TOUR and of rerank@40, cold (no stored scores), interleaved."""
    seconds: dict = {"tour": [], "rerank@40": []}
    teacher = bench.teacher(ensemble, stored=False)
    for _ in range(REPEATS):
        seconds["tour"].append(timed(bench, lambda: tour(teacher, rw, k, final, temp)))
        seconds["rerank@40"].append(timed(bench, lambda: rerank(teacher, 40)))
    timing = {name: {"min": min(v), "median": statistics.median(v), "all": v} for name, v in seconds.items()}
    timing["ratio_min"] = timing["tour"]["min"] / timing["rerank@40"]["min"]
    timing["queries"], timing["load_average"] = TIMED_QUERIES, os.getloadavg()
    print(
        f"measured s/query (cold, {TIMED_QUERIES} claims, {REPEATS} repeats): TOUR {timing['tour']['min']:.3f} "
        f"rerank@40 {timing['rerank@40']['min']:.3f} ratio {timing['ratio_min']:.2f}",
        flush=True,
    )
    return timing


def timing_only(args) -> None:
    """``--part timing``: the timing alone, for the TOUR configuration the last full run chose (its report kept)."""
    report = json.loads(Path("runs/bench-teachers.json").read_text())
    chosen = next(r for r in report["rows"] if r["selected"] and r["split"] == "test")
    bench = Bench(args.model, args.precision)
    ensemble = f"ensemble:{args.model}/ensemble.json"
    report["timing"] = measure_timing(
        bench, ensemble, chosen["system"], chosen["k"], chosen["final"], chosen["retriever_temperature"]
    )
    Path("runs/bench-teachers.json").write_text(json.dumps(report, indent=2) + "\n")
    write_report(report["rows"], report["timing"])


def main() -> None:
    from tour_pyserini.eval.significance import holm, paired_t_test

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="models/scifact-rce")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "bf16"), help="the cross-encoder's arithmetic")
    ap.add_argument("--limit", type=int, help="only the first N test and dev claims (a smoke run, not the bench)")
    ap.add_argument(
        "--part",
        choices=("all", "timing"),
        default="all",
        help="timing: only the measured seconds per query, for the configuration runs/bench-teachers.json chose",
    )
    args = ap.parse_args()
    ensure_indexes("collections/scifact", INDEX, BM25)
    if args.part == "timing":
        timing_only(args)
        return
    OUT.mkdir(parents=True, exist_ok=True)
    bench = Bench(args.model, args.precision)
    if args.limit:
        bench.test, bench.dev = bench.test[: args.limit], bench.dev[: args.limit]
    ce_spec, ens_spec = f"cross-encoder:{args.model}", f"ensemble:{args.model}/ensemble.json"
    specs = {"cross-encoder": ce_spec, "ensemble": ens_spec, "fusion": "fusion:bm25+dense", "bm25": "bm25"}
    teachers = {name: bench.teacher(spec) for name, spec in specs.items()}
    rows = []

    def add(
        row: dict,
        experiment: str,
        system: str,
        teacher: str | None,
        k=None,
        final=None,
        temperature=None,
        selected=False,
    ):
        rewriter = system if system.startswith(("tour", "rerank")) else "none"
        spec = specs.get(teacher) if teacher else None
        topics = TEST if row["split"] == "test" else TRAIN
        row.update(
            experiment=experiment,
            system=system,
            teacher=teacher,
            k=k,
            final=final,
            retriever_temperature=temperature,
            selected=selected,
            command=command(
                spec,
                rewriter,
                row["run"],
                k=k,
                final=final,
                temperature=temperature,
                precision=args.precision,
                topics=topics,
            )
            if system != "bm25"
            else f"python -m tour_pyserini.search --index {BM25} --topics {topics} --hits {HITS} --remove-query "
            f"--output {row['run']}",
        )
        rows.append(row)
        return row

    from tour_pyserini.rewriters import get_rewriter

    base = add(bench.run("dense", "test", get_rewriter("none")), "teachers", "dense", None)
    add(bench.run("bm25", "test"), "teachers", "bm25", None)
    for name in specs:
        add(bench.run(f"rerank-100.{name}", "test", rerank(teachers[name], 100)), "teachers", "rerank", name, k=100)

    # one TOUR configuration, chosen on the dev claims with the ensemble teacher
    def tour_row(split: str, rw: str, k: int, final: str, temp: float, experiment: str, selected=False) -> dict:
        run = bench.run(f"{rw}-{k}-{final}-t{temp:g}.ensemble", split, tour(teachers["ensemble"], rw, k, final, temp))
        return add(run, experiment, rw, "ensemble", k=k, final=final, temperature=temp, selected=selected)

    dev_rows = [tour_row("dev", *config, "tour-dev") for config in GRID]
    best = max(dev_rows, key=lambda r: r["metrics"]["nDCG@10"])  # the first of equals: the grid's order
    best["selected"] = True
    rw, k, final, temp = best["system"], best["k"], best["final"], best["retriever_temperature"]
    chosen = tour_row("test", rw, k, final, temp, "tour", selected=True)
    matched_k = max(1, round(chosen["teacher_calls_per_query"]))
    matched = add(
        bench.run(f"rerank-{matched_k}.ensemble", "test", rerank(teachers["ensemble"], matched_k)),
        "tour",
        "rerank",
        "ensemble",
        k=matched_k,
    )
    rerank40 = add(
        bench.run("rerank-40.ensemble", "test", rerank(teachers["ensemble"], 40)), "tour", "rerank", "ensemble", k=40
    )

    # significance: every comparison this bench reports is one family for Holm
    tests = [(r, base, "base") for r in rows if r["split"] == "test" and r is not base]
    tests += [(chosen, matched, f"rerank@{matched_k}"), (chosen, rerank40, "rerank@40")]
    pvalues = []
    for row, against, label in tests:
        p = {
            m: paired_t_test(
                [row["per_query"][m][q] for q in sorted(against["per_query"][m])],
                [against["per_query"][m][q] for q in sorted(against["per_query"][m])],
            )
            for m in METRICS
        }
        row.setdefault("p", {})[label] = p
        pvalues.append((row, label, p))
    flat = holm([p[m] for _, _, p in pvalues for m in METRICS])
    for i, (row, label, _) in enumerate(pvalues):
        row.setdefault("p_holm", {})[label] = dict(zip(METRICS, flat[2 * i : 2 * i + 2]))

    timing = measure_timing(bench, ens_spec, rw, k, final, temp)
    for row in rows:
        row.pop("per_query")
    Path("runs/bench-teachers.json").write_text(json.dumps({"rows": rows, "timing": timing}, indent=2) + "\n")
    write_report(rows, timing)


def write_report(rows: list[dict], timing: dict) -> None:
    lines = [
        "# make bench-teachers (SciFact test, 300 claims)",
        "",
        "| split | system | teacher | k | final | T_r | nDCG@10 | R@100 | calls/q | p (nDCG@10, Holm) | selected |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p = r.get("p_holm", {})
        cells = "; ".join(f"{label} {v['nDCG@10']:.3g}" for label, v in p.items())
        temp = "" if r["retriever_temperature"] is None else f"{r['retriever_temperature']:g}"
        lines.append(
            f"| {r['split']} | {r['system']} | {r['teacher'] or ''} | {r['k'] or ''} | {r['final'] or ''} | "
            f"{temp} | "
            f"{r['metrics']['nDCG@10']:.4f} | {r['metrics']['R@100']:.4f} | "
            f"{r['teacher_calls_per_query']:.1f} "
            f"| {cells} | {'yes' if r['selected'] else ''} |"
        )
    lines += [
        "",
        f"Measured seconds per query, cold, first {timing['queries']} test claims, min of 3 interleaved "
        f"repeats: TOUR {timing['tour']['min']:.3f}, rerank@40 {timing['rerank@40']['min']:.3f} "
        f"(ratio {timing['ratio_min']:.2f}); load average {timing['load_average'][0]:.1f}.",
        "",
    ]
    Path("runs/bench-teachers.md").write_text("\n".join(lines))


if __name__ == "__main__":
    main()
