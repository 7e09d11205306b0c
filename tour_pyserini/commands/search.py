"""python -m tour_pyserini.search: search a dense or BM25 index for every topic and write a TREC run.

Dense indexes take a query rewriter (``--rewriter``) and, for rewriters that ask a teacher, a teacher
spec (``--teacher``), such as ``cross-encoder:PATH``, ``bm25`` or ``ensemble:FILE`` (``--help`` lists
them all). Each rewriter declares its own flags (``--help`` lists them by rewriter).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from dataclasses import replace

from tour_pyserini.commands.flags import (
    TEACHER,
    ArgumentParser,
    add_encoder_flags,
    add_param,
    add_teacher_flags,
    encoder_settings,
    teacher_flags,
)
from tour_pyserini.encoders.query import check_encoded_texts
from tour_pyserini.errors import UserError
from tour_pyserini.files.runs import RunWriter
from tour_pyserini.files.topics import read_topics
from tour_pyserini.index.bm25 import K1, B
from tour_pyserini.index.pyserini_catalogue import resolve_index
from tour_pyserini.numbers import Param, non_negative_float, positive_int, probability
from tour_pyserini.pipeline import Plan, SearchSpec, TeacherInfo, build, plan
from tour_pyserini.results import SearchResult, StopReason
from tour_pyserini.rewriters import available_rewriters, get_rewriter_class
from tour_pyserini.runtime import missing_auto_modules
from tour_pyserini.teachers import teacher_usages
from tour_pyserini.teachers.cache import mostly_unscored

# flags that do not change the run, so an interrupted run may resume under different values
_NOT_IN_SIGNATURE = (
    "no_resume",
    "threads",
    "batch_size",
    "trace",
    "ray",
    "workers",
    "score_store",
    "allow_unscored",
    "verbose",
)
DEFAULT_WORKERS = 2


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="python -m tour_pyserini.search", description=__doc__)
    ap.add_argument(
        "--index",
        required=True,
        help="index directory (dense or BM25, detected), or the name of one of Pyserini's prebuilt Faiss indexes",
    )
    ap.add_argument(
        "--topics",
        required=True,
        help="topics file: qid<TAB>text (.tsv) or JSON lines; or a Pyserini topics name such as dpr-nq-test",
    )
    ap.add_argument("--output", required=True, help="TREC run file to write (atomically)")
    ap.add_argument(
        "--encoder",
        help="query encoder: a model directory or hub id (dense only); default: the one the index was built with",
    )
    ap.add_argument("--hits", type=positive_int, default=1000, help="hits per query")
    ap.add_argument("--batch-size", type=positive_int, default=64, help="queries searched together")
    ap.add_argument(
        "--threads",
        type=positive_int,
        help="CPU threads of the searcher (encoder, cross-encoder teacher, "
        "Faiss); default: torch's own (one per core, whatever else the machine runs) for models, 1 for "
        "Faiss; 1 per Ray worker. Model outputs differ in the last bits "
        "between thread counts, so runs are identical only for equal --threads (docs/cli.md)",
    )
    ap.add_argument("--output-format", choices=["trec"], default="trec")
    ap.add_argument("--run-tag", default="tour_pyserini", help="last column of the run file")
    ap.add_argument("--remove-query", action="store_true", help="drop hits whose docid equals the qid (BEIR)")
    ap.add_argument("--no-resume", action="store_true", help="start over even if an interrupted run can resume")
    ap.add_argument("--trace", help="write per-query traces (JSON lines) to this file")
    add_index_flags(ap)
    add_encoder_flags(ap, "query")
    dist = ap.add_argument_group("distributed search on Ray")
    dist.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="search with Ray workers: alone, "
        "a local Ray instance started for this search; 'auto' or ray://HOST:PORT, a running cluster",
    )
    dist.add_argument(
        "--workers",
        type=positive_int,
        help=f"Ray workers, each with its own searcher (one CPU each; default {DEFAULT_WORKERS}); needs --ray",
    )

    add_rewriting_flags(ap.add_argument_group("query rewriting (dense indexes)"))
    for name, options in rewriter_options().items():
        group = ap.add_argument_group(f"{name} options")
        for option in options:
            add_param(group, option)
    return ap


def add_index_flags(ap) -> None:
    """The knobs of the index searched: BM25's parameters, HNSW's and IVF's, and the device."""
    ap.add_argument("--bm25-k1", type=non_negative_float, default=K1, help=f"BM25 indexes: k1 (default {K1})")
    ap.add_argument("--bm25-b", type=probability, default=B, help=f"BM25 indexes: b (default {B})")
    ap.add_argument(
        "--device", default="cpu", help="where the query encoder and a cross-encoder teacher run: cpu, cuda or cuda:N"
    )
    ap.add_argument(
        "--ef-search", type=positive_int, help="HNSW indexes: candidate list size (default: stored in the index)"
    )
    ap.add_argument(
        "--nprobe", type=positive_int, help="IVF-PQ indexes: lists visited per query (default: stored in the index)"
    )


