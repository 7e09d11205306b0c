"""Experiments as data: the file checked whole before anything runs, and the runner's rows, report and resumption."""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path

import pytest
from conftest import ROOT

from tour_pyserini.errors import UserError
from tour_pyserini.files.experiments import find_experiment, read_experiment

EXPERIMENT = """name: mine
title: Two methods and a teacher
hits: 20
batch_size: 4
budgets: [5]
collections:
  mini:
    metrics: [nDCG@10, R@100]
    teachers: {bm25: ""}
methods:
  dense: ""
  rocchio: --rewriter rocchio
with_teacher:
  rerank: --rewriter rerank --depth {budget}
  tour-soft: --rewriter tour-soft --depth {budget} --preset passage
  ttt-embed: {fit: query}
warm_up: --rewriter rerank --depth 2
compare_within_budget: rerank
"""


@pytest.fixture
def lab(tmp_path, monkeypatch, mini_scifact, dense_index, bm25_index) -> Path:
    """A working directory with collection ``mini`` (the fixture's files) declared, its indexes and the
    experiment ``mine``."""
    mine = tmp_path / "collections" / "mini"
    mine.mkdir(parents=True)
    for name in ("corpus.jsonl", "topics.tsv", "qrels.txt"):
        (mine / name).symlink_to(mini_scifact["collection"] / name)
    (mine / "collection.yaml").write_text(
        "name: mini\ncorpus: corpus.jsonl\njudged_by: qrels\nmetrics: [nDCG@10, R@100, RR@10]\n"
        "splits:\n  test: {topics: topics.tsv, qrels: qrels.txt}\n"
    )
    (tmp_path / "indexes").mkdir()
    (tmp_path / "indexes" / "mini.minilm").symlink_to(dense_index)
    (tmp_path / "indexes" / "mini.bm25").symlink_to(bm25_index)
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "mine.yaml").write_text(EXPERIMENT)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return tmp_path


@pytest.mark.parametrize(
    "change, message",
    [
        (("hits: 20", "hits: 20\nseed: 3"), "unknown field 'seed'"),
        (("name: mine", "name: yours"), "name 'yours' is not its file's"),
        (("--rewriter rocchio", "--rewriter rocchio --hits 5"), "--hits is the runner's to set"),
        (("{fit: query}", "{fit: auto}"), "SCOPE one of query, neighbours, task, global"),
        (
            ("[nDCG@10, R@100]", "[nDCG@10, P@5]"),
            "'P@5' is not scored; the collection's metrics: nDCG@10, R@100, RR@10",
        ),
        (("compare_within_budget: rerank", "compare_within_budget: refit"), "refit' is none of with_teacher's"),
        (("budgets: [5]", "budgets: [0]"), "budgets: a positive whole number was expected, got 0"),
        (("--depth {budget}\n", "--depth '{budget}\n"), "with_teacher 'rerank': No closing quotation"),
        (("hits: 20", "hits: 20\nhits: 30"), "mine.yaml:4: key 'hits' given twice"),
        (("warm_up:", "expect: {mini: {rerank bm25 7: {nDCG@10: 0.5}}}\nwarm_up:"), "rerank bm25 7': no such row"),
        (("warm_up:", "expect: {mini: {dense: {RR@10: 0.5}}}\nwarm_up:"), "'RR@10' is not reported; mini's: nDCG"),
        (("warm_up:", "expect: {mini: {dense bm25: {nDCG@10: 0.5}}}\nwarm_up:"), "a row is METHOD, or METHOD TEACHER"),
    ],
)
def test_a_wrong_experiment_file_is_one_line_naming_it(lab, change, message):
    path = lab / "experiments" / "mine.yaml"
    path.write_text(EXPERIMENT.replace(*change, 1))
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("{", r"\{")):
        read_experiment(path)


