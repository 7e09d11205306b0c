"""Regressions: the shipped configurations' expected values, read from regressions/*.yaml and checked by one runner."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

from tour_pyserini.errors import UserError
from tour_pyserini.files.regressions import find_regression, regression_names

REGRESSION = """name: mini
collection: mini
split: test
tolerance: 0.00005
indexes:
  bm25: --bm25 --collection mini
runs:
  bm25:
    index: bm25
    search: --hits 100
    expect: {EXPECT}
"""


def test_every_shipped_regression_reads_and_expects_only_what_its_collection_scores(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert regression_names() == ["cranfield", "nq-oracle", "scifact"]
    scifact = find_regression("scifact")
    assert [run.name for run in scifact.runs][:2] == ["bm25", "minilm"] and scifact.ci
    assert scifact.runs[0].expect == {"nDCG@10": 0.6789, "R@100": 0.9253, "RR@10": 0.6457}
    assert scifact.runs[3].tolerance == 0.0011 and scifact.runs[4].tolerance == 0.00005  # a run's own, with its why
    from tour_pyserini.commands.regressions import commands

    nq = commands(find_regression("nq-oracle"))  # the dense run is read, after it is searched
    assert [c[0] for c in nq] == ["index", "index", "search", "search", "answer"] and nq[4][2] == nq[3][6]


@pytest.fixture
def workdir(tmp_path, mini_scifact, monkeypatch):
    """A working directory with the mini collection declared by name and a regression of it."""
    collection = tmp_path / "collections" / "mini"
    shutil.copytree(mini_scifact["collection"], collection)
    (collection / "collection.yaml").write_text(
        "name: mini\ncorpus: corpus.jsonl\njudged_by: qrels\nmetrics: [nDCG@10, RR@10]\n"
        "splits:\n  test: {topics: topics.tsv, qrels: qrels.txt}\n"
    )
    (tmp_path / "regressions").mkdir()
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("name: mini", "name: other", "name 'other' is not its file's ('mini'): a name finds its file"),
        ("tolerance: 0.00005", "tolerence: 0.00005", "unknown field 'tolerence'"),
        ("index: bm25", "index: dense", "run 'bm25': index 'dense' is none of the regression's: bm25"),
        ("{EXPECT}", "{MAP: 0.5}", "run 'bm25': 'MAP' is not scored; the run's metrics: nDCG@10, RR@10"),
        ("{EXPECT}", "{EM: 0.5}", "run 'bm25': 'EM' is not scored; the run's metrics: nDCG@10, RR@10"),
        ("--hits 100", "--hits 100\n    answer: --k 5 --run x.trec", "run 'bm25': answer: --run is the runner's"),
        ("{EXPECT}", "{RR@10: high}", "run 'bm25': expected RR@10 must be a number, got 'high'"),
        ("--hits 100", "--hits 100\n    tolerance: 0.01", "run 'bm25': a run's own tolerance comes with its why"),
        ("  bm25:\n    index", "  ../bm25:\n    index", "name '../bm25': letters, digits, '.', '-' and '_' only"),
        ("collection: mini", "collection: minu", "unknown collection 'minu'"),
        ("--hits 100", "--hits 100 --output x.trec", "run 'bm25': --output is the runner's to set (--index, --topics"),
    ],
)
def test_a_wrong_regression_file_is_one_line_naming_it_before_anything_runs(workdir, old, new, message):
    (workdir / "regressions" / "mini.yaml").write_text(REGRESSION.replace(old, new).replace("{EXPECT}", "{RR@10: 1}"))
    with pytest.raises(UserError, match=re.escape(message)) as raised:
        find_regression("mini")
    assert "\n" not in str(raised.value)


def regressions(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tour_pyserini", "regressions", *args], capture_output=True, text=True, check=False
    )


def test_a_value_off_by_more_than_its_tolerance_fails_and_is_named(workdir, mini_scifact):
    """Scored from a run written by hand, whose values are known: each query's first hit is one of its relevant
    abstracts, so RR@10 is 1 exactly."""
    qrels = {}
    for line in mini_scifact["qrels"].read_text().splitlines():
        qid, _, docid, rel = line.split()
        if int(rel) > 0:
            qrels.setdefault(qid, docid)
    (workdir / "runs" / "mini.bm25.trec").write_text("".join(f"{q} Q0 {d} 1 1.0 bm25\n" for q, d in qrels.items()))
    (workdir / "regressions" / "mini.yaml").write_text(REGRESSION.replace("{EXPECT}", "{RR@10: 1.0}"))
    done = regressions("mini", "--score-only")
    assert done.returncode == 0, done.stderr
    assert "mini.bm25.trec" in done.stdout and "ok: 1 of 1 values as regressions/mini.yaml expects" in done.stdout
    (workdir / "regressions" / "mini.yaml").write_text(REGRESSION.replace("{EXPECT}", "{RR@10: 0.9999}"))
    done = regressions("mini", "--score-only")
    assert done.returncode == 1
    assert "bm25 RR@10: 1.0000, expected 0.9999 ± 5e-05" in done.stdout and "FAILED: 0 of 1 values" in done.stdout
    assert "regressions that failed: mini" in done.stderr


@pytest.mark.slow
def test_the_runner_runs_the_commands_it_prints_and_scores_as_ir_measures(workdir, mini_scifact):
    import ir_measures

    (workdir / "regressions" / "mini.yaml").write_text(REGRESSION.replace("{EXPECT}", "{nDCG@10: 0.5}"))
    done = regressions("mini")
    assert done.returncode == 1  # 0.5 is no measured value
    printed = [line for line in done.stdout.splitlines() if line.startswith("python -m tour_pyserini ")]
    assert printed == [
        "python -m tour_pyserini index --bm25 --collection mini --output indexes/mini.bm25",
        "python -m tour_pyserini search --index indexes/mini.bm25 --topics collections/mini/topics.tsv "
        "--output runs/mini.bm25.trec --run-tag bm25 --hits 100",
    ]
    qrels = list(ir_measures.read_trec_qrels(str(mini_scifact["qrels"])))
    expected = ir_measures.calc_aggregate(
        [ir_measures.nDCG @ 10], qrels, ir_measures.read_trec_run("runs/mini.bm25.trec")
    )
    value = expected[ir_measures.nDCG @ 10]
    assert f"bm25 nDCG@10: {value:.4f}, expected 0.5000" in done.stdout
    (workdir / "regressions" / "mini.yaml").write_text(REGRESSION.replace("{EXPECT}", f"{{nDCG@10: {value:.6f}}}"))
    done = regressions("mini")
    assert done.returncode == 0 and "reusing bm25 index indexes/mini.bm25" in done.stdout