def add_rewriting_flags(rw) -> None:
    """The rewriter, the teacher it asks with the teacher's flags, and what becomes of the teacher's scores."""
    rw.add_argument("--rewriter", default="none", help=f"one of: {', '.join(available_rewriters())}")
    add_param(
        rw,
        replace(
            TEACHER,
            help=f"the scorer rewriters ask: {teacher_usages()} (models/README.md says "
            "which shipped teacher suits which collection)",
        ),
    )
    add_teacher_flags(rw)
    rw.add_argument(
        "--allow-unscored",
        action="store_true",
        help="keep searching when the teacher gives no score "
        "for most pairs of a batch (an API answering nothing usable); a query it scored none of keeps the "
        "retriever's ranking and scores, as its trace says. Without it such a batch stops the search, "
        "whose finished batches a rerun resumes from",
    )
    rw.add_argument(
        "--score-store",
        metavar="FILE",
        help="keep the teacher's scores in this SQLite file, so runs "
        "sharing it score each (query, document) pair once (rerank, tour-*)",
    )


def summarize(results: list[SearchResult]) -> str:
    """One line of per-query averages from the traces: the numbers the TOUR paper reports."""
    if not results:
        return "no queries"
    traces = [r.trace for r in results]
    n = len(traces)
    stopped = sum(t.stop_reason is not None and StopReason(t.stop_reason).early for t in traces)
    kept = sum(t.unjudged for t in traces)
    seconds = ", ".join(f"{phase} {sum(t.seconds[phase] for t in traces) / n:.4f}" for phase in traces[0].seconds)
    unscored = sum(t.unscored for t in traces)
    return (
        f"mean iterations {sum(t.iterations for t in traces) / n:.2f}, "
        f"teacher calls/query {sum(t.teacher_calls for t in traces) / n:.1f}, "
        f"cache hits/query {sum(t.cache_hits for t in traces) / n:.1f}, early stops {stopped}/{n}, "
        + (f"pairs without a score {unscored}, not re-ranked {kept}/{n}, " if unscored else "")
        + f"{seconds} s/query"
    )


def check_scored(results: list[SearchResult], teacher: TeacherInfo | None, kept: str) -> None:
    """Stop the search when the teacher gave no score for most pairs it was asked in a batch: its queries
    would be written in retriever order under the rewriter's name. ``kept``: what stays to resume from."""
    asked = sum(r.trace.teacher_calls for r in results)
    unscored = sum(r.trace.unscored for r in results)
    if teacher is None or not mostly_unscored(unscored, asked):
        return
    plain = sum(r.trace.unjudged for r in results)
    raise UserError(
        f"teacher {teacher.label} gave no score for {unscored} of the {asked} pairs it was asked in a "
        f"batch ({plain} of its {len(results)} queries would keep the retriever's order); the search "
        f"stops, {kept}: run the same command again once the teacher answers, or add "
        "--allow-unscored"
    )


