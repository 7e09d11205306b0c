"""make bench-transfer: does a TTT-Embed state carry over to queries nobody judged? k-fold, every query unseen once.

Each task's judged queries (SciFact test, nq-oracle test, Cranfield) are dealt into 5 folds. For each fold, the
queries of the other four are the pool a share s of the task's queries is rewarded from (s = 0.8: all of them;
smaller shares are nested prefixes of one seeded order, a learning curve), each with 10 judgments of its base
top 10 by a teacher; a state is fitted on them and the held-out fold is searched with it. Every query is
therefore unseen exactly once, and the pooled per-query Δ nDCG@10 against dense retrieval gets a paired t-test
(two-sided), besides one per fold. Teachers: ``oracle`` (the labels: an upper bound, not a system), ``bm25`` and
``ce`` (the shipped cross-encoders: models/nq-oracle-ce on nq-oracle, models/scifact-rce elsewhere).

Experiments (``--experiments``):

- ``main``: scopes task, global (one state from every task's rewarded queries) and neighbours (an unseen query
  mixes the query states of the 10 rewarded queries nearest it, weights softmax(cos / 0.05):
  tour_pyserini.ttt.neighbours) × α rule (count: n/(n+1), 1/2 for each neighbour's query state; cv:
  cross-validated over the rewarded queries alone, tour_pyserini.ttt.magnitude) × teacher, at s = 0.8;
- ``curve``: s in 0.1, 0.2, 0.4, 0.8 (task and neighbours scopes, both rules; oracle and bm25);
- ``factors``: objective (kd, rkl, grpo), the rewards' normalisation (min-max with τ_T 0.02 or 0.2, ranks) and
  v with its mean-document direction removed (task scope, count rule; oracle and bm25); each fitted state's
  |v| and cosine with the index's mean document vector are recorded;
- ``kinds``: shared maps under the same folds: ``lowrank`` (x -> x + U Vᵀ x of rank 8, with the ridge λ‖U Vᵀ‖²)
  and ``bilinear`` (a shared W = I + U Vᵀ scoring xᵀ W z, the query not normalised during fitting); the two
  maps are fitted with the task state's KD objective by torch's Adam. No setting was tuned on these results;
  the maps' ridge was first put on ‖U‖² + ‖V‖², which held both maps at exactly 0, and was moved to the map.

Writes runs/bench-transfer.json (one row per experiment, task, teacher and variant, with per-fold rows) and
runs/bench-transfer.md (the tables), runs/bench-transfer-curve.png (the learning curve). Teacher scores and
query vectors are cached in runs/ttt/cache/ (shared with make bench-ttt).
Usage: python bench/transfer.py [--experiments main curve factors kinds] [--teachers oracle bm25 ce]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
from ttt import DEPTH, HEADLINE, HITS, OUT, SPECS, Task, cached, fit, rewarded

FOLDS = 5
SCOPES = ("task", "global", "neighbours")
SHARES = (0.1, 0.2, 0.4, 0.8)
EXPERIMENTS = ("main", "curve", "factors", "kinds")
TEACHERS = ("oracle", "bm25", "ce")
CROSS_ENCODER = {"nq-oracle": "cross-encoder:models/nq-oracle-ce"}
DEFAULT_CROSS_ENCODER = "cross-encoder:models/scifact-rce"
COMMAND = "make bench-transfer"


@dataclass(frozen=True)
class Variant:
    """One way of fitting and applying a state: scope, α rule, objective settings, reward transform, kind."""

    name: str
    scope: str = "task"
    rule: str = "count"
    fit: dict | None = None  # FitConfig fields that differ from the defaults
    rewards: str = "minmax"  # or "rank": rewards replaced by their ranks before the min-max normalisation
    kind: str = "residual"  # residual (of the scope), centred, lowrank, bilinear


def teacher_scores(task: Task, teacher: str) -> np.ndarray:
    """Scores (n, DEPTH) of each query's base top DEPTH by ``teacher``."""
    if teacher in ("oracle", "bm25"):
        return task.teacher_scores(teacher)[:, :DEPTH]
    spec = CROSS_ENCODER.get(task.name, DEFAULT_CROSS_ENCODER)

    def score():
        from tour_pyserini.results import Trace
        from tour_pyserini.teachers import ScoreCache, TeacherContext, get_teacher

        judge = ScoreCache(get_teacher(spec, TeacherContext(index_dir=task.spec.index)), task.searcher.docstore)
        return np.array(
            judge.score(
                task.qids, [t.text for t in task.topics], [b[:DEPTH] for b in task.base], [Trace() for _ in task.qids]
            )
        )

    return cached(f"{task.name}.{task.split}.{spec.split('/')[-1]}.d{DEPTH}", score)


