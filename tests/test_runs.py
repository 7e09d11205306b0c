"""TREC run writing: strictly decreasing scores, atomic files, resumable runs, one writer, traces."""

from __future__ import annotations

import json

import pytest

from tour_pyserini.errors import UserError
from tour_pyserini.files.runs import RunWriter, read_run, strictly_decreasing, write_run
from tour_pyserini.results import Hit


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


def test_interrupted_run_resumes_after_its_last_whole_batch(tmp_path):
    path = tmp_path / "run.trec"
    signature = {"index": "x", "hits": 2}
    with pytest.raises(KeyboardInterrupt), RunWriter(path, signature=signature) as writer:
        writer.write_batch([("q1", hits(("a", 2.0), ("b", 1.0)), None), ("q2", hits(("c", 2.0), ("d", 1.0)), None)])
        raise KeyboardInterrupt
    # simulate a crash in the middle of writing the next batch: one query whole, the next cut off
    with open(tmp_path / "run.trec.partial", "a") as f:
        f.write("q3 Q0 e 1 2.000000 tour_pyserini\nq3 Q0 f 2 1.000000 tour_pyserini\nq4 Q0 g 1 2.0")
    with RunWriter(path, signature=signature) as writer:
        assert writer.done == {"q1", "q2"}  # q3 finished, but its batch did not: the batch is redone
        writer.write_batch([("q3", hits(("e", 2.0), ("f", 1.0)), None), ("q4", hits(("g", 2.0)), None)])
    run = read_run(path)
    assert list(run) == ["q1", "q2", "q3", "q4"] and run["q3"] == {"e": 2.0, "f": 1.0}
    assert not (tmp_path / "run.trec.partial").exists() and not (tmp_path / "run.trec.partial.json").exists()


def test_a_batch_interrupted_before_its_record_is_neither_done_nor_kept(tmp_path, monkeypatch):
    """Ctrl-C after a batch's lines are written but before its end is recorded: what the writer says it keeps
    (``done``, which the search's message counts) is what the partial file holds."""
    path = tmp_path / "run.trec"
    record = RunWriter._record

    def interrupt_at_the_second_batch(writer, end):
        if writer.done:
            raise KeyboardInterrupt
        record(writer, end)

    monkeypatch.setattr(RunWriter, "_record", interrupt_at_the_second_batch)
    trace = tmp_path / "trace.jsonl"
    with pytest.raises(KeyboardInterrupt), RunWriter(path, trace=trace) as writer:
        writer.write_batch([("q1", hits(("a", 2.0)), {"iterations": 1})])
        writer.write_batch([("q2", hits(("b", 2.0)), {"iterations": 1})])
    assert writer.done == {"q1"}
    assert read_run(tmp_path / "run.trec.partial") == {"q1": {"a": 2.0}}
    assert trace_qids(tmp_path / "trace.jsonl.partial") == ["q1"]  # the trace's record of q2 is cut too


def test_a_batch_interrupted_just_after_its_record_is_resumed_from_the_batches_before(tmp_path, monkeypatch):
    """Ctrl-C after a batch's end is recorded but before the writer counts it done: the interrupted writer cuts the
    files to the batches it counts, and its record must say so too, or the rerun finds the files shorter than
    the record and starts over (seen: a resumed search that searched every query again)."""
    path = tmp_path / "run.trec"
    record = RunWriter._record

    def interrupt_after_the_second_record(writer, end):
        record(writer, end)
        if writer.done and end > writer._complete:
            raise KeyboardInterrupt

    with monkeypatch.context() as patched:
        patched.setattr(RunWriter, "_record", interrupt_after_the_second_record)
        with pytest.raises(KeyboardInterrupt), RunWriter(path, signature={"k": 1}, trace=tmp_path / "t.jsonl") as w:
            w.write_batch([("q1", hits(("a", 2.0)), {"iterations": 1})])
            w.write_batch([("q2", hits(("b", 2.0)), {"iterations": 1})])
    with RunWriter(path, signature={"k": 1}, trace=tmp_path / "t.jsonl") as writer:
        assert writer.done == {"q1"}
        writer.write_batch([("q2", hits(("b", 2.0)), {"iterations": 1})])
    assert read_run(path) == {"q1": {"a": 2.0}, "q2": {"b": 2.0}}


def test_a_partial_file_shorter_than_its_record_starts_over(tmp_path):
    path = tmp_path / "run.trec"
    with pytest.raises(KeyboardInterrupt), RunWriter(path, signature={"k": 1}) as writer:
        writer.write_batch([("q1", hits(("a", 1.0)), None), ("q2", hits(("b", 1.0)), None)])
        raise KeyboardInterrupt
    (tmp_path / "run.trec.partial").write_text("q1 Q0 a 1 1.000000 tour_pyserini\n")  # edited by hand
    with RunWriter(path, signature={"k": 1}) as writer:
        assert writer.done == set()


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


def test_read_run_rejects_non_finite_scores(tmp_path):
    path = tmp_path / "r.trec"
    for score in ("nan", "inf", "-inf"):
        path.write_text(f"q Q0 a 1 2.0 t\nq Q0 b 2 {score} t\n")
        with pytest.raises(UserError, match=rf"r.trec:2: score '{score}' is not a finite number"):
            read_run(path)


def trace_qids(path):
    return [json.loads(line)["qid"] for line in path.read_text().splitlines()]