def rewriter_options() -> dict[str, list[Param]]:
    """Every rewriter's flags, grouped under the first rewriter that declares each. A flag several rewriters
    declare (``--depth``) is one parameter with each rewriter's default, which its help lists."""
    declared: dict[str, list[tuple[str, Param]]] = {}
    for name, cls in available_rewriters().items():
        for option in cls.options:
            declared.setdefault(option.option, []).append((name, option))
    groups: dict[str, list[Param]] = {}
    for flag, uses in declared.items():
        first_name, first = uses[0]
        defaults: dict[str | None, list[str]] = {}  # the rewriters of each default
        for name, option in uses:
            if _flag_of(option) != _flag_of(first):
                raise TypeError(f"rewriters declare {flag} differently: {first} and {option}")
            defaults.setdefault(option.default_shown, []).append(name)
        if len(defaults) > 1:
            said = "; ".join(f"{', '.join(names)}: {shown}" for shown, names in defaults.items())
            first = replace(first, default=None, default_text=said)
        groups.setdefault(first_name, []).append(first)
    return groups


def _flag_of(option: Param) -> Param:
    """What must be alike where rewriters share a flag: all but the default and whether it is required."""
    return replace(option, default=None, default_text=None, required=False)


def rewriter_flags(args: argparse.Namespace) -> dict:
    """The options given for ``--rewriter``, by parameter; a flag of another rewriter is an error."""
    own = {option.option for option in get_rewriter_class(args.rewriter).options}
    given = [o for group in rewriter_options().values() for o in group if getattr(args, o.dest) is not None]
    if stray := [o.option for o in given if o.option not in own]:
        raise UserError(f"{', '.join(stray)}: not an option of --rewriter {args.rewriter}")
    return {o.name: getattr(args, o.dest) for o in given}


def search_spec(args: argparse.Namespace) -> SearchSpec:
    return SearchSpec(
        index=args.index,
        encoder=args.encoder,
        encoder_settings=encoder_settings(args),
        encoded_queries=args.encoded_queries,
        encoder_precision=args.encoder_precision,
        encoder_runtime=args.encoder_runtime,
        rewriter=args.rewriter,
        rewriter_options=rewriter_flags(args),
        teacher=args.teacher,
        teacher_max_length=args.teacher_max_length,
        teacher_precision=args.teacher_precision,
        teacher_options=teacher_flags(args),
        score_store=args.score_store,
        threads=args.threads,
        device=args.device,
        ef_search=args.ef_search,
        nprobe=args.nprobe,
        bm25_k1=args.bm25_k1,
        bm25_b=args.bm25_b,
    )


def nothing_carried() -> None:
    """The state of a rewriter that carries none from query to query."""
    return None


Batches = Iterable[tuple[list[str], list[str], int]]  # (texts, qids, hits) of each batch


def batch_searcher(
    args: argparse.Namespace, planned: Plan, stack: ExitStack, carried: bytes | None = None
) -> tuple[Callable[[Batches], Iterator[list[SearchResult]]], TeacherInfo | None, Callable[[], bytes | None]]:
    """A function from (texts, qids, k) batches to their results in order, run here (built from ``planned``) or
    on Ray workers (each planning its own); what the teacher is; and the state the rewriter carries after the
    batches so far (DART's buffer: it starts from ``carried``, a resumed run's)."""
    if args.ray is None:
        pipeline = build(planned)
        run_state: Callable[[], bytes | None] = nothing_carried
        if pipeline.rewriter is not None and pipeline.rewriter.carries:
            pipeline.rewriter.start_run(carried)
            run_state = pipeline.rewriter.run_state
        return lambda batches: (pipeline.run(*batch) for batch in batches), pipeline.info, run_state
    from tour_pyserini.pipeline.distributed import RayPool

    workers = args.workers or DEFAULT_WORKERS
    address = None if args.ray == "local" else args.ray
    pool = stack.enter_context(RayPool(planned.spec, workers=workers, address=address))
    print(f"ray: {workers} workers ready in {pool.startup_seconds:.1f} s")
    return pool.map, pool.teacher, nothing_carried