def test_the_rows_are_the_methods_and_each_teachers_methods_at_each_budget(lab):
    experiment = find_experiment("mine")
    cells = experiment.cells("mini")
    assert [(c.method, c.teacher, c.budget) for c in cells] == [
        ("dense", "-", None),
        ("rocchio", "-", None),
        ("rerank", "bm25", 5),
        ("tour-soft", "bm25", 5),
        ("ttt-embed", "bm25", 5),
    ]
    assert cells[3].flags == ("--rewriter", "tour-soft", "--depth", "5", "--preset", "passage", "--teacher", "bm25")
    assert cells[4].fit == "query" and experiment.cells("mini", teachers={"ensemble"}) == cells[:2]


def test_check_compares_the_rows_run_with_the_values_expected_to_the_tolerance(lab):
    from tour_pyserini.files.experiments import check_rows

    path = lab / "experiments" / "mine.yaml"
    expect = "tolerance: 0.00005\nexpect:\n  mini:\n    dense: {nDCG@10: 0.5}\n    tour-soft bm25 5: {R@100: 0.75}\n"
    path.write_text(EXPERIMENT + expect)
    experiment = read_experiment(path)
    rows = [
        {"collection": "mini", "method": "dense", "teacher": "-", "budget": None, "metrics": {"nDCG@10": 0.50004}},
        {"collection": "mini", "method": "rocchio", "teacher": "-", "budget": None, "metrics": {"nDCG@10": 0.1}},
        {"collection": "mini", "method": "tour-soft", "teacher": "bm25", "budget": 5, "metrics": {"R@100": 0.7501}},
    ]
    checked = check_rows(experiment, rows)
    assert [(m.run, m.measure, m.holds) for m in checked] == [
        ("mini dense", "nDCG@10", True),
        ("mini tour-soft bm25 5", "R@100", False),
    ]


def test_the_shipped_experiments_read(monkeypatch):
    monkeypatch.chdir(ROOT)
    methods = find_experiment("methods")
    assert len(methods.cells("scifact")) == 4 + 3 * 3 * 5 and methods.baseline == "dense"
    every = {cell.key for name in methods.collections for cell in methods.cells(name)}
    assert set(methods.expect) == every  # each row of the methods table has the values it gave


@pytest.mark.parametrize("row", ["--rewriter rocchio", "warm_up: --rewriter rerank"])
def test_a_flag_the_search_command_refuses_stops_the_experiment_before_anything_loads(lab, capsys, row):
    """A method's flags and the warm-up's alike."""
    from tour_pyserini.commands.experiment import main

    path = lab / "experiments" / "mine.yaml"
    path.write_text(EXPERIMENT.replace(row, f"{row} --depht 3"))
    with pytest.raises(SystemExit) as e:
        main(["mine"])
    said = capsys.readouterr()
    assert e.value.code == 2 and "unrecognized arguments: --depht 3" in said.err
    assert said.out == "" and not (lab / "runs").exists()  # no index command ran


