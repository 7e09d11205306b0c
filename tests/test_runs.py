"""TREC run writing: strictly decreasing scores, atomic files, resumable runs."""

from __future__ import annotations

import pytest

from tour_pyserini.results import Hit
from tour_pyserini.runs import RunWriter, read_run, strictly_decreasing, write_run


def test_strictly_decreasing_known_values():
    assert strictly_decreasing([0.9, 0.5, 0.1], 6) == [0.9, 0.5, 0.1]
    # ties and near-ties at the printed precision are pushed down one unit, keeping rank order
    assert strictly_decreasing([0.5, 0.5, 0.5, 0.4999996, 0.2], 6) == [0.5, 0.499999, 0.499998, 0.499997, 0.2]
    assert strictly_decreasing([1.0, 1.0], 2) == [1.0, 0.99]
    assert strictly_decreasing([], 6) == []


def hits(*pairs):
    return [Hit(d, s) for d, s in pairs]


def test_run_lines_are_trec_with_ranks_and_decreasing_scores(tmp_path):
    path = tmp_path / "run.trec"
    write_run(path, [("q1", hits(("d1", 0.7), ("d2", 0.7), ("d3", 0.1)))], tag="t")
    assert path.read_text().splitlines() == [
        "q1 Q0 d1 1 0.700000 t",
        "q1 Q0 d2 2 0.699999 t",
        "q1 Q0 d3 3 0.100000 t",
    ]
    assert read_run(path) == {"q1": {"d1": 0.7, "d2": 0.699999, "d3": 0.1}}


def test_failed_run_leaves_no_output_file(tmp_path):
    path = tmp_path / "run.trec"
    with pytest.raises(RuntimeError), RunWriter(path) as writer:
        writer.write("q1", hits(("d1", 1.0)))
        raise RuntimeError("search died")
    assert not path.exists()
    assert (tmp_path / "run.trec.partial").exists()


def test_interrupted_run_resumes_and_drops_a_cut_off_query(tmp_path):
    path = tmp_path / "run.trec"
    signature = {"index": "x", "hits": 2}
    with pytest.raises(KeyboardInterrupt), RunWriter(path, signature=signature) as writer:
        writer.write("q1", hits(("a", 2.0), ("b", 1.0)))
        writer.write("q2", hits(("c", 2.0), ("d", 1.0)))
        writer.flush()
        raise KeyboardInterrupt
    # simulate a crash in the middle of writing q3
    with open(tmp_path / "run.trec.partial", "a") as f:
        f.write("q3 Q0 e 1 2.000000 tour_pyserini\nq3 Q0 f 2 1.0")
    with RunWriter(path, signature=signature) as writer:
        assert writer.done == {"q1", "q2"}
        writer.write("q3", hits(("e", 2.0), ("f", 1.0)))
    run = read_run(path)
    assert list(run) == ["q1", "q2", "q3"] and run["q3"] == {"e": 2.0, "f": 1.0}
    assert not (tmp_path / "run.trec.partial").exists()


def test_changed_arguments_start_over(tmp_path):
    path = tmp_path / "run.trec"
    with pytest.raises(KeyboardInterrupt), RunWriter(path, signature={"hits": 10}) as writer:
        writer.write("q1", hits(("a", 1.0)))
        raise KeyboardInterrupt
    with RunWriter(path, signature={"hits": 20}) as writer:
        assert writer.done == set()


def test_read_run_rejects_duplicates_and_bad_lines(tmp_path):
    path = tmp_path / "r.trec"
    path.write_text("q Q0 a 1 2.0 t\nq Q0 a 2 1.0 t\n")
    with pytest.raises(ValueError, match=r"r.trec:2: docid 'a' appears twice for query 'q'"):
        read_run(path)
    path.write_text("q Q0 a 1 2.0\n")
    with pytest.raises(ValueError, match=r"r.trec:1: expected 'qid Q0 docid rank score tag'"):
        read_run(path)