def write_batch(
    args: argparse.Namespace, writer: RunWriter, results: list[SearchResult], teacher: TeacherInfo | None, carried
) -> None:
    """One batch's results into the run (and their traces), after checking that the teacher scored them."""
    if not args.allow_unscored:
        kept = f"{writer.partial} keeps {len(writer.done)} finished queries" if writer.done else "nothing was written"
        check_scored(results, teacher, kept)
    label = teacher.label if teacher else None
    writer.write_batch(
        [
            (
                r.qid,
                [h for h in r.hits if h.docid != r.qid] if args.remove_query else r.hits,
                {"rewriter": args.rewriter, "teacher": label, **r.trace.to_json()},
            )
            for r in results
        ],
        carried,
    )


def main(argv: list[str] | None = None) -> None:
    from tqdm import tqdm

    ap = parser()
    args = ap.parse_args(argv)
    if args.workers is not None and args.ray is None:
        raise UserError("--workers needs --ray (without it the search runs in this process)")
    signature = {k: v for k, v in vars(args).items() if k not in _NOT_IN_SIGNATURE}
    # what the runtimes' auto resolves from besides the flags: a run resumed after the extra came or went would mix
    # OpenVINO's queries with torch's
    signature["runtime_extra_missing"] = missing_auto_modules()
    # the outputs are checked (writable, distinct, not locked by another search) before any model or JVM loads
    writer = RunWriter(
        args.output,
        args.run_tag,
        signature,
        resume=not args.no_resume,
        trace=args.trace,
        others={"--score-store": args.score_store},
    )
    done: list[SearchResult] = []
    try:
        with writer, ExitStack() as stack:
            topics = read_topics(args.topics)  # bad topics fail before any model or JVM loads
            args.index = resolve_index(args.index)
            planned = plan(search_spec(args))  # in the driver, before any model, the JVM or Ray starts
            if planned.spec.encoded_queries:
                check_encoded_texts(planned.spec.encoded_queries, {t.qid: t.text for t in topics})
            if planned.rewriter is not None and planned.rewriter.carries and args.ray is not None:
                raise UserError(
                    f"--rewriter {args.rewriter} carries its state from query to query in run order: it "
                    "runs in one process, without --ray"
                )
            search, teacher, run_state = batch_searcher(args, planned, stack, writer.carried)
            teacher_label = teacher.label if teacher else None
            start = time.perf_counter()
            if teacher and teacher.oracle and "oracle" not in writer.tag:
                writer.tag = f"{writer.tag}.oracle"
            todo = [t for t in topics if t.qid not in writer.done]
            if len(todo) < len(topics):
                print(f"resuming {args.output}: {len(topics) - len(todo)} of {len(topics)} queries already done")
            batches = [todo[i : i + args.batch_size] for i in range(0, len(todo), args.batch_size)]
            with tqdm(total=len(todo), unit="q", desc="search") as bar:
                for results in search(([t.text for t in b], [t.qid for t in b], args.hits) for b in batches):
                    write_batch(args, writer, results, teacher, run_state())
                    done.extend(results)
                    bar.update(len(results))
    except KeyboardInterrupt:
        if not writer.done:
            raise KeyboardInterrupt("search stopped before any query finished; nothing was written") from None
        raise KeyboardInterrupt(
            f"search stopped: {writer.partial} keeps {len(writer.done)} finished queries; "
            "run the same command again to resume"
        ) from None
    elapsed = time.perf_counter() - start
    print(f"wrote {args.output}: {len(topics)} queries, {elapsed / max(len(todo), 1):.4f} s/query")
    if writer.no_hits:
        print(
            f"warning: {len(writer.no_hits)} of {len(topics)} queries got no hits (first: "
            f"{', '.join(writer.no_hits[:5])}) and are absent from the run; trec_eval -c and ir-measures "
            "count them as 0",
            file=sys.stderr,
        )
    if args.rewriter != "none":
        print(f"{args.rewriter}{f' ({teacher_label})' if teacher_label else ''}: {summarize(done)}")