def folds_of(task: Task, index: int) -> np.ndarray:
    from tour_pyserini.ttt.magnitude import fold_of

    return fold_of(len(task.qids), FOLDS, seed=3000 + index)


def rewarded_rows(fold: np.ndarray, f: int, share: float, seed: int) -> list[int]:
    """Rows rewarded in fold ``f``: the first round(share n) of a seeded order of the other folds' rows."""
    pool = np.flatnonzero(fold != f)
    order = pool[np.random.default_rng(seed).permutation(len(pool))]
    return sorted(order[: min(len(pool), int(round(share * len(fold))))].tolist())


def rank_transform(scores: np.ndarray) -> np.ndarray:
    """Each row's scores replaced by their ranks (ties share the lower rank): only the order is kept."""
    from scipy.stats import rankdata

    return np.stack([rankdata(row, method="min") for row in scores]).astype(float)


def fitted(queries, variant: Variant):
    """The state of ``variant`` fitted on ``queries`` and the α it deploys (None: the count rule's)."""
    from tour_pyserini.ttt.magnitude import cross_validated_alpha
    from tour_pyserini.ttt.objectives import FitConfig

    config = FitConfig(**(variant.fit or {}))
    state = neighbours_state(queries) if variant.scope == "neighbours" else fit(queries, variant.scope, config)
    choice = cross_validated_alpha(queries, variant.scope, config) if variant.rule == "cv" else None
    return state, choice


def neighbours_state(queries):
    """The neighbours state (the library's) of ``queries``: their query states, found by their vectors."""
    from tour_pyserini.ttt.fitting import fit_scope
    from tour_pyserini.ttt.state import State

    keys, V, counts = fit_scope(queries, "neighbours")
    tasks = sorted({q.task for q in queries})
    return State("neighbours", keys, V, counts, tasks, {}, {}, anchors=np.stack([q.x for q in queries]))


@cache
def mean_document(task: Task) -> np.ndarray:
    m = task.docs.matrix.astype(np.float64).mean(axis=0)
    return m / np.linalg.norm(m)


def moved_vectors(task: Task, rows: list[int], variant: Variant, model, queries) -> np.ndarray:
    """The query vectors of ``rows`` of ``task`` as ``variant``'s fitted model moves them (float32, unit)."""
    from tour_pyserini.ttt.state import shift_queries

    X = task.X[rows].astype(np.float64)
    if variant.kind in ("lowrank", "bilinear"):
        U, V = model
        moved = X + (X @ V) @ U.T
        return (moved / np.linalg.norm(moved, axis=1, keepdims=True)).astype(np.float32)
    state, choice = model
    if state.scope != "global" and task.name not in state.tasks:
        return X.astype(np.float32)
    residuals = state.residuals([task.qids[r] for r in rows], None if state.scope == "global" else task.name, X)
    if choice is not None:
        rule = np.array(state.alphas)[0] if len(state.alphas) else 1.0
        residuals = residuals / rule * choice.alpha if rule else residuals * 0
    if variant.kind == "centred":
        m = mean_document(task)
        residuals = residuals - np.outer(residuals @ m, m)
    return shift_queries(X, residuals)


