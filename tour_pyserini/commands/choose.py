"""tour-pyserini choose: which test-time method for my collection? Every method the toolkit has (dense retrieval,
Rocchio, average PRF, DART, re-ranking, ReFIT, TOUR-hard and -soft, TTT-Embed's per-query state) measured on your
own training queries with one teacher at one budget of calls per query, through the benchmark runner; a table with
each method's metric (95% confidence interval), teacher calls and milliseconds a query, and paired t-tests against
dense retrieval and against re-ranking, Holm-corrected; then the best method within the limits, or the word that
none beats dense retrieval significantly. ``--output FILE`` writes the commands that run it (``TOPICS`` left for
you to name).

    tour-pyserini choose --index indexes/scifact.minilm --topics scifact-train --qrels scifact-train \\
        --teacher bm25 --budget 10 --max-ms-per-query 50 --output chosen.sh

Give it training queries: the queries it is given are the ones it measures, and a choice judged on them again is
judged on the queries it was made on. It warns when they are a registered collection's test queries.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tour_pyserini.commands.experiment import search_of
from tour_pyserini.commands.flags import ArgumentParser
from tour_pyserini.errors import UserError
from tour_pyserini.experiments.choose import Choice, ChooseOptions, experiment_of
from tour_pyserini.numbers import positive_float, positive_int


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(
        prog="tour-pyserini choose", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--index", required=True, help="the dense index the methods search")
    ap.add_argument("--topics", help="training topics: a file, or a collection's COLLECTION-SPLIT (with --qrels)")
    judged = ap.add_mutually_exclusive_group(required=True)
    judged.add_argument("--qrels", help="their judgments (a file or COLLECTION-SPLIT)")
    judged.add_argument(
        "--answers", metavar="TOPICS", help="or training questions with their answer strings (DPR's top-k accuracy)"
    )
    ap.add_argument(
        "--teacher", required=True, help="the teacher every method with one asks (bm25, cross-encoder:DIR, ...)"
    )
    ap.add_argument("--budget", type=positive_int, required=True, help="teacher calls per query (each method's depth)")
    ap.add_argument("--metric", help="what decides (default: nDCG@10 with qrels, Acc@1 with answers)")
    ap.add_argument("--max-ms-per-query", type=positive_float, help="a chosen method's limit of milliseconds a query")
    ap.add_argument("--max-calls-per-query", type=positive_float, help="its limit of teacher calls a query")
    ap.add_argument("--hits", type=positive_int, default=100, help="hits per query (default: 100)")
    ap.add_argument("--batch-size", type=positive_int, default=32, help="queries searched together (default: 32)")
    ap.add_argument("--search", default="", help="flags every method's search gets, as typed (e.g. --remove-query)")
    ap.add_argument("--limit", type=positive_int, help="the first N judged queries only (a smoke run)")
    ap.add_argument("--output", help="write the chosen method's commands here (TOPICS for you to name)")
    return ap


def options_of(args: argparse.Namespace) -> ChooseOptions:
    import shlex

    from tour_pyserini.files.staging import check_output

    if args.output:
        check_output(args.output)
    if args.answers and args.topics and args.topics != args.answers:
        raise UserError("--answers are the questions themselves: give them as --answers alone, without --topics")
    if args.qrels and not args.topics:
        raise UserError("--qrels judges --topics: give the topics too")
    return ChooseOptions(
        args.index,
        args.topics or args.answers,
        args.teacher,
        args.budget,
        args.qrels,
        args.metric,
        args.max_ms_per_query,
        args.max_calls_per_query,
        args.hits,
        args.batch_size,
        tuple(shlex.split(args.search)),
        args.limit,
    )


def check(options: ChooseOptions) -> None:
    """Every method's search checked by the search command's parser and planned, the metric by the collection's
    judge, before any model loads."""
    import re

    from tour_pyserini.eval.judge import parse_metrics
    from tour_pyserini.pipeline import plan

    if options.qrels is None and not re.fullmatch(r"Acc@[1-9]\d*", options.measure):
        raise UserError(f"--metric {options.measure}: answers are scored by top-k accuracy, Acc@K")
    if options.qrels is not None:
        parse_metrics([options.measure])
    experiment = experiment_of(options)
    for name, col in experiment.collections.items():
        for cell in experiment.cells(name):
            plan(search_of(cell.flags, col.index).spec, asks_teacher=cell.fit is not None)


def choose(index: str, topics: str, teacher: str, budget: int, **given) -> Choice:
    """The Python face of the command: ``choose("indexes/scifact.minilm", "scifact-train", "bm25", 10,
    qrels="scifact-train")``; the keywords are :class:`~tour_pyserini.experiments.choose.ChooseOptions`'s."""
    from tour_pyserini.experiments.choose import choose as measure

    options = ChooseOptions(index, topics, teacher, budget, **given)
    check(options)
    return measure(options, search_of)


def main(argv: list[str] | None = None) -> None:
    import time

    from tour_pyserini.experiments.choose import choose as measure

    args = parser().parse_args(argv)
    options = options_of(args)
    check(options)
    start = time.perf_counter()
    choice = measure(options, search_of)
    print(choice.table())
    if choice.chosen is None:
        print(f"No method beats dense retrieval significantly on {options.measure} within the limits: search densely.")
    else:
        row = choice.chosen
        print(f"Chosen: {row['method']} ({options.measure} {row['metrics'][options.measure]:.4f}).")
    print("\n".join(choice.commands))
    print(
        f"({len(next(iter(choice.rows[0]['per_query'].values())))} queries, {time.perf_counter() - start:.0f} s)",
        file=sys.stderr,
    )
    if args.output:
        Path(args.output).write_text("\n".join(choice.commands) + "\n")
