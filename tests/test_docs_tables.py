"""The tables the README and the docs show for the shipped configurations are the ones their regressions expect,
rendered by the code that prints the runner's table: a figure changes on a page only by changing its regression."""

from __future__ import annotations

import pytest
from conftest import ROOT

from tour_pyserini.commands.regressions import expected_table
from tour_pyserini.files.regressions import find_regression

PAGES = [
    ("README.md", "scifact"),
    ("docs/benchmarks.md", "scifact"),
    ("docs/collections.md", "nq-oracle"),
    ("docs/tutorial.md", "cranfield"),
]


@pytest.mark.parametrize("page, regression", PAGES)
def test_a_page_shows_the_table_its_regression_expects(page, regression, monkeypatch):
    monkeypatch.chdir(ROOT)
    table = expected_table(find_regression(regression))
    text = (ROOT / page).read_text(encoding="utf-8")
    assert table in text, f"{page} does not show regressions/{regression}.yaml's table:\n{table}"
