"""Whether a TTT-Embed state carries over to queries nobody judged: k-fold over each collection's judged queries.

Each collection's judged queries are dealt into folds (seeded by the collection's name). For each fold, a share s of
the collection's queries, drawn from the other folds (nested prefixes of one seeded order, so smaller shares are
subsets of larger ones), is rewarded: a teacher scores each one's base top ``judged``. A state of the row's scope is
fitted on them (task: one per collection; global: one for every collection's; neighbours: each unseen query mixes the
query states of the rewarded queries nearest it), its magnitude set by the row's rule (count: n/(n + 1); cv:
cross-validated over the rewarded queries alone), and the held-out fold is searched with unit(x + α v). Every query is
unseen exactly once; the Δ of each one's metric against dense retrieval is kept, and the pooled Δ gets a paired
t-test, Holm-corrected over its table. A held-out row fits one global state on every other collection's queries (all
of them rewarded) and applies it to every query of the collection left out.

The teachers' scores are stored beside the report (``OUTPUT.scores/``), and each row as it finishes
(``OUTPUT.rows.jsonl``): an interrupted run goes on where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.experiments.runner import RowStore, split_judge
from tour_pyserini.files.transfers import ORACLE, Transfer, TransferCollection, Variant
from tour_pyserini.ttt.magnitude import RANKING_DEPTH

if TYPE_CHECKING:
    from tour_pyserini.eval.judge import Judge
    from tour_pyserini.search import TourSearcher

log = logging.getLogger(__name__)

HITS = 100  # the depth each moved query is searched to; the metrics read the top 100 at most


def fold_seed(collection: str) -> int:
    """A collection's seed, the same whichever collections run beside it."""
    return zlib.crc32(collection.encode())


def rewarded_rows(fold: np.ndarray, held_out: int, share: float, seed: int) -> list[int]:
    """The rows rewarded while fold ``held_out`` is unseen: the first round(share n) of a seeded order of the other
    folds' rows (every row of them when the share asks for more)."""
    pool = np.flatnonzero(fold != held_out)
    order = pool[np.random.default_rng(seed).permutation(len(pool))]
    return sorted(order[: min(len(pool), int(round(share * len(fold))))].tolist())


