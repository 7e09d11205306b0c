"""Which method for my collection: every test-time method measured on the user's own training queries at one teacher
budget, through the experiment runner, and the best one named with the command that runs it.

The methods are the methods table's (TOUR at k = b with the passage preset, ReFIT's and DART's settings chosen on
SciFact's training claims, Rocchio and average PRF Pyserini's). A method with settings to choose (re-ranking's
interpolation with the retriever, TOUR's final ranking, TTT-Embed's scope) is scored by cross-validation: each fold
of the queries by the setting best on the other folds, so the score a method reports is that of choosing its setting,
not of the best setting seen; the setting it names is the one best on all the queries. The queries given are the ones
measured, so they must not be the queries the choice is later judged on.
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
_TOUR = "--depth {budget} --preset passage"
SETTINGS: dict[str, dict[str, str | dict]] = {  # each teacher method's settings at depth b, the methods table's first
    "rerank": {
        "teacher order": "--rewriter rerank --depth {budget}",
        # the retriever's term on MiniLM's own scale (its training divided similarities by 0.05)
        "interpolated": "--rewriter rerank --depth {budget} --lambda 0.5 --smoothing 0.05",
    },
    "refit": {"default": "--rewriter refit --depth {budget}"},
    "tour-hard": {
        "final search": f"--rewriter tour-hard {_TOUR}",
        "final union": f"--rewriter tour-hard {_TOUR} --final union",
    },
    "tour-soft": {
        "final search": f"--rewriter tour-soft {_TOUR}",
        "final union": f"--rewriter tour-soft {_TOUR} --final union",
    },
    "ttt-embed": {scope: {"fit": scope} for scope in ("query", "neighbours", "task", "global")},  # fitted on the top b
}
WITH_TEACHER = {method: next(iter(settings.values())) for method, settings in SETTINGS.items()}  # the table's menu
FOLDS = 5
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
    teacher_flags: tuple[str, ...] = ()  # the teacher's options (--teacher-runtime ...), where a method asks it
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
            f"| method | setting | {self.metric} | 95% CI | calls/query | ms/query | Holm p vs {BASELINE} | "
            f"Holm p vs {WITHIN} |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in self.rows:
            low, high = r["ci"]
            ps = [holm_p(r, k, self.metric) for k in (VS_BASELINE, VS_WITHIN)]
            cells = [f"{p:.3g}" if p is not None else "–" for p in ps]
            mark = " (chosen)" if r is self.chosen else ""
            lines.append(
                f"| {r['method']}{mark} | {r.get('setting', '')} | {r['metrics'][self.metric]:.4f} | "
                f"{low:.4f}–{high:.4f} | "
                f"{r['teacher_calls_per_query']:.1f} | {r['ms_per_query']:.1f} | {cells[0]} | {cells[1]} |"
            )
        return "\n".join(lines) + "\n"

    def to_json(self) -> dict:
        """The table as data: each row without its per-query values, the method chosen and its commands."""
        rows = [{k: v for k, v in r.items() if k != "per_query"} for r in self.rows]
        chosen = None if self.chosen is None else self.chosen["method"]
        return {"metric": self.metric, "rows": rows, "chosen": chosen, "commands": self.commands}

    def to_dataframe(self):
        """The rows as ``pt.Experiment`` shapes its table: one row per system, its measure's column, and the Holm
        p-values against dense retrieval and re-ranking."""
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "name": r["method"],
                    "setting": r.get("setting", ""),
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
    """The methods table's grid at one teacher and budget over the given topics, each method with a teacher at each of
    its settings, as an experiment of one collection."""
    topics = Path(options.topics)
    collection = Collection(
        "yours",
        topics.parent,
        topics,
        "qrels" if options.qrels else "answers",
        (options.measure,),
        {"given": Split(topics, Path(options.qrels) if options.qrels else None)},
    )
    with_teacher = {variant(m, name): meant(v) for m, settings in SETTINGS.items() for name, v in settings.items()}
    methods = {m: tuple(shlex.split(f)) for m, f in METHODS.items()}
    return grid(options, "Which method for these queries", collection, "given", methods, with_teacher)


def grid(options: ChooseOptions, title: str, collection: Collection, split: str, methods, with_teacher) -> Experiment:
    """An experiment of ``methods`` and ``with_teacher`` on ``collection``'s ``split`` at ``options``' teacher and
    budget."""
    col = ExperimentCollection(
        collection, (options.measure,), (), {options.teacher: options.teacher_flags}, options.index
    )
    return Experiment(
        "choose",
        Path("choose"),
        title,
        split,
        options.hits,
        options.batch_size,
        (options.budget,),
        tuple(options.search),
        {collection.name: col},
        methods,
        with_teacher,
        ("--rewriter", "rerank", "--depth", str(min(10, options.budget))),
        WITHIN,
    )


def meant(setting: str | dict) -> tuple[str, ...] | str:
    """A setting as an experiment takes it: its flags, or the TTT-Embed scope fitted."""
    return setting["fit"] if isinstance(setting, dict) else tuple(shlex.split(setting))


def variant(method: str, setting: str) -> str:
    """The experiment's name of ``method`` at ``setting``."""
    return f"{method} [{setting}]"


