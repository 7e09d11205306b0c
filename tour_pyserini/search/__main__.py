"""python -m tour_pyserini.search: search a dense or BM25 index for every topic and write a TREC run.

Dense indexes take a query rewriter (``--rewriter``) and, for rewriters that ask a teacher, a teacher
spec (``--reranker``): ``cross-encoder:PATH``, ``bm25``, ``fusion:A+B`` or ``oracle:QRELS``. Each
rewriter declares its own flags (``--help`` lists them by rewriter).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from tour_pyserini.cli_util import run_cli
from tour_pyserini.data.topics import read_topics
from tour_pyserini.errors import UserError
from tour_pyserini.index.layout import IndexMeta, check_faiss_file, index_kind
from tour_pyserini.results import SearchResult
from tour_pyserini.rewriters import Option, available_rewriters, get_rewriter, get_rewriter_class
from tour_pyserini.runs import RunWriter

# flags that do not change the run, so an interrupted run may resume under different values
_NOT_IN_SIGNATURE = ("no_resume", "threads", "batch_size", "trace", "score_store")


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
    rw.add_argument("--reranker", metavar="TEACHER", help="teacher: cross-encoder:PATH, bm25[:DIR], fusion:A+B, "
                    "oracle:QRELS")  # fmt: skip
    rw.add_argument("--reranker-max-length", type=int, help="tokens a cross-encoder teacher reads (default 512)")
    rw.add_argument("--score-store", metavar="FILE", help="keep the teacher's scores in this SQLite file, so runs "
                    "sharing it score each (query, document) pair once (rerank, tour-*)")  # fmt: skip
    for name, options in rewriter_options().items():
        group = ap.add_argument_group(f"{name} options")
        for option in options:
            option.add_to(group)
    return ap


def rewriter_options() -> dict[str, list[Option]]:
    """Every rewriter's own flags, grouped under the first rewriter that declares each (shared flags once)."""
    seen: dict[str, Option] = {}
    groups: dict[str, list[Option]] = {}
    for name, cls in available_rewriters().items():
        for option in cls.options:
            if option.flag in seen:
                if seen[option.flag] != option:
                    raise TypeError(f"rewriters declare {option.flag} differently: {seen[option.flag]} and {option}")
                continue
            seen[option.flag] = option
            groups.setdefault(name, []).append(option)
    return groups


def rewriter_flags(args: argparse.Namespace) -> dict:
    """The options given for ``--rewriter``, checked before any model loads; a flag of another rewriter is an error."""
    cls = get_rewriter_class(args.rewriter)
    own = {option.flag for option in cls.options}
    given = [o for group in rewriter_options().values() for o in group if getattr(args, o.dest) is not None]
    if stray := [o.flag for o in given if o.flag not in own]:
        raise UserError(f"{', '.join(stray)}: not an option of --rewriter {args.rewriter}")
    options = {o.param: getattr(args, o.dest) for o in given}
    cls.check_options(**options)
    return options


def open_searcher(args: argparse.Namespace):
    """The searcher for ``--index``, and the teacher's label (None without a teacher)."""
    if index_kind(args.index) == "bm25":
        if args.rewriter != "none" or args.reranker:
            raise UserError("--rewriter and --reranker need a dense index; this one is BM25")
        from tour_pyserini.search.bm25 import Bm25Searcher

        return Bm25Searcher.from_index(args.index, k1=args.bm25_k1, b=args.bm25_b, threads=args.threads), None
    from tour_pyserini.search.searcher import TourSearcher
    from tour_pyserini.teachers import TeacherContext, get_teacher

    options = rewriter_flags(args)
    check_faiss_file(Path(args.index) / "index")
    meta = IndexMeta.read(args.index)
    for param, flag in (("depth", "--k"), ("prf_depth", "--prf-depth")):
        if meta is not None and options.get(param, 0) > meta.num_docs:
            raise UserError(f"{flag} {options[param]} is larger than the index ({meta.num_docs} documents)")
    context = TeacherContext(index_dir=args.index, max_length=args.reranker_max_length)
    teacher = get_teacher(args.reranker, context) if args.reranker else None
    if args.score_store:
        options["store"] = open_score_store(args.score_store, teacher)
    rewriter = get_rewriter(args.rewriter, teacher=teacher, **options)
    searcher = TourSearcher.from_index(args.index, encoder=args.encoder, rewriter=rewriter, threads=args.threads)
    if teacher is not None and teacher.oracle:
        print("warning: ORACLE teacher — these results read the relevance judgements (an upper bound, "
              "not a system); the run tag is marked 'oracle'", file=sys.stderr)  # fmt: skip
    return searcher, teacher.label if teacher else None


def open_score_store(path: str, teacher):
    from tour_pyserini.teachers import ScoreStore

    if teacher is None or not teacher.pairwise:
        raise UserError("--score-store keeps the scores of a --reranker whose pair scores stand alone "
                        "(cross-encoder, bm25, oracle)")  # fmt: skip
    return ScoreStore(path, teacher.fingerprint)


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