def fit_map(queries, normalise: bool, rank: int = 8, steps: int = 300, lr: float = 0.01, ridge: float = 0.3):
    """U, V (d, rank) of x -> x + U Vᵀ x fitted with the KD objective of the task state (torch autograd)."""
    import torch

    from tour_pyserini.ttt.fitting import pad
    from tour_pyserini.ttt.objectives import FitConfig

    config = FitConfig()
    X, Z, R, mask = (torch.from_numpy(np.asarray(a)) for a in pad(queries))
    X, Z = X.double(), Z.double()
    d = X.shape[1]
    gen = torch.Generator().manual_seed(0)
    U = torch.zeros(d, rank, dtype=torch.float64, requires_grad=True)
    V = (torch.randn(d, rank, generator=gen, dtype=torch.float64) / d**0.5).requires_grad_()
    teacher = torch.log_softmax((R / config.tau_teacher).masked_fill(~mask, -torch.inf), dim=1)
    optimiser = torch.optim.Adam([U, V], lr=lr)
    for _ in range(steps):
        optimiser.zero_grad()
        moved = X + (X @ V) @ U.T
        if normalise:
            moved = moved / moved.norm(dim=1, keepdim=True)
        logits = (torch.einsum("nkd,nd->nk", Z, moved) / config.tau_student).masked_fill(~mask, -torch.inf)
        student = torch.log_softmax(logits, dim=1)
        kl = (teacher.exp() * (teacher - student)).masked_fill(~mask, 0).sum(dim=1).mean()
        # the ridge is on the map's change, as the residual's is on v: on the factors it would hold both at 0
        loss = kl + ridge * ((U @ V.T) ** 2).sum()
        loss.backward()
        optimiser.step()
    return U.detach().numpy(), V.detach().numpy()


def run_variant(tasks: list[Task], scores: list[np.ndarray], variant: Variant, share: float) -> dict:
    """Per task: Δ nDCG@10 of every query when unseen, per fold, and diagnostics of the fitted states."""
    folds = [folds_of(t, i) for i, t in enumerate(tasks)]
    moved = [np.array(t.X, dtype=np.float32) for t in tasks]
    diagnostics = []
    for f in range(FOLDS):
        queries = []
        for i, (task, s, fold) in enumerate(zip(tasks, scores, folds)):
            rows = rewarded_rows(fold, f, share, seed=4000 + 10 * i + f)
            values = rank_transform(s) if variant.rewards == "rank" else s
            queries += rewarded(task, values, {task.qids[r]: DEPTH for r in rows})
        scopes = [[q for q in queries if q.task == t.name] for t in tasks] if variant.scope == "task" else [queries]
        for group in scopes:
            if not group:
                continue
            if variant.kind in ("lowrank", "bilinear"):
                model = fit_map(group, normalise=variant.kind == "lowrank")
            else:
                model = fitted(group, variant)
                state, choice = model
                for key, v, a in zip(state.keys, state.vectors, state.alphas):
                    task = next(t for t in tasks if key[0] in (None, t.name))
                    diagnostics.append(
                        {
                            "fold": f,
                            "task": key[0],
                            "norm": float(np.linalg.norm(v)),
                            "alpha": choice.alpha if choice else a,
                            "cos_mean_document": float(v @ mean_document(task) / np.linalg.norm(v)),
                            "cv": choice.to_json() if choice else None,
                        }
                    )
            for task, fold, out in zip(tasks, folds, moved):
                if variant.scope == "task" and group[0].task != task.name:
                    continue
                rows = np.flatnonzero(fold == f).tolist()
                out[rows] = moved_vectors(task, rows, variant, model, group)
    result = {}
    for task, fold, vectors in zip(tasks, folds, moved):
        rankings = [[h.docid for h in hits] for hits in task.searcher.search_vectors(vectors, HITS)]
        new, base = task.evaluate(rankings)[HEADLINE], task.evaluate(task.base)[HEADLINE]
        delta = np.array([new[q] - base[q] for q in task.qids])
        result[task.name] = {"delta": delta, "fold": fold, "base": np.array([base[q] for q in task.qids])}
    return {"tasks": result, "diagnostics": diagnostics}