def cross_validated(
    settings: dict[str, dict[str, dict[str, float]]], metric: str, folds: int = FOLDS, seed: int = 0
) -> tuple[dict[str, dict[str, float]], list[str]]:
    """Choosing a setting by cross-validation, scored: ``settings`` maps each setting to its per-query values (metric
    -> qid -> value); each fold's queries get the values of the setting whose mean ``metric`` is highest on the other
    folds (the first among equals). The per-query values so chosen, and each fold's choice."""
    from tour_pyserini.ttt.magnitude import fold_of

    names = list(settings)
    qids = sorted(settings[names[0]][metric])
    fold = fold_of(len(qids), folds, seed)
    chosen_values: dict[str, dict[str, float]] = {m: {} for m in settings[names[0]]}
    choices = []
    for f in range(folds):
        train = [q for q, g in zip(qids, fold) if g != f]
        best = max(names, key=lambda n: (float(np.mean([settings[n][metric][q] for q in train])), -names.index(n)))
        choices.append(best)
        for m, values in chosen_values.items():
            values.update({q: settings[best][m][q] for q, g in zip(qids, fold) if g == f})
    return chosen_values, choices


def method_rows(rows: list[dict], metric: str) -> list[dict]:
    """One row per method from the rows of its settings: scored by cross-validation (:func:`cross_validated`), its
    costs and command those of the setting best on all the queries, which it names."""
    out: list[dict] = []
    for method in [*METHODS, *SETTINGS]:
        mine = {r["method"].removeprefix(method + " [").removesuffix("]"): r for r in rows if owner(r) == method}
        if not mine:
            continue
        if method in METHODS:
            out.append(mine[method])
            continue
        per_query, folds = cross_validated({n: r["per_query"] for n, r in mine.items()}, metric)
        best = max(mine, key=lambda n: (mine[n]["metrics"][metric], -list(mine).index(n)))
        out.append(
            {
                **mine[best],
                "method": method,
                "setting": best,
                "fold_settings": folds,
                "settings": {n: r["metrics"] for n, r in mine.items()},
                "per_query": per_query,
                "metrics": {m: float(np.mean(list(v.values()))) for m, v in per_query.items()},
            }
        )
    return out


def owner(row: dict) -> str:
    """The method of an experiment row (a setting's row is named ``METHOD [SETTING]``)."""
    return row["method"].split(" [")[0]


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
    if row is None or row["method"] in METHODS:
        return [shlex.join([*search, *shlex.split(METHODS[BASELINE if row is None else row["method"]])])]
    setting = SETTINGS[row["method"]][row["setting"]]
    if isinstance(setting, dict):
        b = str(options.budget)
        ttt = ["tour-pyserini", "ttt"]
        return [
            shlex.join(
                [*ttt, "rewards", "--index", options.index, "--topics", "TOPICS", "--teacher", options.teacher]
                + list(options.teacher_flags)
                + ["--budget", b, "--depth", b, "--output", "rewards.jsonl"]
            ),
            shlex.join(
                [*ttt, "fit", "--rewards", "rewards.jsonl", "--scope", setting["fit"], "--output", "state.safetensors"]
            ),
            shlex.join([*search, "--rewriter", "ttt-embed", "--state", "state.safetensors"]),
        ]
    flags = shlex.split(setting.replace("{budget}", str(options.budget)))
    return [shlex.join([*search, *flags, "--teacher", options.teacher, *options.teacher_flags])]


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
    rows = measured(experiment_of(options), search_of, options.limit)
    rows = method_rows([{k: v for k, v in r.items() if k != "fingerprint"} for r in rows], options.measure)
    add_significance(rows, BASELINE, WITHIN)
    for r in rows:
        r["ci"] = mean_interval(list(r["per_query"][options.measure].values()))
    chosen = pick(rows, options)
    return Choice(options.measure, rows, chosen, commands_of(chosen, options))


def measured(experiment: Experiment, search_of: SearchOf, limit: int | None = None) -> list[dict]:
    """Every row of ``experiment``, measured afresh (nothing kept once measured)."""
    cells = {name: experiment.cells(name) for name in experiment.collections}
    with tempfile.TemporaryDirectory() as tmp:
        return run_experiment(experiment, cells, search_of, RowStore(Path(tmp) / "rows.jsonl"), limit=limit)


def judged_on(choice: Choice, options: ChooseOptions, collection: Collection, split: str, search_of: SearchOf) -> dict:
    """The honest check of a choice: the chosen method at its setting (dense retrieval where none was chosen) run on
    ``collection``'s ``split``, queries the choice never saw, beside dense retrieval on the same queries (paired
    t-test)."""
    from tour_pyserini.eval.significance import paired_t_test

    chosen = choice.chosen or next(r for r in choice.rows if r["method"] == BASELINE)
    method, setting = chosen["method"], chosen.get("setting", "")
    with_teacher = {variant(method, setting): meant(SETTINGS[method][setting])} if method in SETTINGS else {}
    methods = {m: tuple(shlex.split(METHODS[m])) for m in dict.fromkeys([BASELINE, method]) if m in METHODS}
    experiment = grid(options, "The chosen method on held-out queries", collection, split, methods, with_teacher)
    rows = measured(experiment, search_of)
    dense, mine = rows[0], rows[-1]
    values = mine["per_query"][options.measure]
    qids = sorted(values)
    base = dense["per_query"][options.measure]
    return {
        "method": method,
        "setting": setting,
        "split": f"{collection.name}-{split}",
        "queries": len(qids),
        options.measure: mine["metrics"][options.measure],
        "dense": dense["metrics"][options.measure],
        "p_vs_dense": None if mine is dense else paired_t_test([values[q] for q in qids], [base[q] for q in qids]),
        "teacher_calls_per_query": mine["teacher_calls_per_query"],
        "ms_per_query": mine["ms_per_query"],
    }
