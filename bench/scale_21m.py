"""An IVF-PQ index of the paper's size, measured on this machine: 21 million synthetic 384-d vectors.

The collection is bench/scale.py's synthetic one (noisy copies of SciFact's MiniLM document vectors, the
structure its growth fit was made on), generated in chunks of 100,000 and never held in memory whole: the
index is written by ``faiss_index.write_streamed``, which trains IVF-PQ on a sample gathered in one pass, adds
the codes in a second, and writes the exact store to disk in a third (the file an in-memory build writes).
The generator is run again for each pass instead of keeping the vectors on disk, which would need the store's
size a second time. 384-d, not the paper's 768-d: the exact store of 21M x 768 float32 is 64.5 GB, more than
this machine's disk holds beside anything else (21M x 384 is 32.3 GB). HNSW is not built: its graph and
vectors (4*d + 8*M bytes a document, 33.6 GB at 384-d) must be in memory while it is built.

Measured: the build (train, add, write; wall and CPU seconds, peak resident memory), the files on disk, the
search (CPU ms per query of one thread, one query at a time and a batch of 100, with the index's default
nprobe, as bench/scale.py measures), recall@100 against the exact top-100 (computed while streaming, one pass),
and dense search and TOUR (tour-soft, passage preset, k 20) through the search CLI with teachers that need no
text: ``dense`` (the exact store) and ``oracle`` over synthetic judgments (each query's exact top 10).

Sized for a 24 GiB, 2-core machine with about 35 GB of free disk; a benchmark, not run in CI. Writes
runs/bench-scale-21m.json (one entry per size measured, beside bench/scale.py's fit it is compared with) and
deletes the index unless --keep.
Usage: python bench/scale_21m.py [--vectors 21000000] [--keep]
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import subprocess
import sys
import time

import numpy as np
from common import ROOT, split_files
from scale import DEPTH, document_vectors, recall, rss_mb, search_cost, synthetic_chunks

QUERIES = 100  # as bench/scale.py: the first 100 SciFact test queries
TOUR_FLAGS = ["--rewriter", "tour-soft", "--preset", "passage", "--depth", "20"]


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def exact_top(chunks, queries: np.ndarray, depth: int = DEPTH):
    """Wrap a chunk generator so that, as it is read, it keeps each query's exact top ``depth`` rows."""
    best_scores = np.full((len(queries), depth), -np.inf, dtype=np.float32)
    best_rows = np.full((len(queries), depth), -1, dtype=np.int64)
    start = 0
    for chunk in chunks:
        scores = queries @ chunk.T
        top = np.argpartition(-scores, depth - 1, axis=1)[:, :depth]
        all_scores = np.hstack([best_scores, np.take_along_axis(scores, top, 1)])
        all_rows = np.hstack([best_rows, top + start])
        keep = np.argpartition(-all_scores, depth - 1, axis=1)[:, :depth]
        best_scores, best_rows = np.take_along_axis(all_scores, keep, 1), np.take_along_axis(all_rows, keep, 1)
        start += len(chunk)
        yield chunk
    order = np.argsort(-best_scores, axis=1, kind="stable")
    exact_top.rows = np.take_along_axis(best_rows, order, 1)


def extrapolation() -> dict:
    """What docs/scale.md predicted before this measurement: bench/scale.py's IVF-PQ fit (runs/bench-scale.json)."""
    path = ROOT / "runs" / "bench-scale.json"
    if not path.exists():
        return {}
    growth = json.loads(path.read_text())["growth"]
    return {
        "ivfpq_fit": growth.get("ivfpq"),
        "memory_gb_21M_768d": growth.get("memory_gb_21M_768d"),
        "note": "search CPU s a query = a * n^b, synthetic 384-d sizes up to 3M; x2 for 768-d",
    }


