"""python -m tour_pyserini.search: search a dense or BM25 index for every topic and write a TREC run.

Dense indexes take a query rewriter (``--rewriter``) and, for rewriters that ask a teacher, a teacher
spec (``--reranker``): ``cross-encoder:PATH``, ``bm25``, ``fusion:SPEC+SPEC`` or ``oracle:QRELS``.
"""

from __future__ import annotations

import argparse
import sys
import time

from tour_pyserini.cli_util import run_cli
from tour_pyserini.data.topics import read_topics
from tour_pyserini.errors import UserError
from tour_pyserini.index.layout import index_kind
from tour_pyserini.results import SearchResult
from tour_pyserini.rewriters import available_rewriters, get_rewriter
from tour_pyserini.runs import RunWriter

# flags that do not change the run, so an interrupted run may resume under different values
_NOT_IN_SIGNATURE = ("no_resume", "threads", "batch_size", "trace")


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
    ap.add_argument("--no-resume", action="store_true", help="start over even if an interrupted run can resume")
    ap.add_argument("--trace", help="write per-query traces (JSON lines) to this file")
    ap.add_argument("--bm25-k1", type=float, default=0.9)
    ap.add_argument("--bm25-b", type=float, default=0.4)

    rw = ap.add_argument_group("query rewriting (dense indexes)")
    rw.add_argument("--rewriter", default="none", help=f"one of: {', '.join(available_rewriters())}")
    rw.add_argument(
        "--reranker", metavar="SPEC", help="teacher: cross-encoder:PATH, bm25[:DIR], fusion:A+B, oracle:QRELS"
    )
    rw.add_argument("--reranker-max-length", type=int, help="tokens a cross-encoder teacher reads (default 512)")
    tour = ap.add_argument_group("TOUR and re-ranking (defaults: the --preset)")
    tour.add_argument("--preset", choices=["passage", "odqa"], help="passage: lr 0.2, T 1, k 100, lambda 1; "
                      "odqa: lr 1.2, T 3, k 10, lambda 0.1")  # fmt: skip
    tour.add_argument("--k", type=int, help="candidates the teacher scores per iteration")
    tour.add_argument("--iterations", type=int, help="maximum iterations T (also PRF iterations)")
    tour.add_argument("--lr", type=float, help="learning rate (decays linearly to 0 over T)")
    tour.add_argument("--momentum", type=float, help="SGD momentum (0.99)")
    tour.add_argument("--weight-decay", type=float, help="SGD weight decay (0.01; official code 0.1)")
    tour.add_argument("--clip", type=float, help="gradient-norm clipping (1.0)")
    tour.add_argument("--tau", type=float, help="teacher temperature (0.5)")
    tour.add_argument("--p", type=float, help="nucleus mass of the hard pseudo positives (0.5)")
    tour.add_argument("--lambda", dest="lam", type=float, help="final weight of the teacher (1 - of the retriever)")
    tour.add_argument("--smoothing", type=float, help="retriever logits are sim / smoothing in aggregation (100)")
    tour.add_argument("--fixed-positives", type=int, metavar="K'", help="ablation: teacher's top-k' as positives")
    tour.add_argument("--no-early-stop", action="store_true", help="ablation: always run T iterations")
    tour.add_argument("--no-cache", action="store_true", help="ablation: rescore candidates every iteration")
    tour.add_argument(
        "--final",
        choices=["search", "union"],
        help="final ranking: the last search's top-k "
        "(paper), or its union with every candidate scored on the way (no extra teacher calls)",
    )
    prf = ap.add_argument_group("pseudo relevance feedback (Pyserini's flags)")
    prf.add_argument("--prf-depth", type=int, help="feedback documents (3)")
    prf.add_argument("--prf-iterations", type=int, help="feedback rounds (1)")
    prf.add_argument("--rocchio-alpha", type=float, help="weight of the query (0.9)")
    prf.add_argument("--rocchio-beta", type=float, help="weight of the top documents (0.1)")
    prf.add_argument("--rocchio-gamma", type=float, help="weight of the bottom documents (0.1)")
    prf.add_argument("--rocchio-topk", type=int, help="positive feedback documents (3)")
    prf.add_argument("--rocchio-bottomk", type=int, help="negative feedback documents (0)")
    return ap


def rewriter_options(args: argparse.Namespace, teacher) -> dict:
    """The options the command line gave, named as the rewriters' constructors name them."""
    if args.iterations is not None and args.prf_iterations is not None:
        raise ValueError("give --iterations or --prf-iterations, not both")
    return {
        "teacher": teacher,
        "preset": args.preset,
        "k": args.k,
        "iterations": args.iterations if args.iterations is not None else args.prf_iterations,
        "lr": args.lr,
        "momentum": args.momentum,
        "weight_decay": args.weight_decay,
        "clip": args.clip,
        "tau": args.tau,
        "p": args.p,
        "lam": args.lam,
        "smoothing": args.smoothing,
        "fixed_positives": args.fixed_positives,
        "early_stop": False if args.no_early_stop else None,
        "use_cache": False if args.no_cache else None,
        "final": args.final,
        "prf_depth": args.prf_depth,
        "alpha": args.rocchio_alpha,
        "beta": args.rocchio_beta,
        "gamma": args.rocchio_gamma,
        "topk": args.rocchio_topk,
        "bottomk": args.rocchio_bottomk,
    }