@dataclass
class TransferTask:
    """One collection's judged queries: their vectors, base top ``HITS``, the candidates a teacher judges (each one's
    base top ``judged``, with their vectors), the per-query metric of the base run, and its judge."""

    col: TransferCollection
    qids: list[str]
    topics: list
    X: np.ndarray
    candidates: list  # Candidates of each query's base top ``judged``
    searcher: TourSearcher
    judge: Judge
    qrels: dict | None  # None: judged by the answer strings the topics hold
    base: dict[str, float]

    @classmethod
    def load(cls, col: TransferCollection, split: str, judged: int, resources) -> TransferTask:
        from tour_pyserini.files import read_qrels, read_topics
        from tour_pyserini.pipeline import SearchSpec, build, plan

        files = col.collection.split(split)
        qrels = read_qrels(files.qrels) if files.qrels else None
        topics = [t for t in read_topics(files.topics) if qrels is None or t.qid in qrels]
        spec = SearchSpec(col.index, encoder=col.encoder, encoder_runtime="torch")
        searcher = build(plan(spec, resources)).searcher
        X = searcher.encode([t.text for t in topics])
        judge = split_judge(qrels, [col.metric], topics, searcher.docstore)
        found = searcher.search_candidates(X, judged)
        task = cls(col, [t.qid for t in topics], topics, X, found, searcher, judge, qrels, {})
        task.base = task.evaluate(X)
        return task

    def evaluate(self, vectors: np.ndarray) -> dict[str, float]:
        """Each query's metric when searched with ``vectors`` (aligned with ``qids``)."""
        hits = self.searcher.search_vectors(vectors, HITS)
        run = {q: {h.docid: h.score for h in found} for q, found in zip(self.qids, hits)}
        return self.judge.per_query(run)[self.col.metric]

    def labels(self) -> np.ndarray:
        """The oracle's rewards: each judged candidate's qrels grade (below 0: 0), or whether it holds an answer."""
        if self.qrels is not None:
            grades = [[max(self.qrels[q].get(d, 0), 0) for d in c.docids] for q, c in zip(self.qids, self.candidates)]
            return np.array(grades, float)
        from tour_pyserini.eval.answers import AnswerMatcher

        docstore = self.searcher.docstore
        if docstore is None:
            raise UserError(f"{self.col.index} stores no passages: answer strings cannot be looked for")
        matcher = AnswerMatcher(docstore)
        return np.array(
            [
                [matcher.has_answer(doc.docid, doc.text, t.answers) for doc in docstore.get(c.docids)]
                for t, c in zip(self.topics, self.candidates)
            ],
            float,
        )

    def teacher_scores(self, spec: str, resources) -> np.ndarray:
        """(n, judged) scores of each query's judged candidates by ``spec`` (NaN where it scored none)."""
        if spec == ORACLE:
            return self.labels()
        from tour_pyserini.pipeline import SearchSpec, build, plan
        from tour_pyserini.results import Trace
        from tour_pyserini.teachers import ScoreCache

        teacher = build(
            plan(
                SearchSpec(self.col.index, encoder=self.col.encoder, encoder_runtime="torch", teacher=spec),
                resources,
                asks_teacher=True,
            )
        ).asked_teacher
        from tqdm import tqdm

        cache, scores = ScoreCache(teacher, self.searcher.docstore), []
        for i in tqdm(range(0, len(self.qids), 32), desc=f"{self.col.name}: {spec}", unit="batch", leave=False):
            at = slice(i, i + 32)
            scores += cache.score(
                self.qids[at],
                [t.text for t in self.topics[at]],
                [c.docids for c in self.candidates[at]],
                [Trace() for _ in self.qids[at]],
                list(self.X[at]),
                self.searcher.query_encoder,
            )
        return np.array(scores, dtype=float)

    def rewarded(self, scores: np.ndarray, rows: list[int]) -> list:
        from tour_pyserini.ttt.fitting import RewardedQuery

        return [
            RewardedQuery(
                self.col.name,
                self.qids[i],
                self.X[i],
                self.candidates[i].vectors,
                scores[i],
                tuple(self.candidates[i].docids),
            )
            for i in rows
            if not np.isnan(scores[i]).all()
        ]


def fitted_state(queries: list, scope: str, rule: str, search=None):
    """The ``scope`` state fitted on ``queries``, its magnitude set by ``rule`` (``auto``: the scope and its α chosen
    by cross-validation over ``queries``; the query scope, which moves no other query, where no shared one helps);
    ``search`` re-searches a task's index for the ranking rule."""
    from tour_pyserini.ttt.magnitude import MagnitudeConfig
    from tour_pyserini.ttt.objectives import FitConfig
    from tour_pyserini.ttt.pipeline import fit_queries

    return fit_queries(queries, scope, FitConfig(), magnitude=MagnitudeConfig(alpha_rule=rule), search=search)


def moved(task: TransferTask, rows: list[int], state) -> tuple[np.ndarray, float]:
    """The vectors of ``rows`` of ``task`` as ``state`` moves them, and the magnitude α it applied to them."""
    from tour_pyserini.ttt.online import shift_by_state

    X = task.X[rows]
    if state.scope == "query":
        return X, 0.0  # query states move only the queries they were fitted on, and these are unseen
    mine = [a for key, a in zip(state.keys, state.alphas) if key[0] in (None, task.col.name)]
    shifted = shift_by_state(state, task.col.name, [task.qids[r] for r in rows], X)
    return shifted, float(np.mean(mine)) if mine else 0.0


