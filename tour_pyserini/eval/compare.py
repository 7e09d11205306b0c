"""Runs against a baseline: per (run, metric), the aggregate (a mean; a sum for ir-measures' counts), its
difference to the baseline, paired t-test and randomisation-test p-values, and per-query wins/ties/losses; rendered
as a table, or plotted per query."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

from tour_pyserini.eval.judge import aggregate
from tour_pyserini.eval.significance import paired_t_test, randomization_test, win_tie_loss


@dataclass
class Comparison:
    run: str
    metric: str
    mean: float
    delta: float
    p_ttest: float
    p_randomization: float
    wins: int
    ties: int
    losses: int


def compare(
    per_query: dict[str, dict[str, dict[str, float]]],
    baseline: str,
    qids: list[str],
    trials: int = 10_000,
    seed: int = 0,
) -> list[Comparison]:
    """``per_query[run][metric][qid]`` → one comparison per (run, metric), the baseline's own rows included.

    ``mean`` is the run's aggregate of the metric as ir-measures aggregates it (:func:`aggregate`: a sum for the
    counts) and ``delta`` its difference to the baseline's; the tests pair the queries of ``qids`` that both runs
    have a value for (all of them, except for Accuracy, which has none for a query without a relevant document
    retrieved)."""
    rows = []
    for metric, base_values in per_query[baseline].items():
        base_aggregate = aggregate(metric, (base_values[q] for q in qids if q in base_values))
        for run, metrics in per_query.items():
            own = metrics[metric]
            paired = [q for q in qids if q in own and q in base_values]
            values, base = [own[q] for q in paired], [base_values[q] for q in paired]
            value = aggregate(metric, (own[q] for q in qids if q in own))
            rows.append(
                Comparison(
                    run,
                    metric,
                    value,
                    value - base_aggregate,
                    paired_t_test(values, base),
                    randomization_test(values, base, trials, seed),
                    *win_tie_loss(values, base),
                )
            )
    return rows


def render(rows: list[Comparison], fmt: str, baseline: str) -> str:
    header = ["run", "metric", "mean", "Δ vs baseline", "p (t-test)", "p (randomisation)", "win/tie/loss"]
    body = [
        [
            Path(r.run).name + (" (baseline)" if r.run == baseline else ""),
            r.metric,
            f"{r.mean:.4f}",
            f"{r.delta:+.4f}",
            f"{r.p_ttest:.4g}",
            f"{r.p_randomization:.4g}",
            f"{r.wins}/{r.ties}/{r.losses}",
        ]
        for r in rows
    ]
    if fmt == "csv":
        out = io.StringIO()
        csv.writer(out).writerows([header, *body])
        return out.getvalue().rstrip("\n")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])


def plot(per_query, baseline: str, qids: list[str], metric: str, path: str) -> None:
    """Per-query differences to the baseline, sorted, one panel per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [r for r in per_query if r != baseline]
    fig, axes = plt.subplots(len(runs), 1, figsize=(8, 2.6 * len(runs)), squeeze=False)
    for ax, run in zip(axes[:, 0], runs):
        own, base = per_query[run][metric], per_query[baseline][metric]
        diffs = sorted(own[q] - base[q] for q in qids if q in own and q in base)
        ax.bar(range(len(diffs)), diffs, width=1.0, color=["tab:green" if d > 0 else "tab:red" for d in diffs])
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_ylabel(f"Δ {metric}")
        ax.set_title(f"{Path(run).name} − {Path(baseline).name}", fontsize=9)
    axes[-1, 0].set_xlabel("queries, sorted by difference")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
