"""Threads that share: dense search, TOUR with the BM25 teacher and the cross-encoder teacher, each on idle
cores and beside one other process that keeps a core busy, under OpenMP's own default (idle threads spin),
the rule every command applies (``tour_pyserini.devices.share_cores``: where other processes keep cores busy,
threads that sleep as they wait, as many as on idle cores), "cores left" (sleeping threads, one per core other
processes leave: faster, but the thread count changes the arithmetic, so no command does it), and one thread.
Target: with one core busy, each at most 1.5x its idle time.

Each (workload, way, load) runs in a fresh process, since OpenMP reads its wait policy when torch and Faiss
load. Writes runs/bench-shared-cores.json. Usage: python bench/shared_cores.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

INDEX = "indexes/scifact.minilm"
TOPICS = "collections/scifact/topics.test.tsv"
WORKLOADS = ("dense", "tour-bm25", "cross-encoder")
WAYS = ("openmp default", "rule", "cores left", "one thread")
TARGET = 1.5


def workload(name: str, way: str, repeats: int) -> dict:
    """Run in the child: best seconds per unit of work (a query, or a pair for the cross-encoder)."""
    if way == "rule":
        from tour_pyserini.devices import share_cores

        share_cores()
    elif way == "cores left":
        from tour_pyserini.devices import busy_cores

        busy = round(busy_cores())
        os.environ.update(OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(max(1, len(os.sched_getaffinity(0)) - busy)))
    import torch

    from tour_pyserini.files import read_topics
    from tour_pyserini.rewriters.tour import TourSoft
    from tour_pyserini.search import TourSearcher
    from tour_pyserini.teachers import ScoreRequest, TeacherContext, get_teacher

    if way == "one thread":
        torch.set_num_threads(1)
    threads = torch.get_num_threads()
    topics = read_topics(TOPICS)
    texts, qids = [t.text for t in topics], [t.qid for t in topics]
    if name == "cross-encoder":
        # through torch: the wait policy this bench compares is OpenMP's, which OpenVINO's threads do not read
        context = TeacherContext(index_dir=INDEX, options={"runtime": "torch"})
        teacher = get_teacher("cross-encoder:models/scifact-rce", context)
        searcher = TourSearcher.from_index(INDEX)
        found = searcher.retrieve(texts[:8], qids[:8], 16)
        docids = [[h.docid for h in r.hits] for r in found]
        requests = [ScoreRequest(r.qid, t, ids, searcher.docstore.get(ids)) for r, t, ids in zip(found, texts, docids)]
        units = sum(len(r.docids) for r in requests)

        def work():
            teacher.score(requests)
    else:
        searcher = TourSearcher.from_index(INDEX, threads=threads)
        rewriter = None
        if name == "tour-bm25":
            rewriter = TourSoft(get_teacher("bm25", TeacherContext(index_dir=INDEX)), preset="passage", depth=20)
        hits = 100 if rewriter else 1000
        units = len(qids)

        def work():
            for i in range(0, len(qids), 32):
                searcher.retrieve(texts[i : i + 32], qids[i : i + 32], hits, rewriter=rewriter)

    work()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return {
        "ms_per_unit": best / units * 1000,
        "unit": "pair" if name == "cross-encoder" else "query",
        "wait_policy": os.environ.get("OMP_WAIT_POLICY", "openmp default"),
        "threads": threads,
    }


def measure(name: str, way: str, busy: bool, repeats: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    load = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        time.sleep(0.5 if busy else 0)
        out = subprocess.run(
            [sys.executable, __file__, "--child", name, way, str(repeats)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        if load is not None:
            load.kill()
            load.wait()
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--output", default="runs/bench-shared-cores.json")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--ways", nargs="+", default=list(WAYS), choices=WAYS)
    args = ap.parse_args()
    if args.child:
        name, way, repeats = args.child
        print(json.dumps(workload(name, way, int(repeats))))
        return
    report: dict = {"cores": os.cpu_count(), "target_busy_over_idle": TARGET, "workloads": {}}
    for name in args.workloads:
        rows = {
            f"{way}, {'one core busy' if busy else 'idle'}": measure(name, way, busy, args.repeats)
            for busy in (False, True)
            for way in args.ways
        }
        idle = rows["openmp default, idle"]["ms_per_unit"]
        for row in rows.values():
            row["times_idle"] = row["ms_per_unit"] / idle
        report["workloads"][name] = rows
        for label, row in rows.items():
            print(
                f"{name:14s} {label:28s} {row['ms_per_unit']:7.2f} ms/{row['unit']}  {row['times_idle']:.2f}x "
                f"idle (policy {row['wait_policy']}, {row['threads']} threads)",
                flush=True,
            )
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
