"""tour-pyserini choose: which test-time method for my collection? Every method the toolkit has (dense retrieval,
Rocchio, average PRF, DART, re-ranking, ReFIT, TOUR-hard and -soft, TTT-Embed's states) measured on your own
training queries with one teacher at one budget of calls per query, through the benchmark runner, each method's
settings chosen by cross-validation; a table with each method's metric (95% confidence interval), its setting,
teacher calls and milliseconds a query, and paired t-tests against
dense retrieval and against re-ranking, Holm-corrected; then the best method within the limits, or the word that
none beats dense retrieval significantly. ``--output FILE`` writes the commands that run it (``TOPICS`` left for
you to name).

    tour-pyserini choose --index indexes/scifact.minilm --topics scifact-train --qrels scifact-train \\
        --teacher bm25 --budget 10 --max-ms-per-query 50 --output chosen.sh
    tour-pyserini choose --collection scifact --teacher bm25 --budget 10 --judge-on test --report chosen.json

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
from tour_pyserini.files.collections import find_collection
from tour_pyserini.numbers import positive_float, positive_int

TRAIN = "train"  # the split --collection chooses on


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(
        prog="tour-pyserini choose", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--collection",
        help="a registered collection: its index (indexes/NAME.minilm), its training split's topics and judgments",
    )
    ap.add_argument("--index", help="the dense index the methods search")
    ap.add_argument("--topics", help="training topics: a file, or a collection's COLLECTION-SPLIT (with --qrels)")
    judged = ap.add_mutually_exclusive_group()
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
    ap.add_argument(
        "--search", default="", help="flags every method's search gets, as one word (e.g. --search=--remove-query)"
    )
    ap.add_argument(
        "--teacher-flags",
        default="",
        help="the teacher's options, as one word (e.g. --teacher-flags='--teacher-runtime torch')",
    )
    ap.add_argument("--limit", type=positive_int, help="the first N judged queries only (a smoke run)")
    ap.add_argument("--output", help="write the chosen method's commands here (TOPICS for you to name)")
    ap.add_argument(
        "--judge-on",
        metavar="SPLIT",
        help="with --collection: then run the chosen method on this split of it (queries the choice never saw)",
    )
    ap.add_argument("--report", help="write the table, the choice, its check and the seconds taken here (JSON)")
    return ap


def options_of(args: argparse.Namespace) -> ChooseOptions:
    import shlex

    from tour_pyserini.files.staging import check_output

    for path in (args.output, args.report):
        if path:
            check_output(path)
    if args.collection:
        if args.index or args.topics or args.qrels or args.answers:
            raise UserError("--collection names the index, the topics and their judgments: give none of them with it")
        collection = find_collection(args.collection)
        name = f"{collection.name}-{TRAIN}"
        collection.split(TRAIN)
        args.index = collection.index_path("minilm")
        args.topics, args.qrels = (name, name) if collection.judged_by == "qrels" else (None, None)
        args.answers = name if collection.judged_by == "answers" else None
        if args.judge_on:
            collection.split(args.judge_on)
    elif args.judge_on:
        raise UserError("--judge-on SPLIT runs the choice on a registered collection's split: give --collection")
    if not args.index:
        raise UserError("give --index (or --collection)")
    if not (args.qrels or args.answers):
        raise UserError("give --qrels (or --answers, or --collection)")
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
        tuple(shlex.split(args.teacher_flags)),
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


def choose(index: str, topics, teacher: str, budget: int, **given) -> Choice:
    """The Python face of the command: ``choose("indexes/scifact.minilm", "scifact-train", "bm25", 10,
    qrels="scifact-train")``; the keywords are :class:`~tour_pyserini.experiments.choose.ChooseOptions`'s. ``topics``
    and ``qrels`` may also be PyTerrier's frames (``qid``, ``query``; ``qid``, ``docno``, ``label``), and the
    returned choice's ``to_dataframe()`` is the table ``pt.Experiment`` would show."""
    import tempfile

    from tour_pyserini.experiments.choose import choose as measure

    with tempfile.TemporaryDirectory() as tmp:
        topics = framed(topics, Path(tmp) / "topics.tsv", ("qid", "query"))
        if given.get("qrels") is not None:
            given["qrels"] = framed(given["qrels"], Path(tmp) / "qrels.txt", ("qid", "docno", "label"))
        options = ChooseOptions(index, topics, teacher, budget, **given)
        check(options)
        return measure(options, search_of)


def framed(value, path: Path, columns: tuple[str, ...]) -> str:
    """``value`` as a path: a PyTerrier frame with ``columns`` written to ``path`` (topics as ``qid<TAB>query``, qrels
    as TREC's ``qid 0 docno label``); a path or a collection's split name as it is."""
    if isinstance(value, str | Path):
        return str(value)
    if missing := [c for c in columns if c not in getattr(value, "columns", ())]:
        raise UserError(f"a PyTerrier frame with columns {', '.join(columns)} was expected; it lacks {missing[0]}")
    if columns[-1] == "query":
        lines = [f"{q}\t{' '.join(str(text).split())}" for q, text in zip(value["qid"], value["query"])]
    else:
        lines = [f"{q} 0 {d} {int(label)}" for q, d, label in zip(value["qid"], value["docno"], value["label"])]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def main(argv: list[str] | None = None) -> None:
    import json
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
    seconds = time.perf_counter() - start
    if args.output:
        Path(args.output).write_text("\n".join(choice.commands) + "\n")
    judged = None
    if args.judge_on:
        from tour_pyserini.experiments.choose import judged_on

        judged = judged_on(choice, options, find_collection(args.collection), args.judge_on, search_of)
        p = judged["p_vs_dense"]
        print(
            f"On {judged['split']} ({judged['queries']} queries): {judged['method']} {options.measure} "
            f"{judged[options.measure]:.4f}, dense {judged['dense']:.4f}"
            + ("" if p is None else f" (paired t p {p:.3g})")
        )
    if args.report:
        report = {**choice.to_json(), "teacher": options.teacher, "budget": options.budget, "seconds": seconds}
        if args.collection:
            report["collection"] = args.collection
        Path(args.report).write_text(json.dumps({**report, "judged": judged}, indent=1) + "\n")