def run_variant(transfer: Transfer, tasks: list[TransferTask], scores: list[np.ndarray], variant: Variant) -> dict:
    """Each collection's per-query Δ of its metric when unseen, the mean α its states were applied with, and how many
    of those states were of each scope (``auto`` chooses one per fit)."""
    by_name = {t.col.name: t for t in tasks}

    def search(task: str, vectors: np.ndarray) -> list[list[str]]:  # what the ranking rule re-searches
        return [[h.docid for h in hits] for hits in by_name[task].searcher.search_vectors(vectors, RANKING_DEPTH)]

    vectors = [t.X.copy() for t in tasks]
    alphas: list[list[float]] = [[] for _ in tasks]
    scopes: list[list[str]] = [[] for _ in tasks]  # the scope of each state that moved the collection's queries
    if variant.held_out:
        for i, task in enumerate(tasks):
            others = [q for j, t in enumerate(tasks) if j != i for q in t.rewarded(scores[j], list(range(len(t.qids))))]
            state = fitted_state(others, "global", variant.rule, search)
            vectors[i], alpha = moved(task, list(range(len(task.qids))), state)
            alphas[i].append(alpha)
            scopes[i].append(state.scope)
    else:
        folds = [fold_of(t, transfer.folds) for t in tasks]
        for f in range(transfer.folds):
            queries = [
                t.rewarded(s, rewarded_rows(fold, f, variant.share, fold_seed(t.col.name) + f))
                for t, s, fold in zip(tasks, scores, folds)
            ]
            groups = queries if variant.scope == "task" else [[q for mine in queries for q in mine]]
            for group in groups:
                if not group:
                    continue
                state = fitted_state(group, variant.scope, variant.rule, search)
                for i, (task, fold) in enumerate(zip(tasks, folds)):
                    if variant.scope == "task" and group[0].task != task.col.name:
                        continue
                    unseen = np.flatnonzero(fold == f).tolist()
                    vectors[i][unseen], alpha = moved(task, unseen, state)
                    alphas[i].append(alpha)
                    scopes[i].append(state.scope)
    out = {}
    for task, v, a, chosen in zip(tasks, vectors, alphas, scopes):
        values = task.evaluate(v)
        out[task.col.name] = {
            "delta": {q: values[q] - task.base[q] for q in task.qids},
            "alpha": float(np.mean(a)) if a else 0.0,
            "scopes": {s: chosen.count(s) for s in dict.fromkeys(chosen)},
        }
    return out


def fold_of(task: TransferTask, folds: int) -> np.ndarray:
    from tour_pyserini.ttt.magnitude import fold_of as deal

    return deal(len(task.qids), folds, seed=fold_seed(task.col.name))


def row_of(variant: Variant, tasks: list[TransferTask], outcome: dict, bases: dict[str, TransferTask]) -> dict:
    """A row: each collection's mean Δ, its paired t-test, wins/ties/losses and α; where the collection has a base,
    also its dense run's and its moved queries' Δ against the base's dense run."""
    from tour_pyserini.eval.significance import paired_t_test

    collections = {}
    for task in tasks:
        delta = np.array([outcome[task.col.name]["delta"][q] for q in task.qids])
        if (base := bases.get(task.col.name)) is not None:
            own = np.array([task.base[q] for q in task.qids])
            to_base = own - np.array([base.base[q] for q in task.qids])
            versus = {
                "base": base.col.name,
                "base_dense": float(np.mean(list(base.base.values()))),
                "dense_delta": float(to_base.mean()),
                "dense_p": paired_t_test(to_base.tolist(), [0.0] * len(to_base)),
                "delta": float((to_base + delta).mean()),
                "p": paired_t_test((to_base + delta).tolist(), [0.0] * len(delta)),
            }
        collections[task.col.name] = {
            "metric": task.col.metric,
            "queries": len(delta),
            "dense": float(np.mean(list(task.base.values()))),
            "delta": float(delta.mean()),
            "p": paired_t_test(delta.tolist(), [0.0] * len(delta)),
            "wins": int((delta > 0).sum()),
            "ties": int((delta == 0).sum()),
            "losses": int((delta < 0).sum()),
            "alpha": outcome[task.col.name]["alpha"],
            "scopes": outcome[task.col.name]["scopes"],
            "per_query": outcome[task.col.name]["delta"],
            **({"versus_base": versus} if base is not None else {}),
        }
    return {**variant.__dict__, "key": variant.key, "collections": collections}


