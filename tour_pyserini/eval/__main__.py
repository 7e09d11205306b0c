"""python -m tour_pyserini.eval: score TREC runs and print a table (or JSON).

Two modes: ``--qrels FILE`` (ir-measures metrics, trec_eval -c semantics) or ``--answers TOPICS`` with
``--collection DIR`` or ``--index DIR`` (DPR answer-string top-k accuracy for open-domain QA).
"""

from __future__ import annotations

import argparse
import json
import tempfile
from contextlib import ExitStack, closing
from pathlib import Path

from tour_pyserini.cli_util import run_cli
from tour_pyserini.data.qrels import read_qrels
from tour_pyserini.data.topics import read_topics
from tour_pyserini.eval.measures import DEFAULT_METRICS, evaluate
from tour_pyserini.index.build import corpus_file
from tour_pyserini.index.docstore import DocStore, read_jsonl_corpus
from tour_pyserini.index.layout import DOCSTORE_FILE
from tour_pyserini.runs import read_run


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tour_pyserini.eval", description=__doc__)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--qrels", help="TREC qrels file")
    mode.add_argument("--answers", metavar="TOPICS", help="topics with answers (JSON lines with 'answers')")
    ap.add_argument("--run", required=True, nargs="+", help="one or more TREC run files")
    ap.add_argument("--metrics", nargs="+", default=list(DEFAULT_METRICS), help="ir-measures names (--qrels)")
    ap.add_argument("--collection", help="collection directory with corpus.jsonl (--answers)")
    ap.add_argument("--index", help="index directory whose document store holds the passages (--answers)")
    ap.add_argument("--topk", type=int, nargs="+", default=[1, 5, 20, 100], help="k of Acc@k (--answers)")
    ap.add_argument("--regex", action="store_true", help="answers are regular expressions (CuratedTrec)")
    ap.add_argument("--write-answer-qrels", metavar="FILE", help="write qid 0 docid has_answer for the first "
                    "max(--topk) passages of the (first) run, so ir-measures' Success@k gives Acc@k")  # fmt: skip
    ap.add_argument("--per-query", action="store_true", help="print per-query values too")
    ap.add_argument("--json", action="store_true", help="print {metric: value} (one object per run) instead")
    return ap


def format_table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
             for row in rows]  # fmt: skip
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def open_docstore(args: argparse.Namespace, stack: ExitStack) -> DocStore:
    if args.index:
        return DocStore(Path(args.index) / DOCSTORE_FILE)
    if not args.collection:
        raise ValueError("--answers needs --collection DIR or --index DIR for the passage texts")
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory())) / DOCSTORE_FILE
    DocStore.build(tmp, read_jsonl_corpus(corpus_file(args.collection)))
    return stack.enter_context(closing(DocStore(tmp)))


def evaluate_answers(args: argparse.Namespace) -> tuple[dict, list[str]]:
    from tour_pyserini.eval.answers import AnswerMatcher, answer_accuracy, answer_qrels

    topics = read_topics(args.answers)
    with ExitStack() as stack:
        matcher = AnswerMatcher(open_docstore(args, stack), regex=args.regex)
        runs = {run: read_run(run) for run in args.run}
        results = {run: answer_accuracy(r, topics, matcher, args.topk) for run, r in runs.items()}
        if args.write_answer_qrels:
            qrels = answer_qrels(next(iter(runs.values())), topics, matcher, max(args.topk))
            lines = "".join(f"{q} 0 {d} {rel}\n" for q, docs in qrels.items() for d, rel in docs.items())
            Path(args.write_answer_qrels).write_text(lines)
    return results, [t.qid for t in topics if t.answers]


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.answers:
        results, qids = evaluate_answers(args)
    else:
        qrels = read_qrels(args.qrels)
        results, qids = {run: evaluate(qrels, read_run(run), args.metrics) for run in args.run}, list(qrels)
    if args.json:
        for run, ev in results.items():
            obj = {"per_query": ev.per_query, **ev.means} if args.per_query else ev.means
            print(json.dumps(obj if len(results) == 1 else {"run": run, **obj}))
        return
    names = list(next(iter(results.values())).means)
    if args.per_query:
        for run, ev in results.items():
            rows = [["qid", *names]] + [[qid, *(f"{ev.per_query[n][qid]:.4f}" for n in names)] for qid in qids]
            print(f"{run}\n{format_table(rows)}\n")
    rows = [["run", *names]] + [[Path(run).name, *(f"{ev.means[n]:.4f}" for n in names)] for run, ev in results.items()]
    print(format_table(rows))
    print(f"({len(qids)} judged queries; queries missing from a run count as 0)")


if __name__ == "__main__":
    run_cli(main)
