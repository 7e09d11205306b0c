"""make bench-ttt: TTT-Embed measured as its paper measures it, on SciFact test, nq-oracle test and Cranfield.

Each task has its own dense index (the bundled MiniLM) and BM25 index. Rewards are judgments of the base
top-100 candidates by a teacher: BM25 (works everywhere) and the labels themselves (``oracle``, an upper
bound, not a system). A budget b (judgments per query) buys the pairs of task-balanced water-filling
(tour_pyserini.ttt.allocation: 10 judgments per rewarded query, then deeper), the same pairs for every
method and nested across budgets. Methods at the same pairs: ``rerank`` (the rewarded candidates sorted
by reward inside their slots), and search with unit(x + α v) for the ``global``, ``task`` and ``query``
states fitted on those rewards. Metrics: nDCG@10 on every task (nq-oracle: a passage is relevant when it
contains an answer string, judged over each question's base top-100), plus Acc@1 and Acc@20 (DPR answer
matching) on nq-oracle; "mean" averages the three tasks' nDCG@10 equally.

Experiments: ``budget`` (b in 0.01 ... 100, AUBC = mean Δ over log10 b), ``train-to-test`` (SciFact training claims ->
test claims), ``cost`` (fit time and search overhead, written to runs/bench-ttt-cost.json). Whether states carry
over to queries nobody judged (k-fold, and each collection left out) is ``tour-pyserini experiment transfer``
(experiments/transfer.yaml). The settled studies (fixed α, objectives, breadth against depth, warm starts, TOUR
from a state, recycled judgments) are ``git show 1e816f5:bench/ttt.py``, their findings in docs/algorithms.md.

Writes runs/bench-ttt.json (one row per experiment, task, method, budget and teacher), the cost file and
runs/bench-ttt-budget.png (the paper's Figure 2: Δ against budget). Teacher scores and query vectors are
kept in runs/ttt/cache/ so a rerun does not recompute them.
Usage: python bench/ttt.py [--experiments budget train-to-test cost] [--teachers bm25 oracle]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
from common import split_files

OUT = Path("runs/ttt")
CACHE = OUT / "cache"
BUDGETS = (0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100)
HITS = 100  # every metric reads the top 20 at most; the base top-100 are the candidates
MAX_DEPTH = 100
DEPTH = 10  # judgments per rewarded query in the first water-filling pass
HEADLINE = "nDCG@10"
SCOPES = ("global", "task", "query")
EXPERIMENTS = (
    "budget",
    "cost",
    "train-to-test",
)
COMMAND = "make bench-ttt"


@dataclass(frozen=True)
class TaskSpec:
    name: str
    topics: str
    qrels: str | None  # None: judged by the topics' answer strings

    @property
    def index(self) -> str:
        return f"indexes/{self.name}.minilm"

    @property
    def bm25(self) -> str:
        return f"indexes/{self.name}.bm25"


def task_spec(name: str, split: str = "test") -> TaskSpec:
    files = split_files(name, split)
    return TaskSpec(name, files.topics, files.qrels)


SPECS = tuple(map(task_spec, ("scifact", "nq-oracle", "cranfield")))
SCIFACT_TRAIN = task_spec("scifact", "train")


class Task:
    """One task's judged queries, their vectors, base rankings, candidate vectors, teachers and judge."""

    def __init__(self, spec: TaskSpec, searcher=None, split: str = "test"):
        from tour_pyserini.files import read_qrels, read_topics
        from tour_pyserini.search import TourSearcher
        from tour_pyserini.ttt.vectors import DocVectors

        self.spec, self.name, self.split = spec, spec.name, split
        self.searcher = searcher or TourSearcher.from_index(spec.index)
        topics = read_topics(spec.topics)
        self.qrels = read_qrels(spec.qrels) if spec.qrels else None
        self.topics = [t for t in topics if self.qrels is None or t.qid in self.qrels]
        self.qids = [t.qid for t in self.topics]
        self.X = cached(f"{self.name}.{split}.queries", lambda: self.searcher.encode([t.text for t in self.topics]))
        self.base = [[h.docid for h in hits] for hits in self.searcher.search_vectors(self.X, HITS)]
        self.docs = DocVectors(spec.index)
        if self.qrels is None:  # answer strings: relevance of each question's base top-100
            flags = cached(f"{self.name}.{split}.answers", self._answer_flags)
            self.qrels = {q: {d: int(f) for d, f in zip(b, row)} for q, b, row in zip(self.qids, self.base, flags)}
        self.qrels = {q: self.qrels[q] for q in self.qids}

    @cached_property
    def matcher(self):
        from tour_pyserini.eval.answers import AnswerMatcher

        return AnswerMatcher(self.searcher.docstore)

    def _answer_flags(self) -> np.ndarray:
        docs = {}
        flags = np.zeros((len(self.qids), MAX_DEPTH))
        for i, (topic, ranking) in enumerate(zip(self.topics, self.base)):
            for j, doc in enumerate(self.searcher.docstore.get(ranking[:MAX_DEPTH])):
                docs[doc.docid] = doc.text
                flags[i, j] = self.matcher.has_answer(doc.docid, doc.text, topic.answers)
        return flags

    def teacher_scores(self, teacher: str) -> np.ndarray:
        """Scores (n, MAX_DEPTH) of each query's base candidates: BM25, or the labels (oracle)."""
        if teacher == "oracle":
            return np.array(
                [[max(self.qrels[q].get(d, 0), 0) for d in b[:MAX_DEPTH]] for q, b in zip(self.qids, self.base)],
                dtype=float,
            )
        return cached(f"{self.name}.{self.split}.{teacher}", lambda: self._teacher(teacher))

    def _teacher(self, spec: str) -> np.ndarray:
        from tour_pyserini.teachers import ScoreRequest, TeacherContext, get_teacher

        teacher = get_teacher(spec, TeacherContext(index_dir=self.spec.index))
        requests = [ScoreRequest(t.qid, t.text, b[:MAX_DEPTH]) for t, b in zip(self.topics, self.base)]
        return np.array(teacher.score(requests))

    def evaluate(self, rankings: list[list[str]]) -> dict[str, dict[str, float]]:
        """Per-query values {metric: {qid: value}} of rankings aligned with ``self.qids``."""
        from tour_pyserini.eval import evaluate
        from tour_pyserini.eval.answers import answer_accuracy

        run = {q: {d: float(len(r) - i) for i, d in enumerate(r)} for q, r in zip(self.qids, rankings)}
        values = evaluate(self.qrels, run, [HEADLINE]).per_query
        if self.spec.qrels is None:
            values.update(answer_accuracy(run, self.topics, self.matcher, (1, 20)).per_query)
        return values


