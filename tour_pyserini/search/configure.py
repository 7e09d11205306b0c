"""From search arguments to a ready searcher: the rewriter's own flags, the teacher, the index's knobs.

Shared by the command line and by each distributed worker, which opens its own searcher from the same
arguments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tour_pyserini.devices import check_device, resolve_precision
from tour_pyserini.errors import UserError
from tour_pyserini.index.faiss_index import set_search_params
from tour_pyserini.index.layout import IndexMeta, check_faiss_file, index_kind
from tour_pyserini.rewriters import Option, available_rewriters, get_rewriter, get_rewriter_class

STORE_NEEDS_PAIRWISE = (
    "--score-store keeps the scores of a --reranker whose pair scores stand alone "
    "(cross-encoder, bm25, dense, ensemble, oracle)"
)


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


def check_args(args: argparse.Namespace) -> dict:
    """Everything about the arguments that can be checked before a model or the JVM loads; returns the
    rewriter's options."""
    if args.score_store:
        from tour_pyserini.teachers.store import check_store_path

        if not args.reranker:
            raise UserError(STORE_NEEDS_PAIRWISE)
        check_store_path(args.score_store)
    if index_kind(args.index) == "bm25":
        if args.rewriter != "none" or args.reranker:
            raise UserError("--rewriter and --reranker need a dense index; this one is BM25")
        if args.ef_search is not None or args.nprobe is not None:
            raise UserError("--ef-search and --nprobe apply to dense indexes; this one is BM25")
        return {}
    options = rewriter_flags(args)
    index = check_faiss_file(Path(args.index) / "index")
    set_search_params(index, ef_search=args.ef_search, nprobe=args.nprobe, where=args.index)
    meta = IndexMeta.read(args.index)
    for param, flag in (("depth", "--k"), ("prf_depth", "--prf-depth")):
        if meta is not None and options.get(param, 0) > meta.num_docs:
            raise UserError(f"{flag} {options[param]} is larger than the index ({meta.num_docs} documents)")
    check_device(args.device)
    if args.reranker_precision:
        resolve_precision(args.reranker_precision, args.device, "--reranker-precision")
    return options


def open_searcher(args: argparse.Namespace):
    """The searcher for ``--index``, and the teacher's label (None without a teacher)."""
    options = check_args(args)
    threads = args.threads or 1
    if index_kind(args.index) == "bm25":
        from tour_pyserini.search.bm25 import Bm25Searcher

        return Bm25Searcher.from_index(args.index, k1=args.bm25_k1, b=args.bm25_b, threads=threads), None
    if args.threads:  # the encoder and a cross-encoder teacher share torch's process-wide thread pool
        import torch

        torch.set_num_threads(args.threads)
    from tour_pyserini.search.searcher import TourSearcher
    from tour_pyserini.teachers import get_teacher

    teacher = get_teacher(args.reranker, teacher_context(args)) if args.reranker else None
    if args.score_store:
        options["store"] = open_score_store(args.score_store, teacher)
    rewriter = get_rewriter(args.rewriter, teacher=teacher, **options)
    searcher = TourSearcher.from_index(args.index, encoder=args.encoder, rewriter=rewriter, threads=threads,
                                       ef_search=args.ef_search, nprobe=args.nprobe, device=args.device)  # fmt: skip
    if teacher is not None and teacher.oracle:
        print("warning: ORACLE teacher — these results read the relevance judgements (an upper bound, "
              "not a system); the run tag is marked 'oracle'", file=sys.stderr)  # fmt: skip
    return searcher, teacher.label if teacher else None


def teacher_context(args: argparse.Namespace):
    """What the ``--reranker`` spec may refer to, from the search arguments."""
    from tour_pyserini.teachers import TeacherContext

    return TeacherContext(index_dir=args.index, max_length=args.reranker_max_length, device=args.device,
                          precision=args.reranker_precision)  # fmt: skip


def open_score_store(path: str, teacher):
    from tour_pyserini.teachers import ScoreStore

    if teacher is None or not teacher.pairwise:
        raise UserError(STORE_NEEDS_PAIRWISE)
    return ScoreStore(path, teacher.fingerprint)
