"""Timings: what a speed benchmark measures, one YAML file each (``experiments/NAME.yaml`` with ``ways:``).

A timing names one collection of the registry and the ways to time on its queries, each a command as users type it
(the search command's flags; Pyserini's own search through ``run-pyserini``; the answer command's flags), and the
comparisons to make between them: a time ratio with its bound, whether two ways write the same run, and how far a
way's metric may move from another's::

    name: speed
    title: The search command as users run it
    collection: scifact                  # its split's topics, the first ``queries`` of them
    split: test
    queries: 300
    rounds: 3                            # every way once a round, the order alternating; medians reported
    search: --hits 100 --batch-size 32   # given to every search way
    kernels:                             # the environment of each kernel set; every way runs under each
      native: {}
      avx2: {ATEN_CPU_CAPABILITY: avx2}
    ways:
      dense: --encoder-runtime torch
      pyserini: {pyserini: --encoder-class auto --pooling mean --l2-norm}
      tour: --rewriter tour-soft --teacher bm25 --depth 20 --preset passage
      tour-bf16: {search: --rewriter tour-soft --teacher bm25 --encoder-precision bf16, kernels: [native]}
      reader: {answer: "--run {run:dense} --reader models/nq-oracle-reader --k 5"}
    compare:
      wrapper: {way: dense, against: pyserini, time: command, at_most: 1.1, same_run: true}
      batching: {way: tour, against: tour-one, at_most: 0.5, same_run: true}
      bf16: {way: tour-bf16, against: tour, metric: nDCG@10, within: 0.002}

A search way is timed by its own traces (its queries' encode, search, teacher and update seconds, its first batch
left out as the warm-up), and as a whole command; Pyserini's and the answer command's only as whole commands. Every
way first runs once untimed (caches, exported graphs); ``{run:WAY}`` in a way's flags is the run that pass of an
earlier way wrote, ``{encoder}`` the directory of the index's query encoder (for Pyserini's ``--encoder``). A
comparison without a bound reports its ratio.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.files.collections import Collection, find_collection
from tour_pyserini.files.declarations import command_flags, read_declaration

FIELDS = {"name", "title", "collection", "split", "queries", "rounds", "search", "kernels", "ways", "compare"}
COMMANDS = ("search", "pyserini", "answer")  # what a way runs
WAY_FIELDS = {*COMMANDS, "kernels"}
COMPARE_FIELDS = {"way", "against", "time", "at_most", "same_run", "metric", "within"}
TIMES = ("query", "command")  # a way's time: ms a query by its traces, or the whole command's seconds
ANSWER_METRICS = ("EM", "F1")  # an answer way's predictions, scored against the questions' answers
RUNNER_SETS = ("--index", "--topics", "--output", "--trace", "--run-tag")
RUN_OF = re.compile(r"\{run:([\w.-]+)\}")  # the run an earlier way's untimed pass wrote


@dataclass(frozen=True)
class Way:
    name: str
    command: str  # one of COMMANDS
    flags: tuple[str, ...]
    kernels: tuple[str, ...]  # the kernel sets it runs under

    @property
    def traced(self) -> bool:
        return self.command == "search"

    @property
    def writes_run(self) -> bool:
        return self.command != "answer"


@dataclass(frozen=True)
class Comparison:
    """``way`` against ``against``: the ratio of their times (``time``: by traces or whole commands) at most
    ``at_most``; their runs the same by the sameness rule; ``metric`` no more than ``within`` apart."""

    name: str
    way: str
    against: str
    time: str = "query"
    at_most: float | None = None
    same_run: bool = False
    metric: str | None = None
    within: float | None = None


@dataclass(frozen=True)
class Timing:
    name: str
    path: Path
    title: str
    collection: Collection
    split: str
    queries: int | None
    rounds: int
    search: tuple[str, ...]
    kernels: dict[str, dict[str, str]]
    ways: dict[str, Way]
    compare: dict[str, Comparison]

    @property
    def index(self) -> str:
        return self.collection.index_path("minilm")


def is_timing(raw: dict) -> bool:
    return "ways" in raw


def _number(value: object, where: str, low: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= low:
        raise UserError(f"{where}: a number above {low:g} was expected, got {value!r}")
    return float(value)


def _count(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{where}: a positive whole number was expected, got {value!r}")
    return value


def _kernels(path: Path, raw: object) -> dict[str, dict[str, str]]:
    raw = {"native": {}} if raw is None else raw
    if not isinstance(raw, dict) or not raw:
        raise UserError(f"{path}: kernels must map kernel-set names to environment variables")
    sets = {}
    for name, env in raw.items():
        env = env or {}
        if not isinstance(env, dict) or not all(isinstance(v, str | int) for v in env.values()):
            raise UserError(f"{path}: kernels {name!r}: a mapping of environment variables to values")
        sets[str(name)] = {str(k): str(v) for k, v in env.items()}
    return sets


def _way(path: Path, name: str, raw: object, kernels: dict, earlier: dict[str, Way]) -> Way:
    where = f"{path}: way {name!r}"
    if isinstance(raw, str):
        raw = {"search": raw}
    if not isinstance(raw, dict) or unknown_or_none(raw):
        raise UserError(f"{where}: search flags, or one of {', '.join(COMMANDS)} (with kernels) was expected")
    (command,) = [c for c in COMMANDS if c in raw]
    chosen = raw.get("kernels", list(kernels))
    if not isinstance(chosen, list) or not chosen or any(k not in kernels for k in chosen):
        raise UserError(f"{where}: kernels must list some of {', '.join(kernels)}")
    flags = command_flags(raw[command] or "", where, RUNNER_SETS)
    for used in (m for f in flags for m in RUN_OF.findall(f)):
        if used not in earlier or not earlier[used].writes_run:
            raise UserError(f"{where}: {{run:{used}}} names no earlier way that writes a run")
    return Way(name, command, flags, tuple(map(str, chosen)))


def unknown_or_none(raw: dict) -> bool:
    """Whether a way's mapping holds a field it may not, or not exactly one command."""
    return bool(set(raw) - WAY_FIELDS) or sum(c in raw for c in COMMANDS) != 1