def run_cli(args: list[str]) -> tuple[str, float, float]:
    """The command's output, wall seconds and peak resident MB (of the child)."""
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    out = subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True, text=True)
    peak = max(before, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss) / 1024
    return out.stdout + out.stderr, time.perf_counter() - start, peak


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vectors", type=float, default=21_000_000)
    ap.add_argument("--output-dir", default="indexes/synthetic-21m.ivfpq")
    ap.add_argument("--report", default="runs/bench-scale-21m.json")
    ap.add_argument("--keep", action="store_true", help="keep the index (32+ GB at 21M) after measuring")
    ap.add_argument("--skip-tour", action="store_true")
    args = ap.parse_args()
    n = int(args.vectors)

    import faiss

    from tour_pyserini.files import read_topics
    from tour_pyserini.index import faiss_index
    from tour_pyserini.index.faiss_index import FaissIndexSpec
    from tour_pyserini.index.layout import IndexMeta
    from tour_pyserini.search import TourSearcher

    report: dict = {
        "docs": n,
        "command": "python bench/scale_21m.py " + " ".join(sys.argv[1:]),
        "machine": {
            "cores": __import__("os").cpu_count(),
            "memory_gib": round(
                __import__("os").sysconf("SC_PHYS_PAGES") * __import__("os").sysconf("SC_PAGE_SIZE") / 2**30, 1
            ),
        },
        "faiss_threads_build": faiss.omp_get_max_threads(),
    }
    out_path = ROOT / args.report

    def save():  # one entry per collection size, the others kept
        kept = json.loads(out_path.read_text()) if out_path.exists() else {}
        kept.setdefault("measurements", {})[str(n)] = report
        kept["extrapolation"] = extrapolation()
        out_path.write_text(json.dumps(kept, indent=2) + "\n")

    scifact = ROOT / "indexes/scifact.minilm"
    base = document_vectors(scifact / "index")
    topics = read_topics(ROOT / split_files("scifact").topics)
    queries = TourSearcher.from_index(scifact).encode([t.text for t in topics])
    first, unseen = queries[:QUERIES], queries[QUERIES : QUERIES + 50]
    d = base.shape[1]
    report["dim"] = d

    out = ROOT / args.output_dir
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    spec = FaissIndexSpec(type="ivfpq").resolved(n, d)
    report["faiss_index"] = spec.to_json()
    print(f"{n} x {d}: {spec.describe()}; rss {rss_mb():.0f} MB", flush=True)

    passes = []

    def chunks():
        passes.append(time.perf_counter())
        print(f"pass {len(passes)} at {time.strftime('%H:%M:%S')}, rss {rss_mb():.0f} MB", flush=True)
        made = synthetic_chunks(base, n)
        return exact_top(made, first) if len(passes) == 1 else made

    start, cpu = time.perf_counter(), time.process_time()
    seconds = faiss_index.write_streamed(chunks, n, d, spec, out / "index")
    report["build"] = {
        **seconds,
        "total_wall_s": round(time.perf_counter() - start, 1),
        "total_cpu_s": round(time.process_time() - cpu, 1),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "passes": len(passes),
        "note": "each pass generates the collection again",
    }
    exact = exact_top.rows
    with open(out / "docid", "w") as f:
        for start_row in range(0, n, 1_000_000):
            f.write("".join(f"s{i}\n" for i in range(start_row, min(n, start_row + 1_000_000))))
    scifact_meta = IndexMeta.read(scifact)
    IndexMeta(
        kind="dense",
        collection=f"synthetic-{n}",
        num_docs=n,
        encoder=scifact_meta.encoder,
        dimension=d,
        faiss_index=spec.to_json(),
        build_seconds=report["build"]["total_wall_s"],
        peak_rss_mb=report["build"]["peak_rss_mb"],
        extra={"synthetic": "noisy copies of SciFact MiniLM vectors (bench/scale.py)"},
    ).write(out)
    report["disk"] = {
        "index_bytes": (out / "index").stat().st_size,
        "docid_bytes": (out / "docid").stat().st_size,
        "exact_store_bytes": n * d * 4,
    }
    report["disk"]["codes_and_lists_bytes"] = report["disk"]["index_bytes"] - n * d * 4
    print(json.dumps(report), flush=True)
    save()

    # the search, as bench/scale.py measures it: one thread, index opened memory-mapped
    faiss.omp_set_num_threads(1)
    before = rss_mb()
    start = time.perf_counter()
    index = faiss_index.read(out / "index")
    open_s = time.perf_counter() - start
    cpu, start = time.process_time(), time.perf_counter()
    _, found = index.search(first, DEPTH)
    batch = {
        "cpu_ms_per_query": (time.process_time() - cpu) / len(first) * 1e3,
        "wall_ms_per_query": (time.perf_counter() - start) / len(first) * 1e3,
    }
    cpu, start = time.process_time(), time.perf_counter()
    for q in unseen:
        index.search(q[None], DEPTH)
    cold = {
        "cpu_ms_per_query": (time.process_time() - cpu) / len(unseen) * 1e3,
        "wall_ms_per_query": (time.perf_counter() - start) / len(unseen) * 1e3,
    }
    report["search"] = {
        "threads": 1,
        "depth": DEPTH,
        "nprobe": spec.nprobe,
        "open_s": round(open_s, 3),
        "batch_of_100_first": batch,
        "single_warm_cpu_ms_per_query": search_cost(index, first) * 1e3,
        "single_unseen_queries": cold,
        "recall@100_vs_exact": recall(found, exact),
        "resident_mb_after_search": round(rss_mb() - before, 1),
        "note": "batch: the first search of the index (exact-store pages read from disk); single warm: "
        "bench/scale.py's measure (50 of the same queries, after a warm-up); single unseen: 50 other "
        "SciFact test queries, searched once each, their candidates' pages not yet read",
    }
    del index
    print(json.dumps(report["search"]), flush=True)
    save()

    if not args.skip_tour:
        runs = ROOT / "runs" / "scale"
        runs.mkdir(parents=True, exist_ok=True)
        topics_file, qrels_file = runs / "synthetic.topics.tsv", runs / "synthetic.qrels.txt"
        topics_file.write_text("".join(f"{t.qid}\t{t.text}\n" for t in topics[:QUERIES]))
        # synthetic judgments: each query's exact top 10 of the synthetic collection
        qrels_file.write_text("".join(f"{t.qid} 0 s{row} 1\n" for t, rows in zip(topics, exact) for row in rows[:10]))
        report["tour"] = {}
        for system, flags in (
            ("dense", []),
            ("tour-soft@20.dense", [*TOUR_FLAGS, "--teacher", "dense"]),
            ("tour-soft@20.oracle", [*TOUR_FLAGS, "--teacher", f"oracle:{qrels_file}"]),
        ):
            run = runs / f"synthetic-{n}.{system}.trec"
            cmd = [
                "-m",
                "tour_pyserini.search",
                "--index",
                str(out),
                "--topics",
                str(topics_file),
                "--output",
                str(run),
                "--hits",
                "100",
                "--threads",
                "1",
                "--no-resume",
                *flags,
            ]
            printed, wall, peak = run_cli(cmd)
            found = re.search(r"([\d.]+) s/query", printed)
            ranked = {}
            for line in run.read_text().splitlines():
                qid, _, docid, *_ = line.split()
                ranked.setdefault(qid, []).append(int(docid[1:]))
            r10 = np.mean(
                [len(set(ranked.get(t.qid, [])[:10]) & set(rows[:10].tolist())) / 10 for t, rows in zip(topics, exact)]
            )
            report["tour"][system] = {
                "s_per_query": float(found.group(1)) if found else None,
                "command_wall_s": round(wall, 1),
                "peak_rss_mb": round(peak, 1),
                "exact_top10_in_top10": float(r10),
                "command": "python " + " ".join(map(str, cmd)),
            }
            print(system, json.dumps(report["tour"][system]), flush=True)
            save()
            run.unlink()

    report["peak_rss_mb_whole_bench"] = round(peak_rss_mb(), 1)
    save()
    if not args.keep:
        shutil.rmtree(out)
    print(f"wrote {out_path}", flush=True)


if __name__ == "__main__":
    main()