def fingerprint(transfer: Transfer, variant: Variant, tasks: list[TransferTask]) -> str:
    """What makes a row: its variant, the folds and judgments, and each collection's queries, metric, teacher and the
    candidates it judges (another index or encoder judges others)."""
    made = [
        variant.key,
        variant.held_out,
        transfer.folds,
        transfer.judged,
        [
            (t.col.name, t.col.metric, t.col.teachers[variant.teacher], t.qids, [c.docids for c in t.candidates])
            for t in tasks
        ],
    ]
    return hashlib.sha256(json.dumps(made).encode()).hexdigest()


def run_transfer(
    transfer: Transfer, collections: list[str], variants: list[Variant], output: str, fresh: bool = False
) -> list[dict]:
    """The rows of ``variants`` on ``collections``, measured or reused from ``OUTPUT.rows.jsonl``, with a progress
    bar; each teacher's scores of the judged candidates computed once and kept in ``OUTPUT.scores/``."""
    from tqdm import tqdm

    from tour_pyserini.pipeline import Resources

    store_path = Path(f"{output}.rows.jsonl")
    if fresh:
        store_path.unlink(missing_ok=True)
    store = RowStore(store_path)
    resources = Resources()
    used = [c for c in collections if any(c in v.collections for v in variants)]
    wanted = used + [b for c in used if (b := transfer.collections[c].base) in collections and b not in used]
    loaded = {c: TransferTask.load(transfer.collections[c], transfer.split, transfer.judged, resources) for c in wanted}
    bases = {c: loaded[b] for c in used if (b := transfer.collections[c].base) in loaded}
    scores: dict[tuple[str, str], np.ndarray] = {}  # (teacher, collection): its scores of the judged candidates
    rows = []
    for variant in tqdm(variants, desc=transfer.name, unit="row"):
        tasks = [loaded[c] for c in used if c in variant.collections]
        key = fingerprint(transfer, variant, tasks)
        row = store.get(key)
        if row is None:
            for t in tasks:
                if (variant.teacher, t.col.name) not in scores:
                    scores[variant.teacher, t.col.name] = stored_scores(t, variant.teacher, transfer, output, resources)
            mine = [scores[variant.teacher, t.col.name] for t in tasks]
            row = {**row_of(variant, tasks, run_variant(transfer, tasks, mine, variant), bases), "fingerprint": key}
            store.add(row)
        log.info(
            "%s: %s",
            variant.key,
            ", ".join(f"{c} {r['delta']:+.4f} (p {r['p']:.2g})" for c, r in row["collections"].items()),
        )
        rows.append(row)
    return rows


def stored_scores(task: TransferTask, teacher: str, transfer: Transfer, output: str, resources) -> np.ndarray:
    """``teacher``'s scores of ``task``'s judged candidates, computed once: kept in ``OUTPUT.scores/`` under a name
    that its queries and candidates make."""
    spec = task.col.teachers[teacher]
    made = json.dumps([spec, transfer.split, task.qids, [c.docids for c in task.candidates]]).encode()
    name = hashlib.sha256(made).hexdigest()[:16]  # other queries or candidates: other scores
    path = Path(f"{output}.scores") / f"{task.col.name}.{teacher}.{name}.npy"
    if path.is_file():
        return np.load(path)
    scores = task.teacher_scores(spec, resources)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.save(path, scores)
    return scores


