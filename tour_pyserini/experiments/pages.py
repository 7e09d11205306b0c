"""Tables the docs show that the code and the reports already hold: a method's settings, from the parameters its
rewriters declare, and measured rows, from an experiment's report. ``docs/methods/*.md`` and docs/benchmarks.md show
these tables, and a test renders them again and fails where a page shows others."""

from __future__ import annotations

import json
from pathlib import Path

from tour_pyserini.experiments.report import VS_BASELINE, VS_WITHIN, holm_p, sections
from tour_pyserini.files.experiments import NO_TEACHER, Experiment
from tour_pyserini.rewriters import get_rewriter_class


def settings_table(rewriters: list[str]) -> str:
    """Each option of ``rewriters`` once, in declaration order: its flag, its default (each rewriter's, where they
    differ) and its help."""
    rows: dict[str, tuple[dict[str, str], str]] = {}
    for name in rewriters:
        for option in get_rewriter_class(name).options:
            shown = "required" if option.required else str(option.default_shown or "not set")
            rows.setdefault(option.option, ({}, option.help))[0][name] = shown
    lines = ["| flag | default | what it sets |", "|---|---|---|"]
    for flag, (defaults, text) in rows.items():
        values = set(defaults.values())
        default = next(iter(values)) if len(values) == 1 and len(defaults) == len(rewriters) else None
        if default is None:
            default = "; ".join(f"{name}: {value}" for name, value in defaults.items())
        lines.append(f"| `{flag}` | {default} | {text.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def measured_table(experiment: Experiment, report: Path, methods: list[str]) -> str:
    """The rows of ``methods`` in a report of ``experiment`` (``OUTPUT.json``), with its baseline's row of each
    collection, marked by the report's own Holm-corrected tests."""
    rows = json.loads(report.read_text())
    mine = [r for r in rows if r["method"] in methods or r["method"] == experiment.baseline]
    return sections(mine, experiment.baseline, experiment.compare_within_budget)


def p_value(p: float | None) -> str:
    """A Holm-corrected p value as the tables print it: ``1``, two decimals, two digits below 0.1, ``7e-3`` below 0.01;
    ``–`` where there is no test."""
    if p is None:
        return "–"
    if p >= 0.995:
        return "1"
    if p >= 0.1:
        return f"{p:.2f}"
    if p >= 0.01:
        return f"{p:.2g}"
    mantissa, exponent = f"{p:.0e}".split("e")
    return f"{mantissa}e{int(exponent)}"


def holm_table(report: Path, collection: str, teacher: str | None = None) -> str:
    """One collection's rows of a report (``OUTPUT.json``), each value followed by its Holm-corrected p values
    against the baseline and against the within-budget method, bold where either is below 0.05; with ``teacher``,
    only that teacher's rows, without a teacher column."""
    rows = [
        r
        for r in json.loads(report.read_text())
        if r["collection"] == collection and (teacher is None or r["teacher"] == teacher)
    ]
    metrics = list(rows[0]["metrics"])
    head = ["method", *([] if teacher else ["teacher"]), "budget", *metrics, "ms/query", "teacher calls/query"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for r in rows:
        cells = []
        for m in metrics:
            value = f"{r['metrics'][m]:.4f}"
            tests = [holm_p(r, key, m) for key in (VS_BASELINE, VS_WITHIN)]
            if all(t is None for t in tests):  # the baseline itself
                cells.append(value)
                continue
            bold = any(t is not None and t < 0.05 for t in tests)
            cells.append((f"**{value}**" if bold else value) + f" ({p_value(tests[0])} / {p_value(tests[1])})")
        first = [r["method"], *([] if teacher else [r["teacher"]]), str(r["budget"] or "–")]
        timing = [f"{r['ms_per_query']:.1f}", f"{r['teacher_calls_per_query']:.1f}"]
        lines.append("| " + " | ".join(first + cells + timing) + " |")
    return "\n".join(lines) + "\n"


def timing_table(report: dict) -> str:
    """A timing report's ways: traced milliseconds a query by phase, encoding against its floor, the whole command's
    seconds, the metrics of its run, and how many rounds ran beside busy cores."""
    metrics = sorted({m for w in report["ways"] for m in w["metrics"]})
    head = ["kernels", "way", "ms a query", "encode", "search", "teacher", "update", "encode × floor", "command s"]
    lines = [
        "| " + " | ".join(head + metrics + ["shared rounds"]) + " |",
        "|" + "---|" * (len(head) + len(metrics) + 1),
    ]
    for w in report["ways"]:
        traced = ["–"] * 6
        if "ms_per_query" in w:
            phases = (f"{w['phases'][p]:.2f}" for p in ("encode", "search", "teacher", "update"))
            traced = [f"{w['ms_per_query']:.2f}", *phases, f"{w['encode_times_floor']:.1f}"]
        cells = [w["kernels"], f"`{w['way']}`", *traced, f"{w['seconds']:.1f}"]
        cells += [f"{w['metrics'][m]:.4f}" if m in w["metrics"] else "–" for m in metrics]
        lines.append("| " + " | ".join(cells + [str(w["shared"])]) + " |")
    return "\n".join(lines) + "\n"


def comparison_table(report: dict) -> str:
    """A timing report's comparisons: each ratio of times with its bound, the runs' sameness, the metric's move."""
    lines = [
        "| comparison | kernels | time | ratio | bound | same run | metric moved | ok |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in report["compare"]:
        bound = f"≤ {c['at_most']:g}" if "at_most" in c else "–"
        moved = f"{c['metric']} {c['difference']:+.4f} (within {c['within']:g})" if "metric" in c else "–"
        cells = [f"`{c['way']}` / `{c['against']}`", c["kernels"], c["time"], f"{c['ratio']:.2f}", bound]
        lines.append("| " + " | ".join([*cells, c.get("same_run", "–"), moved, "yes" if c["ok"] else "**no**"]) + " |")
    return "\n".join(lines) + "\n"


def timing_section(report: dict) -> str:
    """One CPU's timing report as a page shows it: the machine, its peaks and the encoder's floor, then the ways'
    table and the comparisons'."""
    peak, floor = report["peak_gflops"], report["floor"]
    peaks = ", ".join(f"{kernels}: {' / '.join(f'{a} {g:.0f}' for a, g in at.items())}" for kernels, at in peak.items())
    floors = ", ".join(
        f"{kernels}: {' / '.join(f'{a} {ms:.2f}' for a, ms in at.items())}"
        for kernels, at in floor["ms_per_query"].items()
    )
    head = (
        f"**{report['cpu']}**, {report['threads']} threads; {report['queries']} queries of {report['collection']}, "
        f"the median of {report['rounds']} rounds (`{report['source']}`). Matrix-product peak, GFLOPS: {peaks}. "
        f"The query encoder: {floor['gflop_per_query']:.3f} GFLOP a query ({floor['tokens_per_query']:.1f} real "
        f"tokens), a floor of {floors} ms a query.\n"
    )
    return f"{head}\n{timing_table(report)}\n{comparison_table(report)}"


def transfer_table(report: list[dict], table: str) -> str:
    """One table of a transfer report (``OUTPUT.json``): per row and collection, the unseen queries' mean Δ of its
    metric against dense retrieval, its Holm-corrected p (bold below 0.05), wins/ties/losses and the mean α applied
    (with scope auto, also how many of the fits chose each scope)."""
    rows = [r for r in report if r["table"] == table]
    names = list(dict.fromkeys(c for r in rows for c in r["collections"]))
    metrics = {c: next(r["collections"][c]["metric"] for r in rows if c in r["collections"]) for c in names}
    head = "| teacher | scope | α rule | share | " + " | ".join(
        f"{c}: Δ {metrics[c]} (Holm p; W/T/L; α)" for c in names
    )
    lines = [head + " |", "|" + "---|" * (4 + len(names))]
    for r in rows:
        cells = []
        for c in names:
            v = r["collections"].get(c)
            if v is None:
                cells.append("")
                continue
            delta = f"{v['delta']:+.4f}"
            delta = f"**{delta}**" if v["p_holm"] < 0.05 else delta
            chosen = "".join(f"; {s} {n}" for s, n in v.get("scopes", {}).items()) if r["scope"] == "auto" else ""
            cells.append(
                f"{delta} ({p_value(v['p_holm'])}; {v['wins']}/{v['ties']}/{v['losses']}; {v['alpha']:.2f}{chosen})"
            )
        share = "others" if r["held_out"] else f"{r['share']:g}"
        lines.append(f"| {r['teacher']} | {r['scope']} | {r['rule']} | {share} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def choice_table(reports: list[dict], table: Experiment) -> str:
    """Each check of a choice (``tour-pyserini choose --collection NAME --judge-on test --report``): the method
    chosen on the collection's training queries with its cross-validated score there, its score on the test queries
    beside dense retrieval's, the best test score of any method in ``table`` (the methods table) at the same teacher
    and budget, the regret (that best minus the chosen one's), and the seconds ``choose`` took."""
    lines = [
        "| collection | teacher | chosen on train (setting) | train, cross-validated | test | dense, test (paired p) | "
        "best in the methods table, test | regret | choose took |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in reports:
        judged, metric = r["judged"], r["metric"]
        chosen = next((row for row in r["rows"] if row["method"] == judged["method"]), None)
        name = judged["method"] + (f" ({judged['setting']})" if judged["setting"] else "")
        trained = f"{chosen['metrics'][metric]:.4f}" if chosen else ""
        best = max(
            (
                (values[metric], method)
                for (collection, method, teacher, budget), values in table.expect.items()
                if collection == r["collection"]
                and (teacher, budget) in {(r["teacher"], r["budget"]), (NO_TEACHER, None)}
            ),
            default=None,
        )
        regret = f"{best[0] - judged[metric]:+.4f}" if best else ""
        shown_best = f"{best[0]:.4f} ({best[1]})" if best else ""
        lines.append(
            f"| {r['collection']} | {r['teacher'].split(':')[0]} | {name} | {metric} {trained} | "
            f"{judged[metric]:.4f} | "
            f"{judged['dense']:.4f} ({p_value(judged['p_vs_dense'])}) | {shown_best} | {regret} | "
            f"{r['seconds'] / 60:.1f} min |"
        )
    return "\n".join(lines) + "\n"


def forgetting_table(report: list[dict], table: str) -> str:
    """A table of a transfer report whose collections each have a base (an encoder against the base encoder): the
    encoder's dense run against the base's, then per row the moved unseen queries against the encoder's own dense
    run and against the base's; each with its Holm-corrected p (bold below 0.05)."""
    rows = [r for r in report if r["table"] == table]
    names = list(dict.fromkeys(c for r in rows for c in r["collections"]))
    first = {c: next(r["collections"][c] for r in rows if c in r["collections"]) for c in names}

    def shown(delta: float, p: float) -> str:
        text = f"{delta:+.4f}"
        return f"**{text}** ({p_value(p)})" if p < 0.05 else f"{text} ({p_value(p)})"

    head = "| teacher | scope | α rule | " + " | ".join(
        f"{c}: Δ {first[c]['metric']} against its own dense run; against the base's" for c in names
    )
    lines = [head + " |", "|" + "---|" * (3 + len(names))]
    cells = []
    for c in names:
        versus = first[c]["versus_base"]
        cells.append(
            f"{versus['base']} {versus['base_dense']:.4f} → {first[c]['dense']:.4f}: "
            + shown(versus["dense_delta"], versus["dense_p_holm"])
        )
    lines.append("| dense, base encoder → this one | | | " + " | ".join(cells) + " |")
    for r in rows:
        cells = []
        for c in names:
            v = r["collections"].get(c)
            cells.append(
                ""
                if v is None
                else f"{shown(v['delta'], v['p_holm'])}; {shown(v['versus_base']['delta'], v['versus_base']['p_holm'])}"
            )
        lines.append(f"| {r['teacher']} | {r['scope']} | {r['rule']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