def test_trace_follows_the_run_through_an_interruption(tmp_path):
    path, trace = tmp_path / "run.trec", tmp_path / "trace.jsonl"
    with pytest.raises(KeyboardInterrupt), RunWriter(path, signature={"k": 1}, trace=trace) as writer:
        for qid in ("q1", "q2", "q3"):
            writer.write(qid, hits(("a", 1.0)), trace={"iterations": 1})
        raise KeyboardInterrupt
    # a kill between the run's and the trace's write leaves the run one query ahead
    with open(tmp_path / "run.trec.partial", "a") as f:
        f.write("q4 Q0 a 1 1.000000 tour_pyserini\n")
    with RunWriter(path, signature={"k": 1}, trace=trace) as writer:
        assert writer.done == {"q1", "q2", "q3"}  # the last query (q4) is redone
        assert trace_qids(tmp_path / "trace.jsonl.partial") == ["q1", "q2", "q3"]
        writer.write("q4", hits(("a", 1.0)), trace={"iterations": 2})
    assert list(read_run(path)) == trace_qids(trace) == ["q1", "q2", "q3", "q4"]
    assert not (tmp_path / "trace.jsonl.partial").exists() and not (tmp_path / "run.trec.partial.json").exists()


def test_a_resumed_run_interrupted_before_its_next_batch_keeps_both_files_as_they_were(tmp_path):
    path, trace = tmp_path / "run.trec", tmp_path / "trace.jsonl"
    partials = [tmp_path / "run.trec.partial", tmp_path / "trace.jsonl.partial"]
    with pytest.raises(KeyboardInterrupt), RunWriter(path, signature={"k": 1}, trace=trace) as writer:
        writer.write("q1", hits(("a", 1.0)), trace={"iterations": 1})
        writer.write("q2", hits(("a", 1.0)), trace={"iterations": 1})
        raise KeyboardInterrupt
    with open(partials[1], "a") as f:  # a kill left the trace a record ahead: resuming cuts it
        f.write('{"qid": "q3", "iterations": 1}\n')
    kept = [partials[0].read_bytes(), b"".join(partials[1].read_bytes().splitlines(keepends=True)[:2])]
    for _ in range(2):
        with pytest.raises(KeyboardInterrupt), RunWriter(path, signature={"k": 1}, trace=trace) as writer:
            assert writer.done == {"q1", "q2"}
            raise KeyboardInterrupt
        assert [p.read_bytes() for p in partials] == kept


@pytest.mark.parametrize("restart", ["no-resume", "changed-arguments", "trace-lacks-queries"])
def test_trace_is_reset_when_the_run_starts_over(restart, tmp_path):
    path, trace = tmp_path / "run.trec", tmp_path / "trace.jsonl"
    with pytest.raises(KeyboardInterrupt), RunWriter(path, signature={"k": 1}, trace=trace) as writer:
        for qid in ("q1", "q2", "q3"):
            writer.write(qid, hits(("a", 1.0)), trace={})
        raise KeyboardInterrupt
    if restart == "trace-lacks-queries":
        (tmp_path / "trace.jsonl.partial").write_text('{"qid": "q1"}\n')
    signature = {"k": 2} if restart == "changed-arguments" else {"k": 1}
    with RunWriter(path, signature=signature, trace=trace, resume=restart != "no-resume") as writer:
        assert writer.done == set()
        assert (tmp_path / "trace.jsonl.partial").read_text() == ""
        writer.write("q9", hits(("a", 1.0)), trace={})
    assert trace_qids(trace) == ["q9"]


def test_a_second_writer_on_the_same_run_is_refused(tmp_path):
    path = tmp_path / "run.trec"
    with RunWriter(path) as first:
        first.write("q1", hits(("a", 1.0)))
        with pytest.raises(UserError, match=r"run.trec.partial is locked: another search is writing this run"):
            RunWriter(path)
        first.write("q2", hits(("a", 1.0)))
    assert list(read_run(path)) == ["q1", "q2"]
    with RunWriter(path) as again:  # the lock went with the first writer
        again.write("q1", hits(("a", 1.0)))


def test_a_run_that_fails_before_any_query_leaves_nothing(tmp_path):
    path, trace = tmp_path / "run.trec", tmp_path / "trace.jsonl"
    with pytest.raises(ValueError), RunWriter(path, signature={"k": 1}, trace=trace):
        raise ValueError("k is larger than the index")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_unwritable_output_is_a_user_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UserError, match=r"cannot write --output .*file/run.trec: .*file is a file, not a directory"):
        RunWriter(blocker / "run.trec")
    with pytest.raises(UserError, match=r"cannot write --trace .*file/t.jsonl: .*file is a file, not a directory"):
        RunWriter(tmp_path / "run.trec", trace=blocker / "t.jsonl")
    (tmp_path / "run.trec").mkdir()
    with pytest.raises(UserError, match=r"--output .*run.trec is a directory; name a file"):
        RunWriter(tmp_path / "run.trec")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "run.trec"]  # nothing staged


def test_queries_without_hits_are_counted(tmp_path):
    with RunWriter(tmp_path / "run.trec") as writer:
        writer.write("q1", hits(("a", 1.0)))
        writer.write("q2", [])
    assert writer.no_hits == ["q2"] and list(read_run(tmp_path / "run.trec")) == ["q1"]