def summarise(experiment: str, teacher: str, variant: Variant, share: float, outcome: dict) -> list[dict]:
    from tour_pyserini.eval.significance import paired_t_test

    rows = []
    for task, r in outcome["tasks"].items():
        delta, fold = r["delta"], r["fold"]
        per_fold = [
            {
                "fold": f,
                "delta": float(delta[fold == f].mean()),
                "p": paired_t_test(delta[fold == f], np.zeros(int((fold == f).sum()))),
            }
            for f in range(FOLDS)
        ]
        diagnostics = [d for d in outcome["diagnostics"] if d["task"] in (None, task)]
        rows.append(
            {
                "experiment": experiment,
                "task": task,
                "teacher": teacher,
                "variant": variant.name,
                "scope": variant.scope,
                "rule": variant.rule,
                "share": share,
                "queries": len(delta),
                "dense": float(r["base"].mean()),
                "delta": float(delta.mean()),
                "p": paired_t_test(delta, np.zeros(len(delta))),
                "wins": int((delta > 0).sum()),
                "ties": int((delta == 0).sum()),
                "losses": int((delta < 0).sum()),
                "folds": per_fold,
                "norm": float(np.mean([d["norm"] for d in diagnostics])) if diagnostics else None,
                "alpha": float(np.mean([d["alpha"] for d in diagnostics])) if diagnostics else None,
                "cos_mean_document": float(np.mean([d["cos_mean_document"] for d in diagnostics]))
                if diagnostics
                else None,
                "command": COMMAND,
            }
        )
    return rows


def variants(experiment: str) -> list[tuple[Variant, float]]:
    if experiment == "main":
        return [(Variant(f"{scope} {rule}", scope, rule), 0.8) for scope in SCOPES for rule in ("count", "cv")]
    if experiment == "curve":
        return [
            (Variant(f"{scope} {rule}", scope, rule), s)
            for s in SHARES
            for scope in ("task", "neighbours")
            for rule in ("count", "cv")
        ]
    if experiment == "factors":
        return [
            (Variant("kd (default)"), 0.8),
            (Variant("rkl", fit={"objective": "rkl"}), 0.8),
            (Variant("grpo", fit={"objective": "grpo"}), 0.8),
            (Variant("tau_T 0.2", fit={"tau_teacher": 0.2}), 0.8),
            (Variant("rank rewards", rewards="rank"), 0.8),
            (Variant("mean-document direction removed", kind="centred"), 0.8),
        ]
    return [
        (Variant("lowrank", kind="lowrank"), 0.8),
        (Variant("bilinear", kind="bilinear"), 0.8),
    ]


def table(rows: list[dict]) -> str:
    """One markdown table per experiment: Δ nDCG@10 on the unseen queries per task, its paired p, the p
    Holm-corrected over the experiment's table, and wins/ties/losses."""
    from tour_pyserini.eval.significance import holm

    tasks = list(dict.fromkeys(r["task"] for r in rows))
    out = []
    for experiment in dict.fromkeys(r["experiment"] for r in rows):
        mine = [r for r in rows if r["experiment"] == experiment]
        adjusted = dict(zip(map(id, mine), holm([r["p"] for r in mine])))
        head = "| teacher | variant | share | " + " | ".join(f"{t}: Δ (p, Holm p, W/T/L)" for t in tasks) + " |"
        lines = [f"**{experiment}**", "", head, "|" + "---|" * (head.count("|") - 1)]
        for key in dict.fromkeys((r["teacher"], r["variant"], r["share"]) for r in mine):
            cells = []
            for task in tasks:
                match = [r for r in mine if (r["teacher"], r["variant"], r["share"], r["task"]) == (*key, task)]
                r = match[0] if match else None
                cells.append(
                    f"{r['delta']:+.4f} ({r['p']:.2g}, {adjusted[id(r)]:.2g}, {r['wins']}/{r['ties']}/{r['losses']})"
                    if r
                    else ""
                )
            lines.append(f"| {key[0]} | {key[1]} | {key[2]:g} | " + " | ".join(cells) + " |")
        out.append("\n".join(lines))
    return "\n\n".join(out)


