"""python -m tour_pyserini compare: runs against a baseline, with paired significance tests.

For every metric: each run's mean, its difference to the baseline, the paired t-test and paired
randomisation-test p-values, and per-query wins/ties/losses. Judgements come from ``--qrels`` (ir-measures)
or ``--answers`` (DPR answer-string accuracy), exactly as in ``python -m tour_pyserini.eval``; with
``--predictions``, the files are answer predictions and the metrics exact match and token F1.

``--diff`` needs no judgements: it says whether each run is the baseline's run, bit for bit or up to ties
within 1e-5 (scores within 1e-5, swaps only between documents within 1e-5 of each other, a near-tie at the
depth cut-off), and where it first differs; the exit status is 1 if any run differs.

    python -m tour_pyserini compare --qrels qrels/scifact.test.txt --baseline runs/scifact.minilm.trec \\
        --run runs/scifact.tour-soft-20.bm25.trec runs/scifact.rerank-100.bm25.trec --metrics nDCG@10 R@100
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tour_pyserini.commands.flags import ArgumentParser
from tour_pyserini.commands.judging import add_judgement_arguments, judgements
from tour_pyserini.commands.outputs import check_output, staged_output
from tour_pyserini.errors import UserError
from tour_pyserini.eval.compare import compare, plot, render
from tour_pyserini.eval.scoring import score_runs
from tour_pyserini.files.runs import read_run
from tour_pyserini.files.sameness import diff_runs
from tour_pyserini.numbers import non_negative_int, positive_int


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(
        prog="python -m tour_pyserini compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_judgement_arguments(ap, required=False)
    ap.add_argument("--baseline", required=True, help="the run the others are compared to")
    ap.add_argument("--run", required=True, nargs="+", help="runs to compare with the baseline")
    ap.add_argument("--format", choices=["markdown", "csv"], default="markdown")
    ap.add_argument("--trials", type=positive_int, default=10_000, help="randomisation-test permutations")
    ap.add_argument(
        "--seed", type=non_negative_int, default=0, help="randomisation-test seed (same seed, same p-values)"
    )
    ap.add_argument("--plot", metavar="FILE.png", help="per-query difference plot (first metric)")
    ap.add_argument(
        "--predictions",
        action="store_true",
        help="--baseline and --run are answer predictions (the "
        "answer command's JSON lines): EM and token F1 against --answers, paired per question",
    )
    ap.add_argument(
        "--diff",
        action="store_true",
        help="no metrics: is each run the baseline's run (bit for bit, "
        "or the same up to ties within 1e-5)? Exit status 1 if one is not",
    )
    return ap


def print_diffs(baseline: str, runs: list[str]) -> bool:
    """One line per run: how it differs from the baseline by the sameness rule; True if all are the same."""
    base = read_run(baseline)
    diffs = {run: diff_runs(base, read_run(run)) for run in runs}  # every run is read before any line
    for run, diff in diffs.items():
        print(f"{run}: {diff.summary()}")
    return all(diff.same for diff in diffs.values())


def check_plot(path: str) -> None:
    """A plot file that can be written, in a format its name gives (matplotlib goes by the suffix)."""
    from matplotlib.backend_bases import FigureCanvasBase

    kinds = FigureCanvasBase.get_supported_filetypes()
    if Path(path).suffix[1:].lower() not in kinds:
        raise UserError(f"--plot {path}: name a file with the suffix of an image format ({', '.join(sorted(kinds))})")
    check_output(path, "--plot")


def main(argv: list[str] | None = None) -> None:
    ap = parser()
    args = ap.parse_args(argv)
    if args.diff and args.predictions:
        raise UserError("--diff compares TREC runs; --predictions files are compared by their EM and F1")
    if args.diff:
        if args.plot:
            raise UserError("--plot draws metric differences; --diff computes none")
        if not print_diffs(args.baseline, args.run):
            sys.exit(1)
        return
    if not (args.qrels or args.answers):
        ap.error("one of the arguments --qrels --answers is required (or --diff)")
    if args.plot:
        if all(run == args.baseline for run in args.run):
            raise UserError("--plot draws each run's differences to the baseline: give a --run that is not it")
        check_plot(args.plot)  # before the runs are scored
    paths = [args.baseline, *[r for r in args.run if r != args.baseline]]
    if args.predictions:
        from tour_pyserini.eval.scoring import score_predictions

        results, qids = score_predictions(paths, args.answers, args.regex)
    else:
        results, qids = score_runs(judgements(args), paths)
    per_query = {run: ev.per_query for run, ev in results.items()}
    rows = compare(per_query, args.baseline, qids, args.trials, args.seed)
    print(render(rows, args.format, args.baseline))
    print(
        f"({len(qids)} queries; missing queries count as 0; randomisation: {args.trials} trials, seed {args.seed})",
        file=sys.stderr,
    )
    if args.plot:
        with staged_output(args.plot, "--plot") as staged:
            plot(per_query, args.baseline, qids, next(iter(per_query[args.baseline])), str(staged))
