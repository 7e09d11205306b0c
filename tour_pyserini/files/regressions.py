"""Regressions: the shipped configurations with the values they must give, one YAML file each (as Anserini's).

A regression names a collection of the registry and one of its splits, the indexes it builds (the index command's
flags) and the runs it searches (the search command's flags), each with the values it must score::

    # the README's table
    name: scifact
    collection: scifact
    split: test
    ci: true                     # cheap enough for CI (under about 10 minutes on 2 cores)
    tolerance: 0.00005           # |measured - expected| allowed: the same four printed digits
    indexes:
      minilm: --collection scifact
      bm25: --bm25 --collection scifact
    runs:
      bm25:
        index: bm25
        search: --hits 1000 --remove-query
        expect: {nDCG@10: 0.6789, R@100: 0.9253, RR@10: 0.6457}

A run may also be read (``answer:``, the answer command's flags: a reader over its passages), and then expect the
exact match and token F1 of its answers (``EM``, ``F1``) too. A run may set its own ``tolerance`` with the ``why``
beside it (a CPU whose kernels round otherwise). The flags are
the commands' own, so a regression says nothing a command line could not; the runner writes index ``NAME`` to
``indexes/COLLECTION.NAME`` and run ``RUN`` to ``runs/REGRESSION.RUN.trec`` (its run tag ``RUN``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.files.collections import Collection, find_collection
from tour_pyserini.files.declarations import (
    command_flags,
    declaration_names,
    find_declaration,
    read_declaration,
    read_tolerance,
)

FIELDS = {"name", "collection", "split", "ci", "tolerance", "indexes", "runs"}
RUN_FIELDS = {"index", "search", "answer", "expect", "tolerance", "why"}
INDEX_SET = ("--output",)  # the flags the runner gives each command: where its output goes and what it reads
SEARCH_SET = ("--index", "--topics", "--output", "--run-tag")
ANSWER_SET = ("--run", "--topics", "--index", "--collection", "--output")
ANSWER_METRICS = ("EM", "F1")  # of a run's answers, when the run is read (answer:)


@dataclass(frozen=True)
class RunCheck:
    """One run: the index it searches (a name of the regression's indexes), its search flags, the values expected
    by measure and how far a measured value may be from each."""

    name: str
    index: str
    search: tuple[str, ...]
    expect: dict[str, float]
    tolerance: float
    answer: tuple[str, ...] | None = None  # the answer command's flags, where the run's passages are read


@dataclass(frozen=True)
class Regression:
    name: str
    path: Path
    collection: Collection
    split: str
    ci: bool
    indexes: dict[str, tuple[str, ...]]  # index name: the index command's flags
    runs: tuple[RunCheck, ...]

    def index_path(self, index: str) -> str:
        return self.collection.index_path(index)

    def run_path(self, run: str) -> str:
        return f"runs/{self.name}.{run}.trec"

    def answers_path(self, run: str) -> str:
        return f"runs/{self.name}.{run}.answers.jsonl"


@dataclass(frozen=True)
class Measured:
    """A value measured beside the one expected."""

    run: str
    measure: str
    expected: float
    value: float | None  # None: the measure was not scored
    tolerance: float

    @property
    def holds(self) -> bool:
        return self.value is not None and abs(self.value - self.expected) <= self.tolerance


def check_values(run: RunCheck, measured: dict[str, float]) -> list[Measured]:
    """Each expected value of ``run`` beside the value measured."""
    return [Measured(run.name, m, e, measured.get(m), run.tolerance) for m, e in run.expect.items()]


def regression_names(directory: Path = Path("regressions")) -> list[str]:
    return declaration_names(directory)


def find_regression(name_or_path: str, directory: Path = Path("regressions")) -> Regression:
    """A regression by file or by name (``regressions/NAME.yaml``)."""
    return read_regression(find_declaration(name_or_path, directory, "regression"))


def _run(path: Path, name: object, raw: object, indexes: dict, tolerance: float, metrics: tuple[str, ...]) -> RunCheck:
    where = f"{path}: run {name!r}"
    if not isinstance(raw, dict):
        raise UserError(f"{where}: a mapping with index, search and expect was expected")
    if unknown := sorted(set(raw) - RUN_FIELDS):
        raise UserError(f"{where}: unknown field {unknown[0]!r}")
    if raw.get("index") not in indexes:
        raise UserError(f"{where}: index {raw.get('index')!r} is none of the regression's: {', '.join(indexes)}")
    if ("tolerance" in raw) != ("why" in raw):
        raise UserError(f"{where}: a run's own tolerance comes with its why (and a why with a tolerance)")
    expect = raw.get("expect")
    if not isinstance(expect, dict) or not expect:
        raise UserError(f"{where}: expect must map measures to the values expected")
    answer = command_flags(raw["answer"], f"{where}: answer", ANSWER_SET) if "answer" in raw else None
    scored = (*metrics, *ANSWER_METRICS) if answer is not None else metrics
    for measure, value in expect.items():
        if measure not in scored:
            raise UserError(f"{where}: {measure!r} is not scored; the run's metrics: {', '.join(scored)}")
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise UserError(f"{where}: expected {measure} must be a number, got {value!r}")
    return RunCheck(
        str(name),
        raw["index"],
        command_flags(raw.get("search", ""), where, SEARCH_SET),
        {str(m): float(v) for m, v in expect.items()},
        read_tolerance(raw["tolerance"], where) if "tolerance" in raw else tolerance,
        answer,
    )


def read_regression(path: Path) -> Regression:
    """One regression file, checked whole before anything runs: one line naming the file where it is wrong."""
    raw = read_declaration(path, FIELDS)
    collection = find_collection(str(raw.get("collection")))
    split = str(raw.get("split", "test"))
    collection.split(split)
    if not isinstance(raw.get("ci", False), bool):
        raise UserError(f"{path}: ci must be true or false")
    indexes = raw.get("indexes")
    if not isinstance(indexes, dict) or not indexes:
        raise UserError(f"{path}: indexes must map index names to the index command's flags")
    runs = raw.get("runs")
    if not isinstance(runs, dict) or not runs:
        raise UserError(f"{path}: runs must map run names to their index, search flags and expected values")
    for name in [*indexes, *runs]:
        if not re.fullmatch(r"\w[\w.-]*", str(name), re.ASCII):
            raise UserError(f"{path}: name {name!r}: letters, digits, '.', '-' and '_' only (it names a file)")
    tolerance = read_tolerance(raw.get("tolerance", 0.0), str(path))
    return Regression(
        raw["name"],
        path,
        collection,
        split,
        raw.get("ci", False),
        {str(name): command_flags(flags, f"{path}: index {name!r}", INDEX_SET) for name, flags in indexes.items()},
        tuple(_run(path, name, run, indexes, tolerance, collection.metrics) for name, run in runs.items()),
    )
