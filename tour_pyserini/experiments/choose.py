"""Which method for my collection: every test-time method measured on the user's own training queries at one teacher
budget, through the experiment runner, and the best one named with the command that runs it.

The methods are the methods table's, at their defaults (TOUR at k = b with the passage preset, ReFIT's and DART's
chosen on SciFact's training claims, Rocchio and average PRF Pyserini's, TTT-Embed's query state fitted on the
teacher's scores of each query's top b). No setting is chosen here beyond the method itself: the queries given are
the ones measured, so they must not be the queries the choice is later judged on.
"""

from __future__ import annotations

import logging
import math
import shlex
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tour_pyserini.experiments.report import VS_BASELINE, VS_WITHIN, add_significance, holm_p, significant
from tour_pyserini.experiments.runner import RowStore, SearchOf, run_experiment
from tour_pyserini.files.collections import Collection, Split, collection_names, find_collection
from tour_pyserini.files.experiments import Experiment, ExperimentCollection

log = logging.getLogger(__name__)

BASELINE, WITHIN = "dense", "rerank"
METHODS = {"dense": "", "rocchio": "--rewriter rocchio", "avg-prf": "--rewriter avg-prf", "dart": "--rewriter dart"}
WITH_TEACHER: dict[str, str | dict] = {  # at depth b, as the methods table runs them
    "rerank": "--rewriter rerank --depth {budget}",
    "refit": "--rewriter refit --depth {budget}",
    "tour-hard": "--rewriter tour-hard --depth {budget} --preset passage",
    "tour-soft": "--rewriter tour-soft --depth {budget} --preset passage",
    "ttt-embed": {"fit": "query"},
}
SIGNIFICANCE = 0.05


@dataclass(frozen=True)
class ChooseOptions:
    """What ``choose`` measures: an index, training topics with their qrels (or answers in the topics), a teacher
    and its budget of calls per query, and the limits a chosen method must keep."""

    index: str
    topics: str
    teacher: str
    budget: int
    qrels: str | None = None  # None: the topics hold answer strings
    metric: str | None = None  # default: nDCG@10 (qrels) or Acc@1 (answers)
    max_ms_per_query: float | None = None
    max_calls_per_query: float | None = None
    hits: int = 100
    batch_size: int = 32
    search: tuple[str, ...] = ()  # flags every method's search gets (--remove-query, --encoder-runtime ...)
    limit: int | None = None  # the first N judged queries only (a smoke run)

    @property
    def measure(self) -> str:
        return self.metric or ("nDCG@10" if self.qrels else "Acc@1")


@dataclass
class Choice:
    """Every method's row (its metric with a 95% confidence interval, teacher calls and milliseconds a query, Holm
    p against dense and against re-ranking at the budget), the method chosen (None: none beats dense retrieval
    significantly within the limits) and the command that runs it."""

    metric: str
    rows: list[dict]
    chosen: dict | None
    commands: list[str] = field(default_factory=list)

    def table(self) -> str:
        lines = [
            f"| method | {self.metric} | 95% CI | calls/query | ms/query | Holm p vs {BASELINE} | Holm p vs {WITHIN} |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            low, high = r["ci"]
            ps = [holm_p(r, k, self.metric) for k in (VS_BASELINE, VS_WITHIN)]
            cells = [f"{p:.3g}" if p is not None else "–" for p in ps]
            mark = " (chosen)" if r is self.chosen else ""
            lines.append(
                f"| {r['method']}{mark} | {r['metrics'][self.metric]:.4f} | {low:.4f}–{high:.4f} | "
                f"{r['teacher_calls_per_query']:.1f} | {r['ms_per_query']:.1f} | {cells[0]} | {cells[1]} |"
            )
        return "\n".join(lines) + "\n"

    def to_dataframe(self):
        """The rows as ``pt.Experiment`` shapes its table: one row per system, its measure's column, and the Holm
        p-values against dense retrieval and re-ranking."""
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "name": r["method"],
                    self.metric: r["metrics"][self.metric],
                    f"{self.metric} p-value (Holm) vs {BASELINE}": holm_p(r, VS_BASELINE, self.metric),
                    f"{self.metric} p-value (Holm) vs {WITHIN}": holm_p(r, VS_WITHIN, self.metric),
                    "teacher calls/query": r["teacher_calls_per_query"],
                    "ms/query": r["ms_per_query"],
                }
                for r in self.rows
            ]
        )


def mean_interval(values: list[float]) -> tuple[float, float]:
    """The 95% t-interval of the mean of ``values`` (per-query values)."""
    from scipy.stats import t

    n = len(values)
    mean = float(np.mean(values))
    if n < 2:
        return mean, mean
    half = float(t.ppf(0.975, n - 1) * np.std(values, ddof=1) / math.sqrt(n))
    return mean - half, mean + half