def cached(name: str, compute) -> np.ndarray:
    path = CACHE / f"{name}.npy"
    if path.exists():
        return np.load(path)
    value = np.asarray(compute())
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, value)
    return value


def rewarded(task: Task, scores: np.ndarray, depths: dict[str, int], rows=None):
    """RewardedQuery of every query of ``task`` with judgments; ``depths`` = judged top-m per qid."""
    from tour_pyserini.ttt.fitting import RewardedQuery

    index = {q: i for i, q in enumerate(task.qids)}
    out = []
    for qid, m in depths.items():
        i = index[qid]
        out.append(RewardedQuery(task.name, qid, task.X[i], task.docs.get(task.base[i][:m]), scores[i, :m]))
    return out


def depths_of(pairs, tasks: list[Task]) -> list[dict[str, int]]:
    """Per task, how many of each rewarded query's top candidates are judged (always a prefix)."""
    out: list[dict[str, int]] = [{} for _ in tasks]
    for pair in pairs:
        out[pair.task][pair.qid] = max(out[pair.task].get(pair.qid, 0), pair.rank + 1)
    return out


def rerank(task: Task, scores: np.ndarray, depths: dict[str, int]) -> list[list[str]]:
    """The base ranking with each query's judged top-m stably sorted by reward inside those m slots."""
    out = []
    for i, (qid, ranking) in enumerate(zip(task.qids, task.base)):
        m = depths.get(qid, 0)
        order = np.argsort(-scores[i, :m], kind="stable")
        out.append([ranking[j] for j in order] + ranking[m:])
    return out


def fit(queries, scope: str, config=None, init=None):
    """The state of ``scope`` fitted on ``queries``; ``init``, a state, warm-starts the keys it holds."""
    from tour_pyserini.ttt.fitting import fit_scope
    from tour_pyserini.ttt.objectives import FitConfig
    from tour_pyserini.ttt.state import State

    config = config or FitConfig()
    keys, V, counts = fit_scope(queries, scope, config, init=init.by_key() if init else None)
    return State(scope, keys, V, counts, sorted({q.task for q in queries}), config.to_json(), {})


