"""Distributed search on Ray: throughput of 1 and 2 local workers against one process, side by side in one run.

The same search command (SciFact test, re-ranking the top 20 with the shipped cross-encoder teacher, one
thread per searcher: CPU-bound) runs in one process, then on a local Ray instance with 1 and 2 workers.
Reported per run: wall seconds of the whole command, Ray's start-up (instance and workers ready, as the
command prints it), search seconds per query after start-up, and whether the run file is byte-identical
to the one-process run (each batch is searched whole by one worker with one thread, as in one process) and
how it differs by the sameness rule if not. Target: 2 workers >= 1.6x the throughput of 1 worker on 2 cores.

Writes runs/bench-ray.json. Usage: python bench/ray_throughput.py [--queries 60]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time

from common import ROOT, ensure_indexes, split_files

from tour_pyserini.files.runs import read_run
from tour_pyserini.files.sameness import diff_runs

INDEX, TOPICS = "indexes/scifact.minilm", split_files("scifact").topics


def run(cmd: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, *cmd], cwd=ROOT, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - start, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=60)
    args = ap.parse_args()
    ensure_indexes("collections/scifact", INDEX)
    (ROOT / "runs" / "scale").mkdir(parents=True, exist_ok=True)
    topics = ROOT / "runs" / "scale" / f"scifact.test.first{args.queries}.tsv"
    topics.write_text("".join((ROOT / TOPICS).read_text().splitlines(keepends=True)[: args.queries]))
    base = [
        "-m",
        "tour_pyserini.search",
        "--index",
        INDEX,
        "--topics",
        str(topics.relative_to(ROOT)),
        "--hits",
        "100",
        "--batch-size",
        "2",
        "--threads",
        "1",
        "--no-resume",
        "--rewriter",
        "rerank",
        "--depth",
        "20",
        "--teacher",
        "cross-encoder:models/scifact-rce",
    ]
    rows = []
    for label, extra in (
        ("one process", []),
        ("ray, 1 worker", ["--ray", "--workers", "1"]),
        ("ray, 2 workers", ["--ray", "--workers", "2"]),
    ):
        output = f"runs/scale/ray.{len(rows)}.trec"
        cmd = [*base, "--output", output, *extra]
        wall, printed = run(cmd)
        identical = (ROOT / output).read_bytes() == (ROOT / "runs/scale/ray.0.trec").read_bytes()
        diff = diff_runs(read_run(ROOT / "runs/scale/ray.0.trec"), read_run(ROOT / output))
        startup = re.search(r"ready in ([\d.]+) s", printed)
        row = {
            "run": label,
            "wall_s": round(wall, 2),
            "ray_startup_s": float(startup.group(1)) if startup else None,
            "search_s_per_query": float(re.search(r"([\d.]+) s/query", printed).group(1)),
            "identical_to_one_process": identical,
            "same_as_one_process": diff.to_json(),
            "command": "python " + " ".join(cmd),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    speedup = rows[1]["search_s_per_query"] / rows[2]["search_s_per_query"]
    out = ROOT / "runs" / "bench-ray.json"
    out.write_text(
        json.dumps(
            {
                "rows": rows,
                "throughput_2_vs_1_workers": round(speedup, 3),
                "target": 1.6,
                "command": "python bench/ray_throughput.py " + " ".join(sys.argv[1:]),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"2 workers / 1 worker throughput: {speedup:.2f}x (target 1.6x); wrote {out}")


if __name__ == "__main__":
    main()
