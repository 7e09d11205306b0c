"""Docs from results: one page per method (docs/methods/), its settings the parameters its rewriters declare and its
measured rows the methods report's, and the methods tables of docs/benchmarks.md, each rendered from its report by
the same code; a page that shows other values fails here."""

from __future__ import annotations

import pytest
from conftest import ROOT

from tour_pyserini.experiments.pages import holm_table, measured_table, settings_table
from tour_pyserini.files.experiments import find_experiment
from tour_pyserini.rewriters import available_rewriters

PAGES = {
    "tour": ["tour-hard", "tour-soft"],
    "prf": ["rocchio", "avg-prf"],
    "rerank": ["rerank"],
    "refit": ["refit"],
    "dart": ["dart"],
    "ttt-embed": ["ttt-embed"],
}
REPORT = ROOT / "runs" / "bench-methods-all.json"


def test_every_rewriter_has_a_page():
    assert {m for methods in PAGES.values() for m in methods} == set(available_rewriters()) - {"none"}


@pytest.mark.parametrize("page", PAGES)
def test_a_method_page_shows_its_declared_settings_and_its_measured_rows(page, monkeypatch):
    monkeypatch.chdir(ROOT)
    text = (ROOT / "docs" / "methods" / f"{page}.md").read_text(encoding="utf-8")
    settings = settings_table(PAGES[page])
    assert settings in text, f"docs/methods/{page}.md does not show its settings:\n{settings}"
    measured = measured_table(find_experiment("methods"), REPORT, PAGES[page])
    assert measured in text, f"docs/methods/{page}.md does not show its rows of {REPORT.name}:\n{measured}"


def test_a_changed_default_or_figure_fails_the_page(monkeypatch):
    """The check can fail: a default that differs from the declared one, or a figure off by one in the last digit."""
    monkeypatch.chdir(ROOT)
    text = (ROOT / "docs" / "methods" / "refit.md").read_text(encoding="utf-8")
    assert settings_table(["refit"]).replace("| 0.2 |", "| 0.3 |") not in text
    measured = measured_table(find_experiment("methods"), REPORT, ["refit"])
    assert measured.replace("0.6451", "0.6452") not in text


BENCHMARK_TABLES = [  # (report, collection, teacher): the tables docs/benchmarks.md shows, each from its report
    *(("bench-methods.json", name, None) for name in ("scifact", "nq-oracle", "cranfield")),
    ("bench-methods-all.json", "scifact", "cross-encoder:models/scifact-rce"),
    ("bench-methods-all.json", "scifact", "ensemble:models/scifact-rce/ensemble.json"),
    ("bench-methods-all.json", "nq-oracle", "cross-encoder:models/nq-oracle-ce"),
    ("bench-methods-all.json", "nq-oracle", "ensemble:models/nq-oracle-ce/ensemble.json"),
]


@pytest.mark.parametrize("report, collection, teacher", BENCHMARK_TABLES)
def test_the_benchmarks_page_shows_the_methods_tables_of_its_reports(report, collection, teacher):
    table = holm_table(ROOT / "runs" / report, collection, teacher)
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert table in text, (
        f"docs/benchmarks.md does not show runs/{report}'s {collection} {teacher or ''} table:\n{table}"
    )


def test_p_values_print_as_the_tables_print_them():
    from tour_pyserini.experiments.pages import p_value

    assert [p_value(p) for p in (None, 1.0, 0.996, 0.4, 0.073, 0.025, 0.0066, 1.2e-10)] == [
        "–",
        "1",
        "1",
        "0.40",
        "0.073",
        "0.025",
        "7e-3",
        "1e-10",
    ]


# the runner's timing reports the docs show
TIMINGS = ["bench-speed.json", "bench-runtimes.json", "bench-reader-runtimes.json"]


@pytest.mark.parametrize("report", TIMINGS)
def test_the_benchmarks_page_shows_each_cpus_timing_report(report):
    import json

    from tour_pyserini.experiments.pages import timing_section

    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    for cpu, measured in json.loads((ROOT / "runs" / report).read_text()).items():
        section = timing_section(measured)
        assert section in text, f"docs/benchmarks.md does not show runs/{report}'s figures of {cpu}:\n{section}"
        moved = json.loads(json.dumps(measured))  # a figure changed: one command a tenth of a second slower
        moved["ways"][0]["seconds"] += 0.1
        assert timing_section(moved) not in text


def test_the_benchmarks_page_shows_the_transfer_tables_of_its_report():
    """Each table of the transfer report, as rendered from it; a Δ moved by one in its last digit is not there."""
    import json

    from tour_pyserini.experiments.pages import transfer_table

    report = json.loads((ROOT / "runs" / "bench-transfer.json").read_text())
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    for table in dict.fromkeys(r["table"] for r in report):
        rendered = transfer_table(report, table)
        assert rendered in text, (
            f"docs/benchmarks.md does not show runs/bench-transfer.json's {table} table:\n{rendered}"
        )
    moved = json.loads(json.dumps(report))
    cell = moved[0]["collections"]["scifact"]
    cell["delta"] += 0.0001
    assert transfer_table(moved, moved[0]["table"]) not in text


def test_the_benchmarks_page_shows_the_checks_of_choose():
    """The table of choices made on training queries and judged on test queries, as rendered from the reports of
    `make bench-choose` (and the methods table's expected rows); a test score moved by 0.0001 is not there."""
    import json

    from tour_pyserini.experiments.pages import choice_table

    reports = [json.loads(p.read_text()) for p in sorted((ROOT / "runs" / "choose").glob("*.json"))]
    methods = find_experiment(str(ROOT / "experiments" / "methods.yaml"))
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    rendered = choice_table(reports, methods)
    assert f"<!-- choose -->\n{rendered}<!-- end choose -->" in text, f"docs/benchmarks.md does not show:\n{rendered}"
    moved = json.loads(json.dumps(reports))
    moved[0]["judged"][moved[0]["metric"]] += 0.0001
    assert choice_table(moved, methods) not in text


def test_the_benchmarks_page_shows_the_forgetting_table_of_its_report():
    """The forgetting table, rendered from runs/bench-forgetting.json; a Δ against the base moved by 0.0001 is not
    there."""
    import json

    from tour_pyserini.experiments.pages import forgetting_table

    report = json.loads((ROOT / "runs" / "bench-forgetting.json").read_text())
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    rendered = forgetting_table(report, "forgetting")
    assert f"<!-- forgetting -->\n{rendered}<!-- end forgetting -->" in text, rendered
    moved = json.loads(json.dumps(report))
    next(iter(moved[0]["collections"].values()))["versus_base"]["delta"] += 0.0001
    assert forgetting_table(moved, "forgetting") not in text
