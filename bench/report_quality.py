"""The report of bench/quality.py: runs/bench-quality.json, the markdown table with the goals checked, two plots."""

from __future__ import annotations

import json
from pathlib import Path

PAPER = {"tour-hard", "tour-soft"}  # the paper's systems; suffixed names are this project's variants


def _find(rows, collection, system, teacher, k=None, iterations=0):
    for r in rows:
        if (r["collection"], r["system"], r["teacher"], r["k"], r["iterations"]) == (
            collection,
            system,
            teacher,
            k,
            iterations,
        ):
            return r
    return None


def correct_chosen(rows: list[dict], col, selected: dict[str, str]) -> dict[str, dict]:
    """The test rows of the configurations chosen on held-out training queries, one per method, by method.

    Each gets ``p_holm``: its p-values against the base run and against re-ranking at its own teacher
    budget, Holm-corrected over all of these tests of the collection and teacher (one family).
    """
    from tour_pyserini.eval.significance import holm

    by_run = {r["run"]: r for r in rows}
    chosen = {method: by_run[run] for method, run in selected.items()}
    tests = [
        (row, against, m)
        for row in {id(r): r for r in chosen.values()}.values()
        for against, key in (("base", "p_vs_base"), ("rerank at budget", "p_vs_matched_rerank"))
        for m in dict.fromkeys((col.tune_on, col.headline, col.recall))
        if m in row[key]
    ]
    raw = [row["p_vs_base" if against == "base" else "p_vs_matched_rerank"][m] for row, against, m in tests]
    for (row, against, m), p in zip(tests, holm(raw)):
        row.setdefault("p_holm", {}).setdefault(against, {})[m] = p
    return chosen


def chosen_table(rows: list[dict], col, chosen: dict[str, dict]) -> list[str]:
    """The chosen configurations' test rows as a markdown table, with their Holm-corrected p-values."""
    h = col.tune_on  # what the configurations were chosen on
    metrics = list(dict.fromkeys((h, col.headline, col.recall)))
    base = _find(rows, f"{col.name}-test", "dense", "-")
    head = f"| method | chosen | {' | '.join(metrics)} | calls/q | s/query | vs base ({h}, Holm p) "
    lines = [head + f"| vs rerank at budget ({h}, Holm p) |", "|" + "---|" * (len(metrics) + 6)]
    for method, r in chosen.items():
        if "@" in method:  # a choice among a subset of the grid, reported in the goals
            continue
        config = f"k {r['k']}" + (f", T {r['iterations']}" if r["iterations"] else "")
        vs_base = f"{(r['metrics'][h] - base['metrics'][h]) * 100:+.1f} ({r['p_holm']['base'][h]:.2g})"
        vs_rerank = ""
        if r.get("matched_rerank"):
            other = _matched(rows, r)
            delta = (r["metrics"][h] - other["metrics"][h]) * 100
            vs_rerank = f"{delta:+.1f} vs @{other['k']} ({r['p_holm']['rerank at budget'][h]:.2g})"
        cost = f"{r['teacher_calls_per_query']:.1f} | {r['seconds_per_query']:.3f}"
        values = " | ".join(f"{r['metrics'][m]:.4f}" for m in metrics)
        lines.append(f"| {method} | {config} | {values} | {cost} | {vs_base} | {vs_rerank} |")
    return lines


def goals(rows: list[dict], col, teacher: str, chosen: dict[str, dict]) -> list[str]:
    """The benchmark's claims on one collection and teacher, each from the configurations chosen on held-out
    training queries (never from the best of the test grid); one markdown bullet each."""
    name = f"{col.name}-test"
    h, rec = col.headline, col.recall
    base = _find(rows, name, "dense", "-")
    out = []
    for method in sorted(PAPER):
        r = chosen[method]
        gain, p = r["metrics"][h] - base["metrics"][h], r["p_holm"]["base"][h]
        out.append(
            f"{method} as chosen (k {r['k']}, T {r['iterations']}) vs base: {h} {r['metrics'][h]:.4f} vs "
            f"{base['metrics'][h]:.4f} ({gain * 100:+.1f} points, Holm p = {p:.3g}); {rec} "
            f"{r['metrics'][rec]:.4f} vs {base['metrics'][rec]:.4f} (Holm p = {r['p_holm']['base'][rec]:.3g}); "
            f"goal +3.0 significant: **{'met' if gain >= 0.03 and p < 0.05 else 'not met'}**"
        )
    if h.startswith("Acc@"):
        out.append(
            f"headroom: the base run already has {h} {base['metrics'][h]:.4f}, so no system can gain more "
            f"than {(1 - base['metrics'][h]) * 100:.1f} points"
        )
    r40 = _find(rows, name, "rerank", teacher, 40)
    for method in sorted(PAPER):
        r = chosen[f"{method}@k<=20"]
        ratio = r["seconds_per_query"] / r40["seconds_per_query"]
        met = r["metrics"][h] >= r40["metrics"][h] and ratio <= 0.5
        out.append(
            f"{method} at k <= 20 as chosen (k {r['k']}, T {r['iterations']}) vs rerank@40: {h} "
            f"{r['metrics'][h]:.4f} vs {r40['metrics'][h]:.4f} at {ratio:.2f}x its modelled seconds per query; "
            f"goal (>= quality, <= 0.5x): **{'met' if met else 'not met'}**"
        )
    rerank100 = _find(rows, name, "rerank", teacher, 100)
    out.append(
        f"teacher quality, rerank@100: {h} {rerank100['metrics'][h]:.4f} vs base {base['metrics'][h]:.4f} "
        f"(p = {rerank100['p_vs_base'][h]:.3g})"
    )
    tour = [r for r in rows if r["collection"] == name and r["teacher"] == teacher and r["system"] in PAPER]
    out.append(
        "whole grid (secondary, uncorrected): TOUR vs rerank at the same teacher budget: " + _versus(rows, tour, h)
    )
    return out