def plot_curve(rows: list[dict], path: Path) -> None:
    """Δ nDCG@10 on unseen queries against the share rewarded: one panel per scope (rows) and task (columns)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = [r for r in rows if r["experiment"] == "curve"]
    tasks, scopes = list(dict.fromkeys(r["task"] for r in curve)), list(dict.fromkeys(r["scope"] for r in curve))
    if not tasks:
        return
    fig, axes = plt.subplots(len(scopes), len(tasks), figsize=(4 * len(tasks), 3 * len(scopes)), squeeze=False)
    for row, scope in zip(axes, scopes):
        for ax, task in zip(row, tasks):
            for teacher, colour in zip(dict.fromkeys(r["teacher"] for r in curve), ("C0", "C2", "C1")):
                for rule, style in (("count", "-o"), ("cv", "--s")):
                    points = sorted(
                        (r["share"], r["delta"])
                        for r in curve
                        if r["task"] == task and r["scope"] == scope and r["teacher"] == teacher and r["rule"] == rule
                    )
                    if points:
                        ax.plot(*zip(*points), style, color=colour, label=f"{teacher}, α {rule}")
            ax.axhline(0, color="grey", lw=0.8)
            ax.set_title(f"{task}, {scope} state", fontsize=10)
            ax.set_xlabel("share of queries rewarded")
            ax.set_ylabel(f"Δ {HEADLINE}, unseen queries")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--experiments", nargs="+", choices=EXPERIMENTS, default=list(EXPERIMENTS))
    ap.add_argument("--teachers", nargs="+", choices=TEACHERS, default=list(TEACHERS))
    ap.add_argument("--tasks", nargs="+", choices=[s.name for s in SPECS], default=[s.name for s in SPECS])
    ap.add_argument("--output", default="runs/bench-transfer.json")
    ap.add_argument("--report", action="store_true", help="only rewrite the tables and plot from --output")
    args = ap.parse_args(argv)
    output = Path(args.output)
    if args.report:
        rows = json.loads(output.read_text())
        output.with_suffix(".md").write_text(table(rows) + "\n")
        plot_curve(rows, output.with_name("bench-transfer-curve.png"))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    tasks = [Task(spec) for spec in SPECS if spec.name in args.tasks]
    rows = json.loads(output.read_text()) if output.exists() else []
    for experiment in args.experiments:
        teachers = [t for t in args.teachers if experiment in ("main", "kinds") or t != "ce"]
        for teacher in teachers:
            scores = [teacher_scores(t, teacher) for t in tasks]
            for variant, share in variants(experiment):
                begin = time.perf_counter()
                new = summarise(experiment, teacher, variant, share, run_variant(tasks, scores, variant, share))
                mine = {(r["experiment"], r["teacher"], r["variant"], r["share"], r["task"]) for r in new}
                rows = [
                    r for r in rows if (r["experiment"], r["teacher"], r["variant"], r["share"], r["task"]) not in mine
                ]
                rows += new
                output.write_text(json.dumps(rows, indent=1) + "\n")
                print(
                    f"{experiment} {teacher} {variant.name} s={share:g}: "
                    + ", ".join(f"{r['task']} {r['delta']:+.4f} (p {r['p']:.2g})" for r in new)
                    + f" ({time.perf_counter() - begin:.0f} s)",
                    flush=True,
                )
    output.with_suffix(".md").write_text(table(rows) + "\n")
    plot_curve(rows, output.with_name("bench-transfer-curve.png"))
    print(f"wrote {output} ({len(rows)} rows) in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
