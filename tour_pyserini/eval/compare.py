"""Runs against a baseline: per (run, metric), the mean, its difference to the baseline, paired t-test and
randomisation-test p-values, and per-query wins/ties/losses; rendered as a table, or plotted per query."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

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


def compare(per_query: dict[str, dict[str, dict[str, float]]], baseline: str, qids: list[str],
            trials: int = 10_000, seed: int = 0) -> list[Comparison]:  # fmt: skip
    """``per_query[run][metric][qid]`` → one comparison per (run, metric), the baseline's own rows included."""
    rows = []
    for metric, base_values in per_query[baseline].items():
        base = [base_values[q] for q in qids]
        for run, metrics in per_query.items():
            values = [metrics[metric][q] for q in qids]
            mean = sum(values) / len(values)
            rows.append(
                Comparison(
                    run,
                    metric,
                    mean,
                    mean - sum(base) / len(base),
                    paired_t_test(values, base),
                    randomization_test(values, base, trials, seed),
                    *win_tie_loss(values, base),
                )  # fmt: skip
            )
    return rows


def render(rows: list[Comparison], fmt: str, baseline: str) -> str:
    header = ["run", "metric", "mean", "Δ vs baseline", "p (t-test)", "p (randomisation)", "win/tie/loss"]
    body = [
        [Path(r.run).name + (" (baseline)" if r.run == baseline else ""), r.metric, f"{r.mean:.4f}",
         f"{r.delta:+.4f}", f"{r.p_ttest:.4g}", f"{r.p_randomization:.4g}", f"{r.wins}/{r.ties}/{r.losses}"]
        for r in rows
    ]  # fmt: skip
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
        diffs = sorted(per_query[run][metric][q] - per_query[baseline][metric][q] for q in qids)
        ax.bar(range(len(diffs)), diffs, width=1.0, color=["tab:green" if d > 0 else "tab:red" for d in diffs])
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_ylabel(f"Δ {metric}")
        ax.set_title(f"{Path(run).name} − {Path(baseline).name}", fontsize=9)
    axes[-1, 0].set_xlabel("queries, sorted by difference")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