def _versus(rows, tour: list[dict], h: str) -> str:
    wins = [r for r in tour if r["metrics"][h] > _matched(rows, r)["metrics"][h]]
    sig = [r for r in wins if r["p_vs_matched_rerank"][h] < 0.05]
    worse = [r for r in tour if r["metrics"][h] < _matched(rows, r)["metrics"][h]]
    sig_worse = [r for r in worse if r["p_vs_matched_rerank"][h] < 0.05]
    return (
        f"higher {h} in {len(wins)} of {len(tour)} settings ({len(sig)} significant), lower in {len(worse)} "
        f"({len(sig_worse)} significant)"
    )


def _matched(rows, row):
    return next(r for r in rows if r["run"] == row["matched_rerank"])


def _table(rows: list[dict], col) -> list[str]:
    h = col.headline
    head = "| system | teacher | k | T | " + " | ".join(col.metrics) + " | s/query | calls/query | p vs base "
    head += f"({h}) | vs rerank at budget ({h}) | selected |"
    lines = [head, "|" + "---|" * (len(col.metrics) + 9)]
    for r in rows:
        if r["collection"] != f"{col.name}-test":
            continue
        matched = ""
        if r.get("matched_rerank"):
            other = _matched(rows, r)
            delta = (r["metrics"][h] - other["metrics"][h]) * 100
            matched = f"{delta:+.1f} vs @{other['k']} (p {r['p_vs_matched_rerank'][h]:.2g})"
        p = r["p_vs_base"][h]
        lines.append(
            f"| {r['system']} | {r['teacher']} | {r['k'] or ''} | {r['iterations'] or ''} | "
            + " | ".join(f"{r['metrics'][m]:.4f}" for m in col.metrics)
            + f" | {r['seconds_per_query']:.3f} | {r['teacher_calls_per_query']:.1f} | "
            + (f"{p:.2g}" if r["system"] != "dense" else "")
            + f" | {matched} | {'yes' if r['selected'] else ''} |"
        )
    return lines


