"""The one rule for "the same run" where bit-identity cannot hold: hand-worked cases of each clause."""

from __future__ import annotations

import pytest

from tour_pyserini.files.sameness import diff_runs

BASE = {"q1": {"d1": 0.9, "d2": 0.8, "d3": 0.7, "d4": 0.6}, "q2": {"d5": 0.5, "d6": 0.4}}


def with_query(q1: dict) -> dict:
    return {**BASE, "q1": q1}


def test_identical_runs():
    diff = diff_runs(BASE, {q: dict(r) for q, r in BASE.items()})
    assert (diff.identical, diff.within, diff.different, diff.same) == (2, 0, [], True)
    assert diff.summary().startswith("2 queries: 2 identical, 0 the same up to ties within 1e-05, 0 different")


def test_scores_within_the_tolerance_are_the_same_run():
    diff = diff_runs(BASE, with_query({"d1": 0.900008, "d2": 0.8, "d3": 0.699991, "d4": 0.6}))
    assert (diff.identical, diff.within, diff.same) == (1, 1, True)
    assert diff.max_score_diff == pytest.approx(9e-6)


def test_exactly_the_tolerance_counts_despite_six_printed_decimals():
    assert diff_runs(BASE, with_query({"d1": 0.90001, "d2": 0.8, "d3": 0.7, "d4": 0.6})).same


def test_a_score_beyond_the_tolerance_is_different():
    diff = diff_runs(BASE, with_query({"d1": 0.90002, "d2": 0.8, "d3": 0.7, "d4": 0.6}))
    assert not diff.same and diff.different[0].qid == "q1" and "document d1" in diff.different[0].reason


def test_near_tied_documents_may_swap():
    a = with_query({"d1": 0.9, "d2": 0.800004, "d3": 0.8, "d4": 0.6})
    b = with_query({"d1": 0.9, "d3": 0.800003, "d2": 0.800001, "d4": 0.6})
    assert diff_runs(a, b).same


def test_distant_documents_may_not_swap():
    a = with_query({"d1": 0.9, "d2": 0.8, "d3": 0.7, "d4": 0.6})
    b = with_query({"d2": 0.8, "d1": 0.9, "d3": 0.7, "d4": 0.6})  # b lists d2 first although it scores lower
    diff = diff_runs(a, b)
    assert not diff.same and "d1 and d2 swap" in diff.different[0].reason


def test_a_document_at_the_cut_off_may_be_replaced_by_a_near_tie():
    a = with_query({"d1": 0.9, "d2": 0.8, "d3": 0.7, "d4": 0.6})
    b = with_query({"d1": 0.9, "d2": 0.8, "d3": 0.7, "d9": 0.599995})
    assert diff_runs(a, b).same
    deeper = with_query({"d1": 0.9, "d2": 0.8, "d9": 0.69, "d4": 0.6})  # replaces d3, far above the cut-off
    diff = diff_runs(a, deeper)
    assert not diff.same and "only in run" in diff.different[0].reason


def test_missing_queries_and_other_lengths_are_different():
    diff = diff_runs(BASE, {"q1": BASE["q1"]})
    assert [d.qid for d in diff.different] == ["q2"] and "only in run a" in diff.different[0].reason
    shorter = diff_runs(BASE, with_query({"d1": 0.9, "d2": 0.8, "d3": 0.7}))
    assert "4 hits against 3" in shorter.different[0].reason
