"""Does the wrapper add cost? Our search CLI against Pyserini's, side by side in one run.

For the same dense index, topics and encoder settings, runs ``python -m tour_pyserini.search`` and
``python -m pyserini.search.faiss`` (through ``python -m tour_pyserini run-pyserini``) alternately, ``--repeats``
times each, checks that the rankings are the same (up to ties within
1e-5, by ``tour_pyserini.files.sameness``), and reports the median wall-time ratio. It also
times the in-process search alone (``TourSearcher.batch_search`` against ``FaissSearcher.batch_search``
on the same searcher), which leaves out process start-up. Results go to ``runs/bench-wrapper.json``.

Usage: python bench/wrapper_overhead.py [--index indexes/scifact.minilm] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import compare_rankings, ensure_indexes, split_files, timed_run


def in_process_ratio(index: str, topics: str, hits: int, repeats: int) -> dict:
    from tour_pyserini.files import read_topics
    from tour_pyserini.search import TourSearcher

    searcher = TourSearcher.from_index(index)
    queries = read_topics(topics)
    texts, qids = [q.text for q in queries], [q.qid for q in queries]
    ours, theirs = [], []
    import torch

    for _ in range(repeats):
        torch.set_num_threads(searcher.query_encoder.threads)  # undo what our last search did to shared OpenMP
        start = time.perf_counter()
        searcher.faiss.batch_search(texts, qids, hits, 1)
        theirs.append(time.perf_counter() - start)
        start = time.perf_counter()
        searcher.batch_search(texts, qids, hits, 1)
        ours.append(time.perf_counter() - start)
    return {
        "ours_s": statistics.median(ours),
        "pyserini_s": statistics.median(theirs),
        "ratio": statistics.median(ours) / statistics.median(theirs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", default="indexes/scifact.minilm")
    ap.add_argument("--collection", default="collections/scifact")
    ap.add_argument("--topics", default=split_files("scifact").topics)
    ap.add_argument("--hits", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--output", default="runs/bench-wrapper.json")
    args = ap.parse_args()

    from tour_pyserini.encoders import bundled_model_dir

    py = sys.executable
    ensure_indexes(args.collection, args.index)
    common = [
        "--index",
        args.index,
        "--topics",
        args.topics,
        "--hits",
        str(args.hits),
        "--batch-size",
        str(args.batch_size),
        "--threads",
        "1",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        ours_out, theirs_out = Path(tmp) / "ours.trec", Path(tmp) / "pyserini.trec"
        ours_cmd = [py, "-m", "tour_pyserini.search", *common, "--output", str(ours_out), "--no-resume"]
        theirs_cmd = [
            py,
            "-m",
            "tour_pyserini",
            "run-pyserini",
            "pyserini.search.faiss",
            *common,
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
        for i in range(args.repeats):
            print(f"repeat {i + 1}/{args.repeats}", file=sys.stderr)
            # alternate which goes first, so warm caches favour neither
            if i % 2:
                ours_t.append(timed_run(ours_cmd))
                theirs_t.append(timed_run(theirs_cmd))
            else:
                theirs_t.append(timed_run(theirs_cmd))
                ours_t.append(timed_run(ours_cmd))
        rankings = compare_rankings(ours_out, theirs_out)
        same = rankings["different"] == 0

    report = {
        "index": args.index,
        "topics": args.topics,
        "hits": args.hits,
        "rankings": rankings,
        "cli": {
            "ours_s": statistics.median(ours_t),
            "pyserini_s": statistics.median(theirs_t),
            "ratio": statistics.median(ours_t) / statistics.median(theirs_t),
            "ours_all_s": ours_t,
            "pyserini_all_s": theirs_t,
        },
        "in_process": in_process_ratio(args.index, args.topics, args.hits, args.repeats),
    }
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    cli, inproc = report["cli"], report["in_process"]
    print(
        f"rankings over {rankings['queries']} queries: {rankings['identical']} identical, "
        f"{rankings['same_within_tolerance']} the same up to ties within {rankings['tolerance']:g}, "
        f"{rankings['different']} different"
    )
    print(f"{'':12s} {'ours s':>8s} {'pyserini s':>11s} {'ratio':>6s}")
    print(f"{'whole CLI':12s} {cli['ours_s']:8.2f} {cli['pyserini_s']:11.2f} {cli['ratio']:6.3f}")
    print(f"{'search only':12s} {inproc['ours_s']:8.2f} {inproc['pyserini_s']:11.2f} {inproc['ratio']:6.3f}")
    print(f"written to {args.output}")
    if not same:
        sys.exit(1)


if __name__ == "__main__":
    main()