def with_holm(rows: list[dict]) -> list[dict]:
    """The rows without their per-query Δs, each collection's cell with ``p_holm``: its p Holm-corrected over every
    cell of its table (each table one family, the comparisons with a base's dense run in it); a collection's dense
    run against its base's is one test, corrected over the table's collections."""
    from tour_pyserini.eval.significance import holm

    out = [{**r, "collections": {c: dict(v) for c, v in r["collections"].items()}} for r in rows]
    for table in dict.fromkeys(r["table"] for r in out):
        named = [(c, v) for r in out if r["table"] == table for c, v in r["collections"].items()]
        cells = [v for _, v in named]
        tests = [(cell, "p", "p_holm") for cell in cells]
        dense: dict[str, list[dict]] = {}  # a collection's dense run against its base's: one test, in every row
        for name, cell in named:
            if "versus_base" in cell:
                cell["versus_base"] = versus = dict(cell["versus_base"])
                tests.append((versus, "p", "p_holm"))
                dense.setdefault(name, []).append(versus)
        for (where, _, corrected), p in zip(tests, holm([where[key] for where, key, _ in tests])):
            where[corrected] = p
        # the encoders' dense runs against their bases: what was lost, a family of its own
        for same, p in zip(dense.values(), holm([same[0]["dense_p"] for same in dense.values()])):
            for versus in same:
                versus["dense_p_holm"] = p
        for cell in cells:
            cell.pop("per_query", None)
    for r in out:
        r.pop("fingerprint", None)
    return out


def write_transfer_report(rows: list[dict], output: str, title: str, source: str) -> None:
    """``OUTPUT.json`` (the rows, Holm-corrected, without per-query values, which ``OUTPUT.rows.jsonl`` keeps) and
    ``OUTPUT.md`` (one table per table of the file)."""
    from tour_pyserini.experiments.pages import forgetting_table, transfer_table

    report = with_holm(rows)
    Path(f"{output}.json").write_text(json.dumps(report, indent=1) + "\n")

    def rendered(table: str) -> str:  # a table whose collections have a base shows both comparisons
        based = any("versus_base" in c for r in report if r["table"] == table for c in r["collections"].values())
        return (forgetting_table if based else transfer_table)(report, table)

    tables = [f"**{t}**\n\n{rendered(t)}" for t in dict.fromkeys(r["table"] for r in report)]
    Path(f"{output}.md").write_text(f"# {title}\n\n" + "\n".join(tables) + f"\nMade by `{source}`.\n")
    plot_curves(report, Path(f"{output}-curve.png"))


def plot_curves(report: list[dict], path: Path) -> None:
    """Δ on unseen queries against the share of queries rewarded: one row of panels per teacher, one panel per
    collection; colour by scope, line style by α rule; only what was measured at more than one share (none: no plot)."""
    lines: dict[tuple, list] = {}
    for r in report:
        if not r["held_out"]:
            lines.setdefault((r["teacher"], r["scope"], r["rule"]), []).append(r)
    lines = {k: v for k, v in lines.items() if len({r["share"] for r in v}) > 1}
    if not lines:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    teachers = list(dict.fromkeys(k[0] for k in lines))
    scopes = list(dict.fromkeys(k[1] for k in lines))
    styles = {"count": "-", "cv": "--", "ranking": ":"}
    names = list(dict.fromkeys(c for rows in lines.values() for r in rows for c in r["collections"]))
    fig, axes = plt.subplots(len(teachers), len(names), figsize=(4.5 * len(names), 3.2 * len(teachers)), squeeze=False)
    for row, teacher in zip(axes, teachers):
        for ax, name in zip(row, names):
            for (who, scope, rule), mine in lines.items():
                points = sorted((r["share"], r["collections"][name]["delta"]) for r in mine if name in r["collections"])
                if who == teacher and points:
                    colour = f"C{scopes.index(scope)}"
                    ax.plot(
                        *zip(*points),
                        styles.get(rule, "-."),
                        marker="o",
                        ms=3,
                        color=colour,
                        label=f"{scope}, α {rule}",
                    )
            ax.axhline(0, color="grey", lw=0.8)
            metric = next(
                r["collections"][name]["metric"] for rows in lines.values() for r in rows if name in r["collections"]
            )
            ax.set(title=f"{name}, {teacher} rewards", xlabel="share of queries rewarded", ylabel=f"Δ {metric}, unseen")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center right", fontsize=7)
    fig.tight_layout(rect=(0, 0, 0.86, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
