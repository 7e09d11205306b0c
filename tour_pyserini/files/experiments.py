"""Experiments: what a benchmark measures, one YAML file each, expanded into the searches a runner makes.

An experiment names collections of the registry (each with the measures it reports and the teachers that apply),
the teacher-free methods and the methods run with each teacher at each budget, as the search command's flags::

    name: methods
    title: Every test-time method, at equal teacher budgets
    split: test
    hits: 100
    budgets: [10, 20, 100]
    search: --encoder-runtime torch          # given to every search
    collections:
      scifact:
        metrics: [nDCG@10, R@100]            # of those the collection's declaration scores (default: all)
        search: --remove-query
        teachers: {bm25: "", "cross-encoder:models/scifact-rce": --teacher-runtime torch}
    methods:                                 # run once per collection; the first is the baseline of the tests
      dense: ""
      rocchio: --rewriter rocchio
    with_teacher:                            # with each teacher (--teacher SPEC and its flags) at each budget
      rerank: --rewriter rerank --depth {budget}
      tour-soft: --rewriter tour-soft --depth {budget} --preset passage
      ttt-embed: {fit: query}                # TTT-Embed's state of that scope, fitted on the teacher's scores
    warm_up: --rewriter rerank --depth 10    # one untimed pass with each teacher before its rows
    compare_within_budget: rerank            # each row is also tested against this method's at its teacher and budget

Each collection is searched on its ``indexes/NAME.minilm`` (built, with ``indexes/NAME.bm25``, if missing). The
flags are the search command's own, checked by its parser before anything runs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.files import timings, transfers
from tour_pyserini.files.collections import Collection, find_collection
from tour_pyserini.files.declarations import (
    command_flags,
    declaration_names,
    find_declaration,
    read_declaration,
    read_mapping,
    read_tolerance,
)
from tour_pyserini.files.regressions import Measured
from tour_pyserini.files.timings import Timing, is_timing, read_timing
from tour_pyserini.files.transfers import Transfer, is_transfer, read_transfer

FIELDS = {
    "name",
    "title",
    "split",
    "hits",
    "batch_size",
    "budgets",
    "search",
    "collections",
    "methods",
    "with_teacher",
    "warm_up",
    "compare_within_budget",
    "tolerance",
    "expect",
}
COLLECTION_FIELDS = {"metrics", "search", "teachers"}
RUNNER_SETS = ("--index", "--topics", "--output", "--run-tag", "--hits", "--teacher")
FITS = ("query", "neighbours", "task", "global")  # the TTT-Embed scopes an experiment may fit at test time
NO_TEACHER = "-"


@dataclass(frozen=True)
class ExperimentCollection:
    collection: Collection
    metrics: tuple[str, ...]
    search: tuple[str, ...]
    teachers: dict[str, tuple[str, ...]]  # teacher spec: its flags
    index_path: str | None = None  # the dense index searched, where not the registry's indexes/NAME.minilm

    @property
    def name(self) -> str:
        return self.collection.name

    @property
    def index(self) -> str:
        return self.index_path or self.collection.index_path("minilm")


@dataclass(frozen=True)
class Cell:
    """One row of an experiment: a method searched on a collection (with a teacher at a budget), by its flags; with
    ``fit``, a TTT-Embed scope fitted on the teacher's scores of each query's base top budget, the flags those of the
    plain search that asks the teacher."""

    collection: str
    method: str
    teacher: str = NO_TEACHER
    budget: int | None = None
    flags: tuple[str, ...] = ()
    fit: str | None = None

    @property
    def key(self) -> tuple[str, str, str, int | None]:
        return (self.collection, self.method, self.teacher, self.budget)


@dataclass(frozen=True)
class Experiment:
    name: str
    path: Path
    title: str
    split: str
    hits: int
    batch_size: int
    budgets: tuple[int, ...]
    search: tuple[str, ...]
    collections: dict[str, ExperimentCollection]
    methods: dict[str, tuple[str, ...]]
    with_teacher: dict[str, tuple[str, ...] | str]  # flags, or the TTT-Embed scope fitted
    warm_up: tuple[str, ...]
    compare_within_budget: str | None
    tolerance: float = 0.0
    expect: dict[tuple[str, str, str, int | None], dict[str, float]] = field(default_factory=dict)

    @property
    def baseline(self) -> str:
        return next(iter(self.methods))

    def cells(self, collection: str, teachers: set[str] | None = None, budgets: list[int] | None = None) -> list[Cell]:
        """The rows of ``collection``, in order: the teacher-free methods, then for each teacher (whose kind,
        the spec before ``:``, is in ``teachers``) and budget each method with a teacher."""
        col = self.collections[collection]
        cells = [Cell(collection, m, flags=(*self.search, *col.search, *f)) for m, f in self.methods.items()]
        for spec, teacher_flags in col.teachers.items():
            if teachers is not None and spec.split(":")[0] not in teachers:
                continue
            for budget in budgets or self.budgets:
                for method, value in self.with_teacher.items():
                    fit = value if isinstance(value, str) else None
                    own = () if fit else tuple(f.replace("{budget}", str(budget)) for f in value)
                    flags = (*self.search, *col.search, *own, "--teacher", spec, *teacher_flags)
                    cells.append(Cell(collection, method, spec, budget, flags, fit))
        return cells

    def warm_up_flags(self, collection: str, spec: str) -> tuple[str, ...]:
        col = self.collections[collection]
        return (*self.search, *col.search, *self.warm_up, "--teacher", spec, *col.teachers[spec])


def experiment_names(directory: Path = Path("experiments")) -> list[str]:
    return declaration_names(directory)


def find_experiment(name_or_path: str, directory: Path = Path("experiments")) -> Experiment | Timing | Transfer:
    """An experiment by file or by name (``experiments/NAME.yaml``): of rows of measures, (with ``ways:``) a timing
    (:mod:`tour_pyserini.files.timings`), or (with ``folds:``) a transfer protocol
    (:mod:`tour_pyserini.files.transfers`)."""
    path = find_declaration(name_or_path, directory, "experiment")
    raw = read_mapping(path, FIELDS | timings.FIELDS | transfers.FIELDS)
    if is_transfer(raw):
        return read_transfer(path)
    return read_timing(path) if is_timing(raw) else read_experiment(path)


def _flags(value: object, where: str) -> tuple[str, ...]:
    return command_flags(value, where, RUNNER_SETS)


def _mapping(value: object, where: str, what: str) -> dict:
    if not isinstance(value, dict) or not value:
        raise UserError(f"{where}: {what}")
    for name in value:
        if not re.fullmatch(r"\w[\w.-]*", str(name), re.ASCII):
            raise UserError(f"{where}: name {name!r}: letters, digits, '.', '-' and '_' only (it names a row)")
    return value


def _positive(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{where}: a positive whole number was expected, got {value!r}")
    return value


def _collection(path: Path, name: str, raw: object, split: str) -> ExperimentCollection:
    where = f"{path}: collection {name!r}"
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise UserError(f"{where}: a mapping with {', '.join(sorted(COLLECTION_FIELDS))} was expected")
    if unknown := sorted(set(raw) - COLLECTION_FIELDS):
        raise UserError(f"{where}: unknown field {unknown[0]!r}")
    collection = find_collection(name)
    collection.split(split)
    metrics = raw.get("metrics", list(collection.metrics))
    if not isinstance(metrics, list) or not metrics:
        raise UserError(f"{where}: metrics must list measures")
    if stray := [m for m in metrics if m not in collection.metrics]:
        known = ", ".join(collection.metrics)
        raise UserError(f"{where}: {stray[0]!r} is not scored; the collection's metrics: {known}")
    teachers = raw.get("teachers", {}) or {}
    if not isinstance(teachers, dict):
        raise UserError(f"{where}: teachers must map teacher specs to their flags")
    return ExperimentCollection(
        collection,
        tuple(map(str, metrics)),
        _flags(raw.get("search", ""), where),
        {str(spec): _flags(flags or "", f"{where}: teacher {spec!r}") for spec, flags in teachers.items()},
    )


def _with_teacher(path: Path, raw: object) -> dict[str, tuple[str, ...] | str]:
    methods: dict[str, tuple[str, ...] | str] = {}
    for name, value in _mapping(raw, str(path), "with_teacher must map method names to flags").items():
        where = f"{path}: with_teacher {name!r}"
        if isinstance(value, dict):
            if set(value) != {"fit"} or value["fit"] not in FITS:
                raise UserError(f"{where}: a fitted state is {{fit: SCOPE}}, SCOPE one of {', '.join(FITS)}")
            methods[str(name)] = value["fit"]
        else:
            methods[str(name)] = _flags(value, where)
    return methods


def row_key(text: str) -> tuple[str, str, int | None]:
    """``METHOD`` or ``METHOD TEACHER BUDGET``, as an expectation names its row."""
    parts = text.split()
    if len(parts) == 1:
        return parts[0], NO_TEACHER, None
    if len(parts) == 3 and parts[2].isdigit():
        return parts[0], parts[1], int(parts[2])
    raise ValueError(text)


def _expect(
    path: Path, raw: object, experiment: Experiment
) -> dict[tuple[str, str, str, int | None], dict[str, float]]:
    """The values expected of rows, by collection and ``METHOD [TEACHER BUDGET]``; each row one the file makes."""
    if raw is None:
        return {}
    expect = {}
    for name, rows in _mapping(raw, str(path), "expect must map collections to rows' values").items():
        col = experiment.collections.get(str(name))
        if col is None or not isinstance(rows, dict):
            raise UserError(f"{path}: expect {name!r}: one of the collections, mapping rows to their values")
        made = {c.key for c in experiment.cells(col.name)}
        for text, values in rows.items():
            where = f"{path}: expect {name} {text!r}"
            try:
                key = (col.name, *row_key(str(text)))
            except ValueError:
                raise UserError(f"{where}: a row is METHOD, or METHOD TEACHER BUDGET") from None
            if key not in made:
                raise UserError(f"{where}: no such row in the experiment")
            if not isinstance(values, dict) or not values:
                raise UserError(f"{where}: expected values map measures to numbers")
            for measure, value in values.items():
                if measure not in col.metrics:
                    raise UserError(f"{where}: {measure!r} is not reported; {name}'s: {', '.join(col.metrics)}")
                if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                    raise UserError(f"{where}: expected {measure} must be a number, got {value!r}")
            expect[key] = {str(m): float(v) for m, v in values.items()}
    return expect


def read_experiment(path: Path) -> Experiment:
    """One experiment file, checked whole before anything runs: one line naming the file where it is wrong."""
    raw = read_declaration(path, FIELDS)
    split = str(raw.get("split", "test"))
    budgets = raw.get("budgets", [])
    if not isinstance(budgets, list):
        raise UserError(f"{path}: budgets must list teacher budgets")
    collections = _mapping(raw.get("collections"), str(path), "collections must map registry names to settings")
    with_teacher = _with_teacher(path, raw["with_teacher"]) if "with_teacher" in raw else {}
    compare = raw.get("compare_within_budget")
    if compare is not None and compare not in with_teacher:
        raise UserError(f"{path}: compare_within_budget {compare!r} is none of with_teacher's methods")
    methods = _mapping(raw.get("methods"), str(path), "methods must map method names to flags (the first: baseline)")
    experiment = Experiment(
        raw["name"],
        path,
        str(raw.get("title", raw["name"])),
        split,
        _positive(raw.get("hits", 100), f"{path}: hits"),
        _positive(raw.get("batch_size", 32), f"{path}: batch_size"),
        tuple(_positive(b, f"{path}: budgets") for b in budgets),
        _flags(raw.get("search", ""), f"{path}: search"),
        {str(n): _collection(path, str(n), c, split) for n, c in collections.items()},
        {str(n): _flags(f, f"{path}: method {n!r}") for n, f in methods.items()},
        with_teacher,
        _flags(raw.get("warm_up", ""), f"{path}: warm_up"),
        compare,
        read_tolerance(raw.get("tolerance", 0.0), str(path)),
    )
    return replace(experiment, expect=_expect(path, raw.get("expect"), experiment))


def check_rows(experiment: Experiment, rows: list[dict]) -> list[Measured]:
    """Each value ``experiment`` expects of one of ``rows`` beside the value measured."""
    checked = []
    for row in rows:
        key = (row["collection"], row["method"], row["teacher"], row["budget"])
        label = " ".join(str(part) for part in key if part not in (NO_TEACHER, None))
        for measure, expected in experiment.expect.get(key, {}).items():
            checked.append(Measured(label, measure, expected, row["metrics"].get(measure), experiment.tolerance))
    return checked
