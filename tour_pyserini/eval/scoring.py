"""What the eval and compare commands share: judgements from qrels or answers, per-query scores of runs."""

from __future__ import annotations

import argparse
import tempfile
from contextlib import ExitStack, closing
from pathlib import Path

from tour_pyserini.data.qrels import read_qrels
from tour_pyserini.data.topics import read_topics
from tour_pyserini.errors import UserError
from tour_pyserini.eval.judge import DEFAULT_METRICS, Judge, QrelsJudge
from tour_pyserini.index.build import corpus_file
from tour_pyserini.index.docstore import DocStore, read_jsonl_corpus
from tour_pyserini.index.layout import DOCSTORE_FILE
from tour_pyserini.runs import read_run


def add_judgement_arguments(ap: argparse.ArgumentParser, required: bool = True) -> None:
    mode = ap.add_mutually_exclusive_group(required=required)
    mode.add_argument("--qrels", help="TREC qrels file")
    mode.add_argument("--answers", metavar="TOPICS", help="topics with answers (e.g. JSON lines with 'answers')")
    ap.add_argument("--metrics", nargs="+", default=list(DEFAULT_METRICS), help="ir-measures names (--qrels)")
    ap.add_argument("--collection", help="collection directory with corpus.jsonl (--answers)")
    ap.add_argument("--index", help="index directory whose document store holds the passages (--answers)")
    ap.add_argument("--topk", type=int, nargs="+", default=[1, 5, 20, 100], help="k of Acc@k (--answers)")
    ap.add_argument("--regex", action="store_true", help="answers are regular expressions (CuratedTrec)")


def open_docstore(args: argparse.Namespace, stack: ExitStack) -> DocStore:
    if args.index:
        return DocStore(Path(args.index) / DOCSTORE_FILE)
    if not args.collection:
        raise UserError("--answers needs --collection DIR or --index DIR for the passage texts")
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory())) / DOCSTORE_FILE
    DocStore.build(tmp, read_jsonl_corpus(corpus_file(args.collection)))
    return stack.enter_context(closing(DocStore(tmp)))


def open_judge(args: argparse.Namespace, stack: ExitStack) -> Judge:
    """The judge that ``--qrels`` or ``--answers`` (with its passages) asks for."""
    if not args.answers:
        return QrelsJudge(read_qrels(args.qrels), args.metrics)
    from tour_pyserini.eval.answers import AnswerJudge, AnswerMatcher

    matcher = AnswerMatcher(open_docstore(args, stack), regex=args.regex)
    return AnswerJudge(read_topics(args.answers), matcher, args.topk)


def score_runs(args: argparse.Namespace, run_paths, answer_qrels_out: str | None = None) -> tuple[dict, list[str]]:
    """Each run's :class:`Evaluation` ({path: Evaluation}) and the judged qids, in qrels or answers mode."""
    runs = {path: read_run(path) for path in run_paths}  # malformed runs fail before any judging
    with ExitStack() as stack:
        judge = open_judge(args, stack)
        results = {path: judge.evaluate(run) for path, run in runs.items()}
        if answer_qrels_out:
            if not args.answers:
                raise UserError("--write-answer-qrels needs --answers")
            from tour_pyserini.eval.answers import answer_qrels

            qrels = answer_qrels(next(iter(runs.values())), judge.topics, judge.matcher, max(args.topk))
            lines = "".join(f"{q} 0 {d} {rel}\n" for q, docs in qrels.items() for d, rel in docs.items())
            Path(answer_qrels_out).write_text(lines)
    return results, judge.qids