def overlapping_test_splits(topics: str) -> dict[str, int]:
    """The registry's test splits that hold any of ``topics``' queries (the same text), with how many: choosing on
    them would be choosing on the queries a method is judged on."""
    from tour_pyserini.files import read_topics

    texts = {t.text.strip() for t in read_topics(topics)}
    found = {}
    for name in collection_names():
        collection = find_collection(name)
        for split, files in collection.splits.items():
            if split.startswith("test") and (shared := texts & {t.text.strip() for t in read_topics(files.topics)}):
                found[f"{name}-{split}"] = len(shared)
    return found


def experiment_of(options: ChooseOptions) -> Experiment:
    """The methods table's grid at one teacher and budget over the given topics, as an experiment of one collection."""
    name = "yours"
    topics = Path(options.topics)
    collection = Collection(
        name,
        topics.parent,
        topics,
        "qrels" if options.qrels else "answers",
        (options.measure,),
        {"given": Split(topics, Path(options.qrels) if options.qrels else None)},
    )
    col = ExperimentCollection(collection, (options.measure,), (), {options.teacher: ()}, options.index)
    with_teacher = {m: v["fit"] if isinstance(v, dict) else tuple(shlex.split(v)) for m, v in WITH_TEACHER.items()}
    return Experiment(
        "choose",
        Path("choose"),
        "Which method for these queries",
        "given",
        options.hits,
        options.batch_size,
        (options.budget,),
        tuple(options.search),
        {name: col},
        {m: tuple(shlex.split(f)) for m, f in METHODS.items()},
        with_teacher,
        ("--rewriter", "rerank", "--depth", str(min(10, options.budget))),
        WITHIN,
    )


def pick(rows: list[dict], options: ChooseOptions) -> dict | None:
    """The best row by the metric among those within the limits that beat dense retrieval (Holm p below 0.05)."""
    metric = options.measure
    base = next(r for r in rows if r["method"] == BASELINE)

    def allowed(r: dict) -> bool:
        within_ms = options.max_ms_per_query is None or r["ms_per_query"] <= options.max_ms_per_query
        calls = options.max_calls_per_query
        return within_ms and (calls is None or r["teacher_calls_per_query"] <= calls)

    better = [
        r
        for r in rows
        if r is not base
        and allowed(r)
        and r["metrics"][metric] > base["metrics"][metric]
        and significant(r, VS_BASELINE, metric, SIGNIFICANCE)
    ]
    return max(better, key=lambda r: (r["metrics"][metric], -r["ms_per_query"]), default=None)


def commands_of(row: dict | None, options: ChooseOptions) -> list[str]:
    """The commands that run ``row``'s method on other topics (``TOPICS``, for the user to name): one search, or for
    TTT-Embed's per-query state its rewards, its fit and the search with it; dense retrieval where none was chosen."""
    search = ["tour-pyserini", "search", "--index", options.index, "--topics", "TOPICS", "--output", "RUN.trec"]
    search += ["--hits", str(options.hits), *options.search]
    method = BASELINE if row is None else row["method"]
    if method in METHODS:
        return [shlex.join([*search, *shlex.split(METHODS[method])])]
    if isinstance(WITH_TEACHER[method], dict):
        b = str(options.budget)
        ttt = ["tour-pyserini", "ttt"]
        return [
            shlex.join(
                [*ttt, "rewards", "--index", options.index, "--topics", "TOPICS", "--teacher", options.teacher]
                + ["--budget", b, "--depth", b, "--output", "rewards.jsonl"]
            ),
            shlex.join(
                [*ttt, "fit", "--rewards", "rewards.jsonl", "--scope", "query", "--output", "state.safetensors"]
            ),
            shlex.join([*search, "--rewriter", "ttt-embed", "--state", "state.safetensors"]),
        ]
    flags = shlex.split(str(WITH_TEACHER[method]).replace("{budget}", str(options.budget)))
    return [shlex.join([*search, *flags, "--teacher", options.teacher])]


def choose(options: ChooseOptions, search_of: SearchOf) -> Choice:
    """Every method on ``options.topics`` (``search_of`` reads a method's flags as the search command does), each
    row with its interval and Holm-corrected tests, and the method chosen."""
    if overlap := overlapping_test_splits(options.topics):
        log.warning(
            "%s holds queries of %s: a method chosen on a test split's queries is tuned on test; choose on "
            "training queries and judge the choice on the test split",
            options.topics,
            ", ".join(f"{name} ({n} of its queries' texts)" for name, n in overlap.items()),
        )
    experiment = experiment_of(options)
    cells = {name: experiment.cells(name) for name in experiment.collections}
    with tempfile.TemporaryDirectory() as tmp:
        store = RowStore(Path(tmp) / "rows.jsonl")
        rows = run_experiment(experiment, cells, search_of, store, limit=options.limit)
    rows = [{k: v for k, v in r.items() if k != "fingerprint"} for r in rows]
    add_significance(rows, BASELINE, WITHIN)
    for r in rows:
        r["ci"] = mean_interval(list(r["per_query"][options.measure].values()))
    chosen = pick(rows, options)
    return Choice(options.measure, rows, chosen, commands_of(chosen, options))
