"""An experiment's report: paired tests Holm-corrected over the whole table, the table (Markdown), the rows
(JSON, and with their per-query values gzipped), and one quality-against-cost plot per collection."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from tour_pyserini.errors import UserError

# a row differs from the baseline's, or from the within-budget method's at its teacher and budget
VS_BASELINE, VS_WITHIN = "vs_baseline", "vs_within_budget"
SUPERSCRIPT = dict(zip("abcdefghijklmnoprstuvwxyz", "ᵃᵇᶜᵈᵉᶠᵍʰⁱʲᵏˡᵐⁿᵒᵖʳˢᵗᵘᵛʷˣʸᶻ"))


def mark(method: str) -> str:
    return SUPERSCRIPT.get(method[:1].lower(), "*")


def holm_p(row: dict, key: str, metric: str) -> float | None:
    """``row``'s Holm-corrected p of ``metric`` against ``key``'s row (:func:`add_significance`); None where there is
    no such test."""
    return row.get("p", {}).get(key, {}).get(metric, {}).get("holm")


def significant(row: dict, key: str, metric: str, level: float = 0.05) -> bool:
    """Whether ``row`` differs from ``key``'s row in ``metric``: a Holm-corrected p below ``level``."""
    p = holm_p(row, key, metric)
    return p is not None and p < level


def add_significance(rows: list[dict], baseline: str, within: str | None) -> None:
    """Paired t-tests against ``baseline``'s row and against ``within``'s at the same teacher and budget,
    Holm-corrected over every test of the table."""
    from tour_pyserini.eval.significance import holm, paired_t_test

    tests = []  # (row, key, metric, p)
    for row in rows:
        base = next((r for r in rows if (r["collection"], r["method"]) == (row["collection"], baseline)), None)
        same = (row["collection"], row["teacher"], row["budget"], within)
        peer = next((r for r in rows if (r["collection"], r["teacher"], r["budget"], r["method"]) == same), None)
        for key, other in ((VS_BASELINE, base), (VS_WITHIN, peer)):
            if other is None or other is row:
                continue
            for metric, values in row["per_query"].items():
                qids = sorted(values)
                p = paired_t_test([values[q] for q in qids], [other["per_query"][metric][q] for q in qids])
                tests.append((row, key, metric, p))
    for (row, key, metric, p), adjusted in zip(tests, holm([t[3] for t in tests])):
        row.setdefault("p", {}).setdefault(key, {})[metric] = {"p": p, "holm": adjusted}


def table(rows: list[dict], title: str, source: str, baseline: str, within: str | None) -> str:
    head = f"# {title}\n\nRebuilt by `{source}`; paired t-tests, Holm-corrected over the table.\n\n"
    return head + sections(rows, baseline, within)


