"""python -m tour_pyserini.search: search a dense or BM25 index for every topic and write a TREC run."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from tour_pyserini.cli_util import run_cli
from tour_pyserini.data.topics import read_topics
from tour_pyserini.index.layout import index_kind
from tour_pyserini.rewriters import available_rewriters, get_rewriter
from tour_pyserini.runs import RunWriter


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tour_pyserini.search", description=__doc__)
    ap.add_argument("--index", required=True, help="index directory (dense or BM25, detected)")
    ap.add_argument("--topics", required=True, help="topics file: qid<TAB>text (.tsv) or JSON lines")
    ap.add_argument("--output", required=True, help="TREC run file to write (atomically)")
    ap.add_argument("--encoder", help="query encoder (dense only); default: the one the index was built with")
    ap.add_argument("--hits", type=int, default=1000, help="hits per query")
    ap.add_argument("--batch-size", type=int, default=64, help="queries searched together")
    ap.add_argument("--threads", type=int, default=1, help="search threads")
    ap.add_argument("--output-format", choices=["trec"], default="trec")
    ap.add_argument("--run-tag", default="tour_pyserini", help="last column of the run file")
    ap.add_argument("--remove-query", action="store_true", help="drop hits whose docid equals the qid (BEIR)")
    ap.add_argument(
        "--rewriter", default="none", help=f"query rewriter (dense only): {', '.join(available_rewriters())}"
    )
    ap.add_argument("--bm25-k1", type=float, default=0.9)
    ap.add_argument("--bm25-b", type=float, default=0.4)
    ap.add_argument("--no-resume", action="store_true", help="start over even if an interrupted run can resume")
    return ap


def open_searcher(args: argparse.Namespace):
    if index_kind(args.index) == "bm25":
        from tour_pyserini.search.bm25 import Bm25Searcher

        return Bm25Searcher.from_index(args.index, args.bm25_k1, args.bm25_b, threads=args.threads)
    from tour_pyserini.search.searcher import TourSearcher

    return TourSearcher.from_index(args.index, args.encoder, get_rewriter(args.rewriter), threads=args.threads)


def main(argv: list[str] | None = None) -> None:
    from tqdm import tqdm

    args = parser().parse_args(argv)
    if args.hits < 1 or args.batch_size < 1:
        raise ValueError("--hits and --batch-size must be positive")
    topics = read_topics(args.topics)  # bad topics fail before any model or JVM loads
    searcher = open_searcher(args)
    signature = {k: v for k, v in vars(args).items() if k not in ("no_resume", "threads", "batch_size")}
    if args.no_resume:
        Path(f"{args.output}.partial.json").unlink(missing_ok=True)
    start = time.perf_counter()
    with RunWriter(args.output, args.run_tag, signature) as writer:
        todo = [t for t in topics if t.qid not in writer.done]
        if len(todo) < len(topics):
            print(f"resuming {args.output}: {len(topics) - len(todo)} of {len(topics)} queries already done")
        with tqdm(total=len(todo), unit="q", desc="search") as bar:
            for i in range(0, len(todo), args.batch_size):
                batch = todo[i : i + args.batch_size]
                for result in searcher.retrieve([t.text for t in batch], [t.qid for t in batch], args.hits):
                    hits = [h for h in result.hits if h.docid != result.qid] if args.remove_query else result.hits
                    writer.write(result.qid, hits)
                writer.flush()
                bar.update(len(batch))
    elapsed = time.perf_counter() - start
    print(f"wrote {args.output}: {len(topics)} queries, {elapsed / max(len(todo), 1):.4f} s/query")


if __name__ == "__main__":
    run_cli(main)
