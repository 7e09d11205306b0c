"""tour-pyserini experiment: run a benchmark declared as data (``experiments/NAME.yaml``; the format is in
``tour_pyserini.files.experiments``) and write its report: the table, the rows with their per-query values, paired
tests Holm-corrected over the table, and one quality-against-cost plot per collection. A timing file (one with
``ways:``, format in ``tour_pyserini.files.timings``) times commands side by side instead: medians over rounds,
idle cores checked, each encoding beside its floor, the comparisons' bounds checked with ``--check``. A transfer file
(one with ``folds:``, format in ``tour_pyserini.files.transfers``) measures whether TTT-Embed's shared states carry
over to queries nobody judged: every query unseen once, the Δs Holm-corrected over each table.

Every row's flags are checked by the search command's parser before anything loads; each search is assembled by the
composition root. Rows are stored as they finish (``OUTPUT.rows.jsonl``): run the same command again and it goes on
where it stopped.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from functools import cache
from pathlib import Path

from tour_pyserini.commands.flags import ArgumentParser
from tour_pyserini.commands.regressions import report_values, run_command
from tour_pyserini.errors import UserError
from tour_pyserini.files.collections import Collection
from tour_pyserini.files.experiments import NO_TEACHER, Cell, Experiment, check_rows, experiment_names, find_experiment
from tour_pyserini.files.timings import Timing
from tour_pyserini.files.transfers import Transfer
from tour_pyserini.numbers import positive_int


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="tour-pyserini experiment", description=__doc__)
    ap.add_argument("experiment", nargs="?", metavar="NAME", help="an experiment's name or file")
    ap.add_argument("--collections", nargs="+", metavar="NAME", help="only these of its collections")
    ap.add_argument(
        "--teachers",
        nargs="+",
        metavar="KIND",
        help="only teachers of these kinds (bm25, ensemble, ...); a transfer's by name",
    )
    ap.add_argument("--budgets", nargs="+", type=positive_int, metavar="B", help="only these budgets")
    ap.add_argument("--limit", type=positive_int, help="the first N judged queries only (a smoke run)")
    ap.add_argument("--batch-size", type=positive_int, help="queries per search call (default: the file's)")
    ap.add_argument("--repeats", type=positive_int, default=1, help="timed passes per row (the median is reported)")
    ap.add_argument("--output", help="the report's path without suffix (default: runs/bench-NAME)")
    ap.add_argument(
        "--check",
        action="store_true",
        help="check each row the file expects values of (its expect:); exit 1 where one is farther than its tolerance",
    )
    ap.add_argument(
        "--dry-run", action="store_true", help="print each row and the search command of its run; run nothing"
    )
    ap.add_argument("--fresh", action="store_true", help="measure every row again, reusing none stored")
    ap.add_argument("--rounds", type=positive_int, help="a timing's rounds (default: the file's)")
    ap.add_argument("--ways", nargs="+", metavar="WAY", help="a timing's ways: only these (and what they compare with)")
    ap.add_argument("--tables", nargs="+", metavar="TABLE", help="a transfer's tables: only these")
    ap.add_argument(
        "--merge",
        nargs="+",
        metavar="PER_QUERY_JSON_GZ",
        help="measure nothing: one table and one Holm family from reports' .per-query.json.gz",
    )
    return ap


@cache
def search_of(flags: tuple[str, ...], index: str):
    """What a row's flags mean to the search command's parser (parsed once: checking and running share it)."""
    from tour_pyserini.commands.search import parser as search_parser
    from tour_pyserini.commands.search import search_spec
    from tour_pyserini.experiments.runner import Search

    args = search_parser().parse_args([*flags, "--index", index, "--topics", "-", "--output", "-"])
    return Search(search_spec(args), args.remove_query, args.batch_size)


def build_indexes(collection: Collection) -> None:
    """A registered collection's dense and BM25 indexes (``indexes/NAME.minilm``, ``.bm25``), built or reused by the
    index command, each printed as it runs."""
    for kind, flags in (("minilm", []), ("bm25", ["--bm25"])):
        run_command(["index", *flags, "--collection", collection.name, "--output", collection.index_path(kind)], False)


def chosen_cells(experiment: Experiment, args: argparse.Namespace) -> dict[str, list[Cell]]:
    names = chosen(args.collections, list(experiment.collections), "collections", experiment.name)
    teachers = set(args.teachers) if args.teachers else None
    return {name: experiment.cells(name, teachers, args.budgets) for name in names}


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.merge:
        from tour_pyserini.experiments.report import merge, write_report

        if not args.experiment or not args.output:
            raise UserError("--merge needs the experiment (its title and tests) and --output")
        experiment = find_experiment(args.experiment)
        if not isinstance(experiment, Experiment):
            raise UserError(f"--merge makes one table of reports' rows; {experiment.name} is not a methods table")
        source = f"tour-pyserini experiment {args.experiment} --merge " + " ".join(args.merge)
        rows = merge(args.merge)
        write_report(rows, args.output, experiment.title, source, experiment.baseline, experiment.compare_within_budget)
        return
    if not args.experiment:
        raise UserError(f"name an experiment: {', '.join(experiment_names()) or 'none in experiments/'}")
    experiment = find_experiment(args.experiment)
    if isinstance(experiment, Timing):
        return time_ways(experiment, args, argv)
    if isinstance(experiment, Transfer):
        return transfer_rows(experiment, args, argv)
    refuse(args, ("rounds", "ways", "tables"), f"is a timing's or a transfer's option; {experiment.name} is neither")
    if args.batch_size:
        experiment = replace(experiment, batch_size=args.batch_size)
    cells = chosen_cells(experiment, args)
    if args.check and args.limit:
        raise UserError("--check compares rows over every query with the values expected of them: drop --limit")
    from tour_pyserini.pipeline import plan

    for name, mine in cells.items():  # every search's flags checked before any index is built or model loads
        index = experiment.collections[name].index
        plan(search_of(experiment.search + experiment.collections[name].search, index).spec)
        for cell in mine:
            plan(search_of(cell.flags, index).spec, asks_teacher=cell.fit is not None)
            if cell.teacher != NO_TEACHER and experiment.warm_up:
                plan(search_of(experiment.warm_up_flags(name, cell.teacher), index).spec)
    if args.dry_run:
        from tour_pyserini.experiments.runner import row_command

        for cell in (cell for mine in cells.values() for cell in mine):
            print(
                f"{cell.collection} {cell.method} {cell.teacher} {cell.budget or '-'}: {row_command(experiment, cell)}"
            )
        return
    for name in cells:
        build_indexes(experiment.collections[name].collection)
    from tour_pyserini.experiments.report import write_report
    from tour_pyserini.experiments.runner import RowStore, run_experiment

    output = args.output or f"runs/bench-{experiment.name}"
    store_path = Path(f"{output}.rows.jsonl")
    if args.fresh:
        store_path.unlink(missing_ok=True)
    rows = run_experiment(experiment, cells, search_of, RowStore(store_path), limit=args.limit, repeats=args.repeats)
    source = "tour-pyserini experiment " + " ".join(argv if argv is not None else [experiment.name])
    write_report(rows, output, experiment.title, source, experiment.baseline, experiment.compare_within_budget)
    print(f"report: {output}.md, {output}.json, {output}.per-query.json.gz and {output}-COLLECTION.png")
    if args.check:
        measured = check_rows(experiment, rows)
        if not measured:
            raise UserError(f"{experiment.path} expects no value of the rows run: nothing to check")
        if not report_values(measured, experiment.path):
            sys.exit(1)


ROW_FLAGS = ("collections", "teachers", "budgets", "limit", "batch_size", "fresh", "merge", "repeats")


def refuse(args: argparse.Namespace, flags: tuple[str, ...], why: str) -> None:
    """One line for the first of ``flags`` given (``--repeats``: other than 1) that this kind of experiment takes no
    part of."""
    given = [f for f in flags if (args.repeats != 1 if f == "repeats" else getattr(args, f))]
    if given:
        raise UserError(f"--{given[0].replace('_', '-')} {why}")


def checked_ways(timing: Timing, args: argparse.Namespace) -> tuple[Timing, dict[str, int]]:
    """``timing`` with only the ways asked for (and those they compare with), each way's flags parsed by its own
    command before anything runs; the batch size of each search way (its traces' first batch is the warm-up)."""
    refuse(args, (*ROW_FLAGS, "tables"), f"is not a timing's option ({timing.name} times ways)")
    ways = dict(timing.ways)
    if args.ways:
        keep = set(chosen(args.ways, list(ways), "ways", timing.name))
        for c in timing.compare.values():
            if c.way in keep or c.against in keep:
                keep |= {c.way, c.against}
        ways = {n: w for n, w in ways.items() if n in keep}
    compare = {n: c for n, c in timing.compare.items() if c.way in ways and c.against in ways}
    timing = replace(timing, ways=ways, compare=compare, rounds=args.rounds or timing.rounds)
    from tour_pyserini.commands.answer import parser as answer_parser
    from tour_pyserini.files import read_topics
    from tour_pyserini.files.timings import RUN_OF
    from tour_pyserini.pipeline import plan

    queries = len(read_topics(timing.collection.split(timing.split).topics)[: timing.queries])
    batch_sizes = {}
    for way in ways.values():
        flags = [RUN_OF.sub("run.trec", f) for f in way.flags]
        if way.command == "search":
            search = search_of((*timing.search, *flags), timing.index)
            plan(search.spec)
            batch_sizes[way.name] = size = search.batch_size
            if size >= queries:  # the first batch is the warm-up: nothing would be left to time
                raise UserError(f"{timing.path}: way {way.name!r}: its batch of {size} holds all {queries} queries")
        elif way.command == "answer":
            answer_parser().parse_args([*flags, "--index", timing.index, "--topics", "-", "--output", "-"])
    return timing, batch_sizes


def time_ways(timing: Timing, args: argparse.Namespace, argv: list[str] | None) -> None:
    """A timing file's ways side by side: the report (``OUTPUT.json`` keeps other CPUs' figures) and its checks."""
    import json
    import os
    import tempfile

    timing, batch_sizes = checked_ways(timing, args)
    if args.dry_run:
        with tempfile.TemporaryDirectory() as tmp:
            from tour_pyserini.experiments.timing import TimingRun

            run = TimingRun(timing, Path(tmp), batch_sizes, os.cpu_count() or 1, encoder="{encoder}")
            for way in timing.ways.values():
                for kernels in way.kernels:
                    env = " ".join(f"{k}={v}" for k, v in timing.kernels[kernels].items())
                    print(f"{way.name} ({kernels}): {env + ' ' if env else ''}{' '.join(run.argv(way, kernels))}")
        return
    build_indexes(timing.collection)
    from tour_pyserini.experiments.pages import timing_section
    from tour_pyserini.experiments.timing import run_timing

    with tempfile.TemporaryDirectory() as tmp:
        report = run_timing(timing, Path(tmp), batch_sizes, os.cpu_count() or 1)
    report["source"] = "tour-pyserini experiment " + " ".join(argv if argv is not None else [timing.name])
    output = Path(args.output or f"runs/bench-{timing.name}")
    json_path = output.with_name(output.name + ".json")
    kept = json.loads(json_path.read_text()) if json_path.is_file() else {}
    kept[report["cpu"]] = report  # each CPU's figures beside the others'
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(kept, indent=1) + "\n")
    others = [cpu for cpu in kept if cpu != report["cpu"]]
    note = f"\n{json_path.name} also holds the figures of: {'; '.join(others)}.\n" if others else ""
    output.with_name(output.name + ".md").write_text(f"# {timing.title}\n\n{timing_section(report)}{note}")
    print(timing_section(report))
    if args.check and not all(c["ok"] for c in report["compare"]):
        sys.exit(1)


