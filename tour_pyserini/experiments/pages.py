"""What a method's docs page shows that the code and the reports already hold: its settings, from the parameters its
rewriters declare, and its measured rows, from an experiment's report. ``docs/methods/*.md`` show these tables, and a
test renders them again and fails where a page shows others."""

from __future__ import annotations

import json
from pathlib import Path

from tour_pyserini.experiments.report import sections
from tour_pyserini.files.experiments import Experiment
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