def search_with(task: Task, state, alpha: float | None = None) -> list[list[str]]:
    """Rankings of every query of ``task`` searched with unit(x + α v) (the ttt-embed rewriter's vectors)."""
    from tour_pyserini.ttt.state import shift_queries

    if state is None:
        return task.base
    if state.scope != "global" and task.name not in state.tasks:
        return task.base
    residuals = state.residuals(task.qids, None if state.scope == "global" else task.name, task.X)
    if alpha is not None:  # the ablation: the rule's α of this task's row replaced by a fixed one
        rule = state.alphas[state.keys.index((None, None) if state.scope == "global" else (task.name, None))]
        residuals = residuals / rule * alpha
    moved = np.any(residuals != 0, axis=1)
    rankings = list(task.base)
    if moved.any():
        vectors = shift_queries(task.X[moved], residuals[moved])
        for i, hits in zip(np.flatnonzero(moved), task.searcher.search_vectors(vectors, HITS)):
            rankings[i] = [h.docid for h in hits]
    return rankings


class Recorder:
    """Rows of runs/bench-ttt.json; Δ against the raw ranking of the same queries."""

    def __init__(self, tasks: list[Task]):
        self.rows: list[dict] = []
        self.raw = {t.name: t.evaluate(t.base) for t in tasks}

    def add(self, experiment: str, task: Task, method: str, budget, teacher: str, rankings, qids=None) -> dict:
        values = task.evaluate(rankings)
        qids = qids or task.qids
        metrics = {m: float(np.mean([v[q] for q in qids])) for m, v in values.items()}
        raw = {m: float(np.mean([v[q] for q in qids])) for m, v in self.raw[task.name].items()}
        base = self.raw[task.name][HEADLINE]
        row = {
            "experiment": experiment,
            "task": task.name,
            "method": method,
            "budget": budget,
            "teacher": teacher,
            "metrics": metrics,
            "delta": {m: metrics[m] - raw[m] for m in metrics},
            "command": COMMAND,
            "per_query_delta": {q: values[HEADLINE][q] - base[q] for q in qids},
        }
        self.rows.append(row)
        return row

    def add_mean(self, experiment: str, method: str, budget, teacher: str, rows: list[dict]) -> dict:
        mean = {key: {HEADLINE: float(np.mean([r[key][HEADLINE] for r in rows]))} for key in ("metrics", "delta")}
        row = {
            "experiment": experiment,
            "task": "mean",
            "method": method,
            "budget": budget,
            "teacher": teacher,
            **mean,
            "command": COMMAND,
        }
        self.rows.append(row)
        return row

    def save(self, path: Path) -> None:
        """Write this run's rows, keeping the rows of other (experiment, teacher) pairs already in the file."""
        rows = [{k: v for k, v in r.items() if k != "per_query_delta"} for r in self.rows]
        mine = {(r["experiment"], r["teacher"]) for r in rows}
        kept = json.loads(path.read_text()) if path.exists() else []
        kept = [r for r in kept if (r["experiment"], r["teacher"]) not in mine]
        path.write_text(json.dumps(kept + rows, indent=1) + "\n")


def methods_at(tasks: list[Task], teacher: str, depths: list[dict[str, int]], config=None, scopes=SCOPES):
    """{method: [rankings per task]} for rerank and each scope at the given judged depths."""
    scores = [t.teacher_scores(teacher) for t in tasks]
    out = {"rerank": [rerank(t, s, d) for t, s, d in zip(tasks, scores, depths)]}
    queries = [q for t, s, d in zip(tasks, scores, depths) for q in rewarded(t, s, d)]
    for scope in scopes:
        state = fit(queries, scope, config) if queries else None
        out[scope] = [search_with(t, state) for t in tasks]
    return out


def record_all(rec: Recorder, experiment: str, tasks, teacher, budget, methods: dict, suffix: str = "") -> str:
    """Rows of every method on every task and their mean; returns the mean deltas as one line."""
    means = []
    for method, per_task in methods.items():
        rows = [rec.add(experiment, t, method + suffix, budget, teacher, r) for t, r in zip(tasks, per_task)]
        means.append(
            f"{method} {rec.add_mean(experiment, method + suffix, budget, teacher, rows)['delta'][HEADLINE]:+.4f}"
        )
    return ", ".join(means)