@pytest.mark.slow
def test_the_runner_reports_every_row_and_resumes_from_the_rows_it_stored(lab, searcher, capsys):
    """Each row equals the search assembled by hand from its flags; a second run measures nothing again; the
    report's tests are the table's, Holm-corrected."""
    from tour_pyserini.commands.experiment import main
    from tour_pyserini.eval import QrelsJudge
    from tour_pyserini.files import read_qrels, read_topics
    from tour_pyserini.rewriters import get_rewriter
    from tour_pyserini.teachers import TeacherContext, get_teacher

    main(["mine", "--output", "runs/mine"])
    rows = json.loads(gzip.decompress((lab / "runs/mine.per-query.json.gz").read_bytes()))
    assert [(r["method"], r["teacher"], r["budget"]) for r in rows] == [
        ("dense", "-", None),
        ("rocchio", "-", None),
        ("rerank", "bm25", 5),
        ("tour-soft", "bm25", 5),
        ("ttt-embed", "bm25", 5),
    ]
    topics = read_topics(lab / "collections/mini/topics.tsv")
    judge = QrelsJudge(read_qrels(lab / "collections/mini/qrels.txt"), ["nDCG@10", "R@100"])
    texts, qids = [t.text for t in topics], [t.qid for t in topics]
    teacher = get_teacher("bm25", TeacherContext(index_dir=str(lab / "indexes/mini.minilm")))
    for row, rewriter in [
        (rows[0], None),
        (rows[3], get_rewriter("tour-soft", teacher=teacher, depth=5, preset="passage")),
    ]:
        results = searcher.retrieve(texts, qids, 20, rewriter=rewriter)
        assert row["per_query"] == judge.per_query({r.qid: {h.docid: h.score for h in r.hits} for r in results})
    assert rows[2]["teacher_calls_per_query"] == 5 and rows[4]["teacher_calls_per_query"] == 5
    assert all(
        row["p"]["vs_baseline"]["nDCG@10"]["holm"] >= row["p"]["vs_baseline"]["nDCG@10"]["p"] for row in rows[1:]
    )
    table = (lab / "runs/mine.md").read_text()
    assert "# Two methods and a teacher" in table and "| tour-soft | bm25 | 5 |" in table
    assert (lab / "runs/mine-mini.png").stat().st_size > 0
    stored = (lab / "runs/mine.rows.jsonl").read_text()
    report = (lab / "runs/mine.per-query.json.gz").read_bytes()
    (lab / "runs/mine.per-query.json.gz").unlink()
    main(["mine", "--output", "runs/mine"])  # every row reused: the same bytes, nothing stored again
    assert (lab / "runs/mine.rows.jsonl").read_text() == stored
    assert (lab / "runs/mine.per-query.json.gz").read_bytes() == report


def test_merge_refuses_a_file_that_is_not_a_reports_rows_in_one_line(tmp_path):
    from tour_pyserini.experiments.report import merge

    (tmp_path / "text.gz").write_text("not gzipped")
    (tmp_path / "list.gz").write_bytes(gzip.compress(json.dumps([{"collection": "x"}]).encode()))
    for name, message in [
        ("none.gz", "No such file"),
        ("text.gz", "Not a gzipped file"),
        ("list.gz", "not a list of rows"),
    ]:
        with pytest.raises(UserError, match=f"{name}: not a report's per-query rows .*{message}"):
            merge([str(tmp_path / name)])


def test_a_row_cut_short_as_it_was_written_is_measured_again(tmp_path, caplog):
    from tour_pyserini.experiments.runner import RowStore

    path = tmp_path / "rows.jsonl"
    path.write_text('{"fingerprint": "a", "method": "dense"}\n{"fingerprint": "b", "meth')
    store = RowStore(path)
    assert set(store.rows) == {"a"} and path.read_text() == '{"fingerprint": "a", "method": "dense"}\n'
    assert "its last row was cut short" in caplog.text
    path.write_text('{"fingerprint": "a"\n{"fingerprint": "b"}\n')
    with pytest.raises(UserError, match="rows.jsonl:1: not a stored row"):
        RowStore(path)


TIMING = """name: clock
title: Two batch sizes
collection: mini
queries: 12
rounds: 1
search: --hits 20 --encoder-runtime torch
ways:
  batched: --batch-size 4
  one: --batch-size 1
compare:
  batching: {way: batched, against: one, at_most: 100, same_run: true, metric: nDCG@10, within: 0.001}
  impossible: {way: batched, against: one, time: command, at_most: 0.000001}
"""


@pytest.mark.parametrize(
    "change, message",
    [
        (("rounds: 1", "rounds: 0"), "rounds: a positive whole number was expected, got 0"),
        (("--batch-size 1", "--batch-size 1 --trace t.jsonl"), "--trace is the runner's to set"),
        (("  one: --batch-size 1", "  one: {search: '', kernels: [avx2]}"), "way 'one': kernels must list some of"),
        (("  one: --batch-size 1", "  one: {answer: '--run {run:later}'}"), "{run:later} names no earlier way"),
        (("against: one, at", "against: two, at"), "compare 'batching': against 'two' is none of the ways"),
        (("metric: nDCG@10", "metric: P@5"), "metric 'P@5' is not scored; the way's: nDCG@10"),
        (("time: command", "time: hourly"), "time is query (two search ways"),
        (("impossible: {", "impossible: {speed: 2, "), "compare 'impossible': unknown field 'speed'"),
    ],
)
def test_a_wrong_timing_file_is_one_line_naming_it(lab, change, message):
    path = lab / "experiments" / "clock.yaml"
    path.write_text(TIMING.replace(*change, 1))
    with pytest.raises(UserError, match=re.escape(message)):
        find_experiment(str(path))


