"""tour-pyserini regressions: build, search and score the shipped configurations, and check each value against
the one its regression file expects (``regressions/NAME.yaml``; the format is in ``tour_pyserini.files.regressions``).

Each index and search runs as the command printed before it, so any line can be copied and run alone; indexes
already built are reused (the index command checks them), runs are searched again. Exits 1 when a value is
farther from the one expected than its tolerance.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

from tour_pyserini.commands.eval import format_table
from tour_pyserini.commands.flags import ArgumentParser
from tour_pyserini.errors import UserError
from tour_pyserini.eval.scoring import Judgements, score_predictions, score_runs
from tour_pyserini.files.declarations import shown
from tour_pyserini.files.regressions import (
    ANSWER_METRICS,
    Measured,
    Regression,
    check_values,
    find_regression,
    regression_names,
)


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="tour-pyserini regressions", description=__doc__)
    ap.add_argument(
        "regressions", nargs="*", metavar="NAME", help="regression names or files (default: every one in regressions/)"
    )
    ap.add_argument("--ci", action="store_true", help="only the regressions marked ci: true (the cheap ones)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    ap.add_argument("--score-only", action="store_true", help="score the runs already written, searching nothing")
    return ap


def commands(regression: Regression) -> list[list[str]]:
    """The index and search commands of a regression, in order, as typed after ``python -m tour_pyserini``."""
    topics = shown(regression.collection.split(regression.split).topics)
    built = [["index", *flags, "--output", regression.index_path(name)] for name, flags in regression.indexes.items()]
    searched = []
    for run in regression.runs:
        index, path = regression.index_path(run.index), regression.run_path(run.name)
        searched.append(
            ["search", "--index", index, "--topics", topics, "--output", path, "--run-tag", run.name, *run.search]
        )
        if run.answer is not None:
            where = ["--run", path, "--topics", topics, "--index", index, "--output", regression.answers_path(run.name)]
            searched.append(["answer", *where, "--no-resume", *run.answer])
    return built + searched


def run_command(command: list[str], dry_run: bool) -> None:
    print("python -m tour_pyserini " + shlex.join(command), flush=True)
    if dry_run:
        return
    done = subprocess.run([sys.executable, "-m", "tour_pyserini", *command], check=False)
    if done.returncode:
        raise SystemExit(done.returncode)


def score(regression: Regression) -> list[Measured]:
    """Every run's measured values beside the expected ones, after printing the runs' table as eval prints it."""
    judgements = Judgements.of(regression.collection, regression.split)
    paths = [regression.run_path(run.name) for run in regression.runs]
    if missing := [p for p in paths if not Path(p).is_file()]:
        raise UserError(f"{missing[0]}: no such run; search it first (without --score-only)")
    results, qids = score_runs(judgements, paths)
    measured = {run.name: dict(results[p].means) for run, p in zip(regression.runs, paths)}
    for run in regression.runs:
        if run.answer is not None:
            measured[run.name] |= answer_values(regression, run.name)
    print(table(regression, measured))
    print(f"({len(qids)} judged queries; queries missing from a run count as 0)")
    return [m for run in regression.runs for m in check_values(run, measured[run.name])]


def answer_values(regression: Regression, run: str) -> dict[str, float]:
    """The exact match and token F1 of a run's answers (the answer command's predictions) over the split's topics."""
    path = regression.answers_path(run)
    if not Path(path).is_file():
        raise UserError(f"{path}: no such answers file; search and read it first (without --score-only)")
    results, _ = score_predictions([path], str(regression.collection.split(regression.split).topics), False)
    return dict(results[path].means)


def table(regression: Regression, values: dict[str, dict[str, float]]) -> str:
    """Runs by file name and their values under the collection's measures (and their answers'), as ``eval`` prints
    them; "–" where a run has no such value."""
    names = [m for m in (*regression.collection.metrics, *ANSWER_METRICS) if any(m in v for v in values.values())]
    rows = [
        [Path(regression.run_path(run)).name, *(f"{v[n]:.4f}" if n in v else "–" for n in names)]
        for run, v in values.items()
    ]
    return format_table([["run", *names], *rows])


def expected_table(regression: Regression) -> str:
    """The table the runner prints when every value is the one expected: what the docs show."""
    return table(regression, {run.name: run.expect for run in regression.runs})


def report(regression: Regression, measured: list[Measured]) -> bool:
    return report_values(measured, regression.path)


def report_values(measured: list[Measured], path: Path) -> bool:
    """A line for each value farther from the one expected than its tolerance, then the verdict; True if none is."""
    misses = [m for m in measured if not m.holds]
    for m in misses:
        value = "not scored" if m.value is None else f"{m.value:.4f}"
        print(f"  {m.run} {m.measure}: {value}, expected {m.expected:.4f} ± {m.tolerance:g}")
    verdict = f"{len(measured) - len(misses)} of {len(measured)} values as {shown(path)} expects"
    print(("ok: " if not misses else "FAILED: ") + verdict)
    return not misses


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    names = args.regressions or regression_names()
    regressions = [find_regression(name) for name in names]  # every file checked before anything runs
    if args.ci:
        regressions = [r for r in regressions if r.ci]
    if not regressions:
        raise UserError("no regression to run" + (" (none is marked ci: true)" if args.ci else ""))
    failed = []
    for regression in regressions:
        if not args.score_only:
            for command in commands(regression):
                run_command(command, args.dry_run)
        if not args.dry_run and not report(regression, score(regression)):
            failed.append(regression.name)
    if failed:
        print(f"regressions that failed: {', '.join(failed)}", file=sys.stderr)
        sys.exit(1)
