"""python -m tour_pyserini.eval: score TREC runs and print a table (or JSON).

Two modes: ``--qrels FILE`` (ir-measures metrics, trec_eval -c semantics) or ``--answers TOPICS`` with
``--collection DIR`` or ``--index DIR`` (DPR answer-string top-k accuracy for open-domain QA).
``--predictions FILE --answers TOPICS`` scores answer predictions instead: exact match and token F1.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tour_pyserini.commands.flags import ArgumentParser
from tour_pyserini.commands.judging import add_judgement_arguments, judgements
from tour_pyserini.commands.outputs import staged_output
from tour_pyserini.errors import UserError
from tour_pyserini.eval.judge import is_sum
from tour_pyserini.eval.scoring import score_predictions, score_runs


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="python -m tour_pyserini.eval", description=__doc__)
    add_judgement_arguments(ap)
    ap.add_argument("--run", nargs="+", help="one or more TREC run files")
    ap.add_argument(
        "--predictions",
        nargs="+",
        metavar="FILE",
        help="answer predictions (JSON lines from the "
        "answer command) instead of runs: EM and token F1 against --answers",
    )
    ap.add_argument(
        "--write-answer-qrels",
        metavar="FILE",
        help="write qid 0 docid has_answer for the first "
        "max(--topk) passages of the (first) run, so ir-measures' Success@k gives Acc@k",
    )
    ap.add_argument("--per-query", action="store_true", help="print per-query values too")
    ap.add_argument("--json", action="store_true", help="print {metric: value} (one object per run) instead")
    return ap


def format_table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [
        "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = parser()
    args = ap.parse_args(argv)
    if bool(args.run) == bool(args.predictions):
        ap.error("give --run or --predictions (one of them)")
    if args.predictions and args.write_answer_qrels:
        raise UserError("--write-answer-qrels judges the passages of a run; predictions hold answers")
    if args.predictions:
        results, qids = score_predictions(args.predictions, args.answers, args.regex)
    elif args.write_answer_qrels is None:
        results, qids = score_runs(judgements(args), args.run)
    elif not args.answers:
        raise UserError("--write-answer-qrels needs --answers")  # said before any run is scored
    else:
        with staged_output(args.write_answer_qrels, "--write-answer-qrels") as staged:
            results, qids = score_runs(judgements(args), args.run, str(staged))
    if args.json:
        for run, ev in results.items():
            obj = dict(ev.means)
            if args.per_query:
                obj["per_query"] = ev.per_query
            if ev.per_relation:
                obj["per_relation"] = ev.per_relation
            print(json.dumps(obj if len(results) == 1 else {"run": run, **obj}))
        return
    names = list(next(iter(results.values())).means)
    sums = {n for n in names if is_sum(n)}

    def cell(name: str, value: float | None) -> str:  # a count as trec_eval prints it; no value (Accuracy) as '-'
        if value is None:
            return "-"
        return f"{value:.0f}" if name in sums and value.is_integer() else f"{value:.4f}"

    if args.per_query:
        for run, ev in results.items():
            rows = [["qid", *names]] + [[qid, *(cell(n, ev.per_query[n].get(qid)) for n in names)] for qid in qids]
            print(f"{run}\n{format_table(rows)}\n")
    for run, ev in results.items():
        if ev.per_relation:  # EntityQuestions: one row per relation
            rel = ev.per_relation
            rows = [["relation", *names]] + [[r, *(f"{rel[r][n]:.4f}" for n in names)] for r in rel]
            print(f"{run} by relation\n{format_table(rows)}\n")
    rows = [["run", *names]] + [[Path(run).name, *(cell(n, ev.means[n]) for n in names)] for run, ev in results.items()]
    print(format_table(rows))
    counts = f"; {', '.join(sorted(sums))} summed, as ir-measures sums them" if sums else ""
    print(f"({len(qids)} judged queries; queries missing from a run count as 0{counts})")