def test_the_floor_counts_the_flops_torchs_counter_counts_in_the_query_encoder():
    """The encoder's FLOPs by formula against torch's own count of the bundled MiniLM's forward pass, exactly (its
    pooler, which the search does not use, is the only difference)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModel

    from tour_pyserini.encoders import bundled_model_dir
    from tour_pyserini.experiments.floors import encoder_gflop

    # eager attention: its two products are matrix products the counter sees (CPU's fused kernel it does not count)
    model = AutoModel.from_pretrained(bundled_model_dir(), attn_implementation="eager").eval()
    c = model.config
    for tokens in (7, 23, 64):
        ones = torch.ones(1, tokens, dtype=torch.long)
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model(input_ids=ones, attention_mask=ones)
        ours = encoder_gflop(c.num_hidden_layers, c.hidden_size, c.intermediate_size, [tokens]) * 1e9
        pooler = 2 * c.hidden_size**2  # the pooler's dense layer, which mean pooling never uses
        assert round(ours) + pooler == counter.get_total_flops()


def test_a_timed_command_knows_when_another_process_kept_a_core_busy():
    import subprocess
    import sys

    from tour_pyserini.experiments.timing import SHARED_CORES, run_timed

    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        wall, cpu, others = run_timed([sys.executable, "-c", "import time; time.sleep(1.5)"], {})
    finally:
        busy.kill()
    assert wall >= 1.5 and cpu < 0.5 and others > max(SHARED_CORES, 0.6)


def test_a_searchs_time_a_query_leaves_its_first_batch_out(tmp_path):
    from tour_pyserini.experiments.timing import traced_ms

    seconds = [{"encode": 1.0, "search": 0.5}] * 2 + [{"encode": 0.002, "teacher": 0.001}] * 4
    (tmp_path / "t").write_text(
        "".join(json.dumps({"qid": str(i), "seconds": s}) + "\n" for i, s in enumerate(seconds))
    )
    ms, phases = traced_ms(tmp_path / "t", skip=2)
    assert phases == {"encode": 2.0, "search": 0.0, "teacher": 1.0, "update": 0.0} and ms == pytest.approx(3.0)


@pytest.mark.slow
def test_the_timing_mode_times_each_way_beside_its_floor_and_checks_the_bounds(lab, capsys):
    """Two batch sizes of one search: the same run, each way's traced time by phase, the encoding slower than its
    floor; a bound no command can meet fails ``--check`` and is marked in the report, which keeps each CPU apart."""
    from tour_pyserini.commands.experiment import main
    from tour_pyserini.devices import cpu_name

    (lab / "experiments" / "clock.yaml").write_text(TIMING)
    (lab / "runs").mkdir()
    (lab / "runs/clock.json").write_text(json.dumps({"another CPU": {"ways": []}}))
    with pytest.raises(SystemExit) as e:
        main(["clock", "--check", "--output", "runs/clock"])
    assert e.value.code == 1
    reports = json.loads((lab / "runs/clock.json").read_text())
    assert set(reports) == {"another CPU", cpu_name()}
    report = reports[cpu_name()]
    ways = {w["way"]: w for w in report["ways"]}
    assert set(ways) == {"batched", "one"} and report["queries"] == 12
    for w in ways.values():
        assert w["ms_per_query"] == pytest.approx(sum(w["phases"].values()))
        assert w["encode_times_floor"] > 1 and w["metrics"]["nDCG@10"] > 0
    batching, impossible = report["compare"]
    assert batching["ok"] and "0 different" in batching["same_run"] and batching["difference"] == 0
    assert not impossible["ok"] and impossible["time"] == "command"
    assert "| **no** |" in (lab / "runs/clock.md").read_text()