def open_searcher(args: argparse.Namespace):
    """The searcher for ``--index``, and the teacher's label (None without a teacher)."""
    if index_kind(args.index) == "bm25":
        if args.rewriter != "none" or args.reranker:
            raise ValueError("--rewriter and --reranker need a dense index; this one is BM25")
        from tour_pyserini.search.bm25 import Bm25Searcher

        return Bm25Searcher.from_index(args.index, args.bm25_k1, args.bm25_b, threads=args.threads), None
    from tour_pyserini.search.searcher import TourSearcher
    from tour_pyserini.teachers import TeacherContext, get_teacher

    context = TeacherContext(index_dir=args.index, max_length=args.reranker_max_length)
    teacher = get_teacher(args.reranker, context) if args.reranker else None
    rewriter = get_rewriter(args.rewriter, **rewriter_options(args, teacher))
    searcher = TourSearcher.from_index(args.index, args.encoder, rewriter, threads=args.threads)
    if teacher is not None and teacher.oracle:
        print("warning: ORACLE teacher — these results read the relevance judgements (an upper bound, "
              "not a system); the run tag is marked 'oracle'", file=sys.stderr)  # fmt: skip
    return searcher, teacher.label if teacher else None


def summarize(results: list[SearchResult]) -> str:
    """One line of per-query averages from the traces: the numbers the TOUR paper reports."""
    if not results:
        return "no queries"
    traces = [r.trace for r in results]
    n = len(traces)
    stopped = sum(t.stop_reason not in (None, "max iterations") for t in traces)
    seconds = ", ".join(f"{phase} {sum(t.seconds[phase] for t in traces) / n:.4f}" for phase in traces[0].seconds)
    return (
        f"mean iterations {sum(t.iterations for t in traces) / n:.2f}, "
        f"teacher calls/query {sum(t.teacher_calls for t in traces) / n:.1f}, "
        f"cache hits/query {sum(t.cache_hits for t in traces) / n:.1f}, early stops {stopped}/{n}, "
        f"{seconds} s/query"
    )


def main(argv: list[str] | None = None) -> None:
    from tqdm import tqdm

    args = parser().parse_args(argv)
    for flag in ("hits", "batch_size", "threads"):
        if getattr(args, flag) < 1:
            raise UserError(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    signature = {k: v for k, v in vars(args).items() if k not in _NOT_IN_SIGNATURE}
    # the output is checked (writable, not locked by another search) before any model or JVM loads
    writer = RunWriter(args.output, args.run_tag, signature, resume=not args.no_resume, trace=args.trace)
    done: list[SearchResult] = []
    try:
        with writer:
            topics = read_topics(args.topics)  # bad topics fail before any model or JVM loads
            searcher, teacher_label = open_searcher(args)
            start = time.perf_counter()
            if teacher_label and "oracle" in teacher_label and "oracle" not in writer.tag:
                writer.tag = f"{writer.tag}.oracle"
            todo = [t for t in topics if t.qid not in writer.done]
            if len(todo) < len(topics):
                print(f"resuming {args.output}: {len(topics) - len(todo)} of {len(topics)} queries already done")
            with tqdm(total=len(todo), unit="q", desc="search") as bar:
                for i in range(0, len(todo), args.batch_size):
                    batch = todo[i : i + args.batch_size]
                    for result in searcher.retrieve([t.text for t in batch], [t.qid for t in batch], args.hits):
                        hits = [h for h in result.hits if h.docid != result.qid] if args.remove_query else result.hits
                        trace = {"rewriter": args.rewriter, "teacher": teacher_label, **result.trace.to_json()}
                        writer.write(result.qid, hits, trace=trace)
                        done.append(result)
                    bar.update(len(batch))
    except KeyboardInterrupt:
        if not writer.done:
            raise KeyboardInterrupt("search stopped before any query finished; nothing was written") from None
        raise KeyboardInterrupt(f"search stopped: {writer.partial} keeps {len(writer.done)} finished queries; "
                                "run the same command again to resume") from None  # fmt: skip
    elapsed = time.perf_counter() - start
    print(f"wrote {args.output}: {len(topics)} queries, {elapsed / max(len(todo), 1):.4f} s/query")
    if writer.no_hits:
        print(f"warning: {len(writer.no_hits)} of {len(topics)} queries got no hits (first: "
              f"{', '.join(writer.no_hits[:5])}) and are absent from the run; trec_eval -c and ir-measures "
              "count them as 0", file=sys.stderr)  # fmt: skip
    if args.rewriter != "none":
        print(f"{args.rewriter}{f' ({teacher_label})' if teacher_label else ''}: {summarize(done)}")


if __name__ == "__main__":
    run_cli(main)