def _comparison(path: Path, name: str, raw: object, ways: dict[str, Way], collection: Collection) -> Comparison:
    where = f"{path}: compare {name!r}"
    if not isinstance(raw, dict) or (unknown := sorted(set(raw) - COMPARE_FIELDS)):
        raise UserError(
            f"{where}: unknown field {unknown[0]!r}"
            if raw and isinstance(raw, dict)
            else f"{where}: a mapping of {', '.join(sorted(COMPARE_FIELDS))} was expected"
        )
    for role in ("way", "against"):
        if raw.get(role) not in ways:
            raise UserError(f"{where}: {role} {raw.get(role)!r} is none of the ways")
    way, against = ways[raw["way"]], ways[raw["against"]]
    time = raw.get("time", "query" if way.traced and against.traced else "command")
    if time not in TIMES or (time == "query" and not (way.traced and against.traced)):
        raise UserError(f"{where}: time is query (two search ways, by their traces) or command (whole commands)")
    if not set(way.kernels) & set(against.kernels):
        raise UserError(f"{where}: the two ways share no kernel set")
    same = raw.get("same_run", False)
    metric = raw.get("metric")
    if same and not (way.writes_run and against.writes_run):
        raise UserError(f"{where}: runs are compared between search ways (ours or Pyserini's)")
    if way.writes_run != against.writes_run and metric is not None:
        raise UserError(f"{where}: a metric is compared between two search ways or two answer ways")
    scored = collection.metrics if way.writes_run else ANSWER_METRICS
    if metric is not None and metric not in scored:
        raise UserError(f"{where}: metric {metric!r} is not scored; the way's: {', '.join(scored)}")
    if (metric is None) != ("within" not in raw):
        raise UserError(f"{where}: a metric is compared with its 'within' bound")
    return Comparison(
        name,
        way.name,
        against.name,
        time,
        _number(raw["at_most"], f"{where}: at_most") if "at_most" in raw else None,
        bool(same),
        metric,
        _number(raw["within"], f"{where}: within", -1e-12) if "within" in raw else None,
    )


def read_timing(path: Path, raw: dict | None = None) -> Timing:
    """One timing file, checked whole before anything runs: one line naming the file where it is wrong."""
    raw = read_declaration(path, FIELDS) if raw is None else raw
    collection = find_collection(str(raw.get("collection", "")))
    split = str(raw.get("split", "test"))
    collection.split(split)
    kernels = _kernels(path, raw.get("kernels"))
    if not isinstance(raw["ways"], dict) or not raw["ways"]:
        raise UserError(f"{path}: ways must map names to commands")
    ways: dict[str, Way] = {}
    for n, w in raw["ways"].items():
        ways[str(n)] = _way(path, str(n), w, kernels, ways)
    compare = raw.get("compare") or {}
    if not isinstance(compare, dict):
        raise UserError(f"{path}: compare must map names to comparisons")
    return Timing(
        raw["name"],
        path,
        str(raw.get("title", raw["name"])),
        collection,
        split,
        _count(raw["queries"], f"{path}: queries") if "queries" in raw else None,
        _count(raw.get("rounds", 3), f"{path}: rounds"),
        command_flags(raw.get("search", ""), f"{path}: search", RUNNER_SETS),
        kernels,
        ways,
        {str(n): _comparison(path, str(n), c, ways, collection) for n, c in compare.items()},
    )