def sections(rows: list[dict], baseline: str, within: str | None) -> str:
    """Each collection's rows under its heading, each value marked where its Holm-corrected test is below 0.05."""
    lines = []
    marks = ((VS_BASELINE, mark(baseline)), (VS_WITHIN, mark(within or "")))
    for name in dict.fromkeys(r["collection"] for r in rows):
        mine = [r for r in rows if r["collection"] == name]
        metrics = list(mine[0]["metrics"])
        lines += [
            f"## {name}",
            "",
            "| method | teacher | budget | " + " | ".join(metrics) + " | ms/query | teacher calls/query |",
            "|---" * (len(metrics) + 5) + "|",
        ]
        for r in mine:
            cells = []
            for m in metrics:
                shown = "".join(s for key, s in marks if significant(r, key, m))
                cells.append(f"{r['metrics'][m]:.4f}{shown}")
            lines.append(
                f"| {r['method']} | {r['teacher']} | {r['budget'] or '-'} | "
                + " | ".join(cells)
                + f" | {r['ms_per_query']:.1f} | {r['teacher_calls_per_query']:.1f} |"
            )
        lines.append("")
    said = f"{mark(baseline)}: different from {baseline}"
    if within:
        said += f", {mark(within)}: from {within} at the same teacher and budget"
    lines.append(f"{said} (Holm-corrected p < 0.05).")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], out: str) -> None:
    """One quality-against-cost plot per collection: the first metric against milliseconds per query, a colour per
    method and a marker per teacher kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for name in dict.fromkeys(r["collection"] for r in rows):
        mine = [r for r in rows if r["collection"] == name]
        metric = next(iter(mine[0]["metrics"]))
        methods = list(dict.fromkeys(r["method"] for r in mine))
        teachers = list(dict.fromkeys(r["teacher"].split(":")[0] for r in mine))
        markers = dict(zip(teachers, "oDs^v<>p"))
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r in mine:
            colour = colours[methods.index(r["method"]) % len(colours)]
            ax.scatter(
                r["ms_per_query"], r["metrics"][metric], color=colour, marker=markers[r["teacher"].split(":")[0]]
            )
        handles = [
            Line2D([], [], color=colours[i % len(colours)], marker="o", ls="", label=m) for i, m in enumerate(methods)
        ]
        handles += [
            Line2D([], [], color="black", marker=markers[t], ls="", label="no teacher" if t == "-" else t)
            for t in teachers
        ]
        ax.set_xscale("log")
        ax.set(xlabel="ms per query (log)", ylabel=metric, title=f"{name}: quality against cost")
        ax.legend(handles=handles, fontsize=7, ncol=2)
        fig.tight_layout()
        fig.savefig(f"{out}-{name}.png", dpi=120)
        plt.close(fig)


def write_report(rows: list[dict], output: str, title: str, source: str, baseline: str, within: str | None) -> None:
    """The table (``OUTPUT.md``), the plots, the rows without their per-query values (``OUTPUT.json``) and with them
    (``OUTPUT.per-query.json.gz``, what a merge reads; no time stamp in it, so the same rows give the same bytes)."""
    rows = [{k: v for k, v in r.items() if k not in ("p", "fingerprint")} for r in rows]
    add_significance(rows, baseline, within)
    Path(output).parent.mkdir(parents=True, exist_ok=True)
    Path(f"{output}.per-query.json.gz").write_bytes(gzip.compress(json.dumps(rows).encode(), mtime=0))
    Path(f"{output}.json").write_text(
        json.dumps([{k: v for k, v in r.items() if k != "per_query"} for r in rows], indent=1) + "\n"
    )
    Path(f"{output}.md").write_text(table(rows, title, source, baseline, within))
    plot(rows, output)


ROW_FIELDS = ("collection", "method", "teacher", "budget", "metrics", "per_query")


def read_rows(path: str) -> list[dict]:
    """The rows of a report's ``.per-query.json.gz``; one line naming the file where it is not one."""
    try:
        with gzip.open(path, "rt") as f:
            rows = json.load(f)
        if not isinstance(rows, list) or not all(isinstance(r, dict) and set(ROW_FIELDS) <= set(r) for r in rows):
            raise ValueError("not a list of rows")
    except (OSError, EOFError, ValueError) as e:
        raise UserError(f"{path}: not a report's per-query rows (.per-query.json.gz): {e}") from None
    return rows


def merge(paths: list[str]) -> list[dict]:
    """The rows of several reports as one table. A teacher-free row measured by more than one is kept once, from the
    first, and only if every report gave it the same per-query values (they differ only in time); every row of a
    collection must be over the same queries."""
    rows: list[dict] = []
    seen: dict[tuple, dict] = {}
    queries: dict[str, list[str]] = {}
    for path in paths:
        for row in read_rows(path):
            key = (row["collection"], row["method"], row["teacher"], row["budget"])
            qids = queries.setdefault(row["collection"], sorted(next(iter(row["per_query"].values()))))
            if any(sorted(values) != qids for values in row["per_query"].values()):
                raise UserError(f"{path}: {key} is over other {row['collection']} queries than the rows before")
            if key in seen:
                if row["teacher"] != "-" or row["per_query"] != seen[key]:
                    raise UserError(f"{path}: {key} is measured by an earlier file too, with other results")
                continue
            seen[key] = row["per_query"]
            rows.append(row)
    return rows