def budget_experiment(rec: Recorder, tasks: list[Task], teacher: str) -> None:
    from tour_pyserini.ttt.allocation import allocate

    for budget in BUDGETS:
        start = time.perf_counter()
        depths = depths_of(allocate([t.qids for t in tasks], budget, depth=DEPTH, max_depth=MAX_DEPTH), tasks)
        means = record_all(rec, "budget", tasks, teacher, budget, methods_at(tasks, teacher, depths))
        print(f"  {teacher} b={budget}: {means} ({time.perf_counter() - start:.0f} s)", flush=True)
    for task in [*(t.name for t in tasks), "mean"]:
        for method in ("rerank", *SCOPES):
            curve = [
                r["delta"][HEADLINE]
                for r in rec.rows
                if r["experiment"] == "budget"
                and r["task"] == task
                and r["method"] == method
                and r["teacher"] == teacher
            ]
            aubc = float(np.trapezoid(curve, np.log10(BUDGETS)) / np.log10(BUDGETS[-1] / BUDGETS[0]))
            rec.rows.append(
                {
                    "experiment": "budget",
                    "task": task,
                    "method": method,
                    "budget": "AUBC",
                    "teacher": teacher,
                    "metrics": {},
                    "delta": {f"AUBC {HEADLINE}": aubc},
                    "command": COMMAND,
                }
            )


def train_to_test_experiment(rec: Recorder, tasks: list[Task], teacher: str) -> None:
    scifact = next(t for t in tasks if t.name == "scifact")
    train = Task(SCIFACT_TRAIN, scifact.searcher, split="train")
    queries = rewarded(train, train.teacher_scores(teacher), dict.fromkeys(train.qids, DEPTH))
    row = rec.add("train-to-test", scifact, "task", DEPTH, teacher, search_with(scifact, fit(queries, "task")))
    from scipy.stats import ttest_rel

    deltas = np.array(list(row["per_query_delta"].values()))
    row["p"] = float(ttest_rel(deltas, np.zeros(len(deltas))).pvalue) if deltas.any() else 1.0
    row["rewarded_queries"] = len(queries)
    print(f"  train-to-test {teacher}: {row['delta'][HEADLINE]:+.4f} (p {row['p']:.3g})", flush=True)


def cost_experiment(tasks: list[Task], path: Path, repeats: int = 20) -> None:
    """Fit time of 1,000 rewarded queries x 10 candidates (nq-oracle at b = 10), and the search overhead.

    The fit runs on one thread, so its CPU time is what it takes on an idle core; the wall time on the
    shared machine is reported beside it. The overhead compares the ttt-embed rewriter (a task state
    loaded from a file) with the plain search on the same 1,000 encoded queries in batches of 64, batch
    by batch, ``repeats`` times; the median of each.
    """
    import tempfile

    import torch

    from tour_pyserini.encoders import encoder_identity
    from tour_pyserini.rewriters import Identity
    from tour_pyserini.rewriters.ttt_embed import TttEmbed
    from tour_pyserini.ttt.fitting import fit_scope
    from tour_pyserini.ttt.state import State

    nq = next(t for t in tasks if t.name == "nq-oracle")
    queries = rewarded(nq, nq.teacher_scores("bm25"), dict.fromkeys(nq.qids[:1000], DEPTH))
    fits, fitted = [], {}
    for scope in ("global", "task", "query"):
        start, cpu = time.perf_counter(), time.process_time()
        fitted[scope] = fit_scope(queries, scope)[1]
        fits.append(
            {
                "scope": scope,
                "queries": len(queries),
                "candidates": DEPTH,
                "dimension": fitted[scope].shape[1],
                "seconds": time.perf_counter() - start,
                "cpu_seconds": time.process_time() - cpu,
            }
        )
    state = State(
        "task", [(nq.name, None)], fitted["task"], [len(queries)], [nq.name], {}, encoder_identity(nq.searcher.encoder)
    )
    with tempfile.TemporaryDirectory() as tmp:
        state.save(Path(tmp) / "state.safetensors")
        rewriter = TttEmbed(Path(tmp) / "state.safetensors")
        # (texts, qids, vectors) per batch; no teacher reads the texts, so the qids stand in for them
        batches = [(nq.qids[i : i + 64], nq.qids[i : i + 64], nq.X[i : i + 64]) for i in range(0, 1000, 64)]
        rewriters = {"plain": Identity(), "ttt-embed": rewriter}
        times: dict[str, list[float]] = {"plain": [], "ttt-embed": []}
        for r in range(repeats):  # batch by batch, alternating which goes first, so load drifts hit both alike
            elapsed = dict.fromkeys(rewriters, 0.0)
            for batch in batches:
                for name in sorted(rewriters, reverse=bool(r % 2)):
                    start = time.perf_counter()
                    nq.searcher.retrieve_vectors(*batch, HITS, rewriter=rewriters[name])
                    elapsed[name] += time.perf_counter() - start
            for name, seconds in elapsed.items():
                times[name].append(seconds)
    plain, ttt = float(np.median(times["plain"])), float(np.median(times["ttt-embed"]))
    result = {
        "fit": fits,
        "search_seconds_per_1000_queries": {"plain": plain, "ttt-embed": ttt},
        "search_ratio": ttt / plain,
        "repeats": repeats,
        "torch_threads_default": torch.get_num_threads(),
        "note": "2 shared CPU cores; load average at the start: " + open("/proc/loadavg").read().split()[0],
        "command": COMMAND,
    }
    path.write_text(json.dumps(result, indent=1) + "\n")
    fitted = ", ".join(f"{f['scope']} {f['seconds']:.2f} s ({f['cpu_seconds']:.2f} s CPU)" for f in fits)
    print(
        f"  cost: fit {fitted}; search {plain:.3f} s plain vs {ttt:.3f} s ttt-embed (ratio {ttt / plain:.3f})",
        flush=True,
    )