def write_report(rows: list[dict], tuning: dict, collections: dict, output: str) -> None:
    chosen = {
        (name, teacher): correct_chosen(
            [r for r in rows if r["collection"] == f"{name}-test"], collections[name], t["selected"]
        )
        for name, tuned in tuning.items()
        for teacher, t in tuned.items()
    }
    slim = [{k: v for k, v in r.items() if k != "per_query"} for r in rows]
    Path(f"{output}.json").write_text(json.dumps(slim, indent=1) + "\n")
    lines = [
        "# TOUR against its baselines: SciFact test and nq-oracle test",
        "",
        "Produced by `make bench-quality` (`bench/quality.py`). Retriever: the bundled all-MiniLM-L6-v2, flat",
        "inner-product index. Teachers: `cross-encoder` = the collection's trained teacher in `models/`",
        "(`make teachers`), `ensemble` = its weighted sum with BM25 and the retriever's similarity (the weights",
        "in the model's `ensemble.json`, fitted on the teacher's dev queries), `bm25` = Anserini BM25 scores of",
        "the candidates. TOUR rows use the passage preset",
        "(lr 0.2, lambda 1) with k and T varied. `+union` ranks every candidate scored on the way; `+lam`",
        "interpolates teacher and retriever (sim x 20) with lambda tuned on the teacher's held-out training",
        "queries. Seconds per query = measured encode + search + update time of the row + its teacher calls x",
        "the measured seconds per teacher call (pairs are scored once and stored; see bench/quality.py): a",
        "model of the latency, not an end-to-end measurement (`make bench-teachers` measures one end to end).",
        "p-values: paired t-tests over queries. Claims are made only for the one configuration per method chosen",
        "on held-out *training* queries (marked `selected`), with p-values Holm-corrected over every test of",
        "that collection and teacher; the rest of the grid is context. Each row of `bench-quality.json` holds",
        "the `command` that rebuilds its run from a fresh clone.",
        "",
    ]
    for name, tuned in tuning.items():
        col = collections[name]
        lines += [f"## {name}", ""]
        for teacher, t in tuned.items():
            lines.append(
                f"- teacher `{teacher}`: {t['seconds_per_pair'] * 1000:.3g} ms per scored pair; lambda "
                f"{t['lambda']} tuned on {t['val_queries']} held-out training queries"
            )
        for teacher, t in tuned.items():
            lines += [
                "",
                f"With the `{teacher}` teacher, one configuration per method chosen on the "
                f"{t['val_queries']} held-out training queries, on test:",
                "",
                *chosen_table(rows, col, chosen[name, teacher]),
                "",
            ]
            lines += [f"- {g}" for g in goals(rows, col, teacher, chosen[name, teacher])]
        lines += ["", *_table(rows, col), ""]
    Path(f"{output}.md").write_text("\n".join(lines) + "\n")
    plot_latency(rows, collections, tuning, f"{output}-latency.png")
    plot_iterations(rows, collections, tuning, f"{output}-iterations.png")
    print(f"written to {output}.md, {output}.json and {output}-{{latency,iterations}}.png")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _label(ax, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def plot_latency(rows, collections, tuning, path: str) -> None:
    """The paper's Figure 2: quality against seconds per query for rerank and TOUR (T = 1) as k varies.

    Quality is the metric lambda is tuned on (Acc@1 for nq-oracle, where Acc@20 is at its ceiling).
    """
    from matplotlib.ticker import NullFormatter

    plt = _plt()
    names = list(tuning)
    teachers = sorted({t for tuned in tuning.values() for t in tuned})
    fig, axes = plt.subplots(len(names), len(teachers), figsize=(5.5 * len(teachers), 4 * len(names)), squeeze=False)
    for i, name in enumerate(names):
        col = collections[name]
        for j, teacher in enumerate(teachers):
            ax = axes[i][j]
            mine = [r for r in rows if r["collection"] == f"{name}-test" and r["teacher"] == teacher]
            if not mine:  # a teacher this collection does not have
                ax.set_visible(False)
                continue
            families = (
                ("rerank", 0, "o"),
                ("tour-hard", 1, "s"),
                ("tour-soft", 1, "^"),
                ("rerank+lam", 0, "x"),
                ("tour-soft+union+lam", 1, "v"),
            )
            for family, T, marker in families:
                pts = sorted(
                    (r["seconds_per_query"], r["metrics"][col.tune_on], r["k"])
                    for r in mine
                    if r["system"] == family and r["iterations"] == T and r["k"] in (10, 20, 40, 100)
                )
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=marker, label=family)
                for x, y, k in pts:
                    ax.annotate(f"{k}", (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7)
            base = _find(rows, f"{name}-test", "dense", "-")
            ax.axhline(base["metrics"][col.tune_on], color="grey", linestyle="--", label="dense")
            ax.set_xscale("log")
            ax.xaxis.set_minor_formatter(NullFormatter())
            _label(ax, "seconds per query (2 CPU cores)", col.tune_on, f"{name} test, {teacher} teacher (labels: k)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def plot_iterations(rows, collections, tuning, path: str) -> None:
    """The paper's Figure 3: quality against iterations for TOUR (k = 20) and Rocchio.

    At T = 0 Rocchio is the base dense run and TOUR is rerank@20 (rerank+lam@20 for the +lam variant):
    the teacher ranks the first top-20.
    """
    plt = _plt()
    names = list(tuning)
    fig, axes = plt.subplots(1, len(names), figsize=(5.5 * len(names), 4), squeeze=False)
    for ax, name in zip(axes[0], names):
        col, test = collections[name], f"{name}-test"
        start = _find(rows, test, "dense", "-")["metrics"][col.tune_on]
        ys = [start] + [_find(rows, test, "rocchio", "-", None, T)["metrics"][col.tune_on] for T in (1, 2, 3)]
        ax.plot([0, 1, 2, 3], ys, "k--", label="rocchio")
        for teacher, style in zip(sorted(tuning[name]), ("-", ":", "--")):
            for system, marker in (("tour-hard", "s"), ("tour-soft", "^"), ("tour-soft+union+lam", "v")):
                rerank = "rerank+lam" if system.endswith("+lam") else "rerank"  # the same final aggregation
                found = [_find(rows, test, system, teacher, 20, T) for T in (1, 2, 3)]
                ys = [_find(rows, test, rerank, teacher, 20)] + found
                ys = [r["metrics"][col.tune_on] for r in ys]
                ax.plot([0, 1, 2, 3], ys, marker + style, label=f"{system}@20 ({teacher})")
        ax.set_xticks([0, 1, 2, 3])
        _label(ax, "iterations T (0: dense for Rocchio, rerank@20 for TOUR)", col.tune_on, f"{name} test")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