def chosen(given: list[str] | None, known, what: str, name: str) -> list[str]:
    """``given`` (default: all ``known``), each one of ``known``."""
    if stray := [g for g in given or [] if g not in known]:
        raise UserError(f"--{what} {stray[0]}: not one of {name}'s: {', '.join(known)}")
    return list(given or known)


def transfer_rows(transfer: Transfer, args: argparse.Namespace, argv: list[str] | None) -> None:
    """A transfer file's rows on the collections, teachers and tables asked for: its report, and its checks."""
    refuse(args, ("budgets", "limit", "batch_size", "merge", "rounds", "ways", "repeats"), "is not a transfer's option")
    names = chosen(args.collections, list(transfer.collections), "collections", transfer.name)
    teachers = chosen(args.teachers, transfer.teachers, "teachers", transfer.name)
    tables = chosen(args.tables, list(dict.fromkeys(v.table for v in transfer.variants)), "tables", transfer.name)
    variants = [
        v for v in transfer.variants if v.teacher in teachers and v.table in tables and set(v.collections) & set(names)
    ]
    if not variants:
        raise UserError(f"{transfer.name} has no row of those teachers in those tables on those collections")
    if any(v.held_out and len(set(v.collections) & set(names)) < 2 for v in variants):
        raise UserError("a held-out table fits on the other collections: give two collections or more")
    if args.dry_run:
        for v in variants:
            print(f"{v.key}: {', '.join(c for c in v.collections if c in names)}")
        return
    used = {c for v in variants for c in v.collections if c in names}
    for name in sorted(used):
        encoder = transfer.collections[name].encoder
        if encoder is not None and not Path(encoder).is_dir():
            using = sorted({v.table for v in variants if name in v.collections})
            raise UserError(
                f"{transfer.path}: collection {name!r}: its encoder {encoder} is not there: train it first, or "
                f"leave out table(s) {', '.join(using)} with --tables"
            )
    for name in names:
        build_indexes(transfer.collections[name].collection)
    from tour_pyserini.experiments.transfer import run_transfer, write_transfer_report
    from tour_pyserini.files.regressions import Measured

    output = args.output or f"runs/bench-{transfer.name}"
    rows = run_transfer(transfer, names, variants, output, args.fresh)
    source = "tour-pyserini experiment " + " ".join(argv if argv is not None else [transfer.name])
    write_transfer_report(rows, output, transfer.title, source)
    print(Path(f"{output}.md").read_text())
    if args.check:
        measured = [
            Measured(row["key"], name, expected, row["collections"].get(name, {}).get("delta"), transfer.tolerance)
            for row in rows
            for name, expected in transfer.expect.get(row["key"], {}).items()
            if name in names
        ]
        if not measured:
            raise UserError(f"{transfer.path} expects no value of the rows run: nothing to check")
        if not report_values(measured, transfer.path):
            sys.exit(1)