def plot(rows: list[dict], tasks: list[str], teachers: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = ["mean", *tasks]
    fig, axes = plt.subplots(
        len(teachers), len(panels), figsize=(4 * len(panels), 3.2 * len(teachers)), squeeze=False, sharex=True
    )
    for r, teacher in enumerate(teachers):
        for c, task in enumerate(panels):
            ax = axes[r][c]
            for method in ("rerank", *SCOPES):
                points = [
                    (x["budget"], x["delta"][HEADLINE])
                    for x in rows
                    if x["experiment"] == "budget"
                    and x["task"] == task
                    and x["method"] == method
                    and x["teacher"] == teacher
                    and x["budget"] != "AUBC"
                ]
                if points:
                    ax.plot(*zip(*points), marker="o", ms=3, label=method, ls="--" if method == "rerank" else "-")
            ax.axhline(0, color="grey", lw=0.6)
            ax.set_xscale("log")
            ax.set_title(f"{task} ({teacher}{' = upper bound' if teacher == 'oracle' else ''})", fontsize=9)
            ax.set_xlabel("judgments per query (b)")
            if c == 0:
                ax.set_ylabel(f"Δ {HEADLINE} vs raw")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--experiments", nargs="+", choices=EXPERIMENTS, default=list(EXPERIMENTS))
    ap.add_argument("--teachers", nargs="+", choices=["bm25", "oracle"], default=["bm25", "oracle"])
    ap.add_argument("--tasks", nargs="+", choices=[s.name for s in SPECS], default=[s.name for s in SPECS])
    ap.add_argument("--output", default="runs/bench-ttt.json")
    args = ap.parse_args(argv)
    OUT.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    tasks = [Task(spec) for spec in SPECS if spec.name in args.tasks]
    print(
        f"tasks ready in {time.perf_counter() - start:.0f} s: "
        + ", ".join(f"{t.name} {len(t.qids)} queries" for t in tasks),
        flush=True,
    )
    rec = Recorder(tasks)
    output = Path(args.output)
    experiments = {
        "budget": budget_experiment,
        "train-to-test": train_to_test_experiment,
    }
    for name in args.experiments:
        if name == "cost":
            cost_experiment(tasks, output.with_name("bench-ttt-cost.json"))
            continue
        print(f"{name}:", flush=True)
        for teacher in args.teachers:
            experiments[name](rec, tasks, teacher)
            rec.save(output)
    if "budget" in args.experiments:
        rows = json.loads(output.read_text())
        plot(rows, [t.name for t in tasks], args.teachers, output.with_name("bench-ttt-budget.png"))
    if rec.rows:
        print(f"wrote {output} ({len(rec.rows)} rows)")
    print(f"done in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
