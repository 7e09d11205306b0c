"""PyTerrier pipelines over our searchers, rewriters and teachers rank as the search command does, and
``pt.Experiment`` on our runs gives the numbers ``tour-pyserini eval`` gives."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from conftest import ROOT

pt = pytest.importorskip("pyterrier")

from tour_pyserini.commands.eval import main as eval_main  # noqa: E402
from tour_pyserini.commands.search import main as search_main  # noqa: E402
from tour_pyserini.errors import UserError  # noqa: E402
from tour_pyserini.files.runs import format_run_lines  # noqa: E402
from tour_pyserini.files.sameness import diff_runs  # noqa: E402
from tour_pyserini.pyterrier import (  # noqa: E402
    Retriever,
    TeacherReranker,
    average_prf,
    rocchio,
    topics_frame,
    tour,
    ttt_embed,
)
from tour_pyserini.results import Hit  # noqa: E402

pytestmark = pytest.mark.slow

HITS = 100
# each pipeline and the search command's flags for the same search
SEARCHES = {
    "dense": (lambda r, state: r, []),
    "rocchio": (lambda r, state: r >> rocchio(prf_depth=5, topk=3, bottomk=1),
                ["--rewriter", "rocchio", "--prf-depth", "5", "--rocchio-topk", "3", "--rocchio-bottomk", "1"]),
    "tour-soft": (lambda r, state: r >> tour(teacher="bm25", depth=10),
                  ["--rewriter", "tour-soft", "--teacher", "bm25", "--depth", "10"]),
    "ttt-embed": (lambda r, state: r >> ttt_embed(state, task="mini"),
                  ["--rewriter", "ttt-embed", "--state", "STATE", "--task", "mini"]),
}  # fmt: skip


def run_of(frame) -> dict[str, dict[str, float]]:
    """A result frame as a run {qid: {docno: score}}, each query's documents in rank order."""
    run: dict[str, dict[str, float]] = {}
    for row in frame.sort_values(["qid", "rank"], kind="stable").itertuples():
        run.setdefault(row.qid, {})[row.docno] = row.score
    return run


@pytest.fixture(scope="module")
def retriever(dense_index, bm25_index):  # the bm25 teacher reads the BM25 index beside the dense one
    return Retriever(dense_index, num_results=HITS, threads=1)  # as the command's --threads 1: the same arithmetic


@pytest.fixture(scope="module")
def topics(mini_scifact):
    return topics_frame(mini_scifact["topics"])


@pytest.fixture(scope="module")
def command_runs(dense_index, bm25_index, mini_scifact, state_file, tmp_path_factory):
    """The search command's run of each search."""
    out = tmp_path_factory.mktemp("pyterrier-runs")
    runs = {}
    for name, (_, flags) in SEARCHES.items():
        runs[name] = out / f"{name}.trec"
        flags = [str(state_file) if f == "STATE" else f for f in flags]
        search_main(["--index", str(dense_index), "--topics", str(mini_scifact["topics"]), "--output",
                     str(runs[name]), "--hits", str(HITS), "--threads", "1", *flags])  # fmt: skip
    return runs


@pytest.mark.parametrize("name", list(SEARCHES))
def test_a_pipeline_ranks_as_the_search_command(name, retriever, topics, command_runs, state_file):
    pipeline = SEARCHES[name][0](retriever, state_file)
    frame = pipeline(topics)
    assert {"qid", "query", "query_vec", "docno", "score", "rank"} <= set(frame.columns)
    assert frame.groupby("qid")["rank"].apply(lambda r: r.tolist() == list(range(len(r)))).all()  # PyTerrier's, from 0
    # written as the command writes a run (6 decimals, ties made strictly decreasing): the same file
    lines = "".join(format_run_lines(qid, [Hit(r.docno, r.score) for r in hits.itertuples()], "tour_pyserini")
                    for qid, hits in frame.groupby("qid", sort=False))  # fmt: skip
    assert lines == command_runs[name].read_text()


def test_pt_experiment_gives_the_numbers_of_eval(retriever, topics, command_runs, mini_scifact, capsys):
    from pyterrier.measures import AP, R, nDCG

    metrics = ["nDCG@10", "R@100", "AP"]
    qrels = pt.io.read_qrels(str(mini_scifact["qrels"]))
    names = ["dense", "rocchio", "tour-soft"]
    capsys.readouterr()
    eval_main(["--qrels", str(mini_scifact["qrels"]), "--metrics", *metrics, "--json",
               "--run", *[str(command_runs[n]) for n in names]])  # fmt: skip
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = np.array([[p[m] for m in metrics] for p in printed])
    measures = [nDCG @ 10, R @ 100, AP]
    on_runs = pt.Experiment([pt.io.read_results(str(command_runs[n])) for n in names], topics, qrels, measures,
                            names=names)  # fmt: skip
    np.testing.assert_allclose(on_runs[metrics].to_numpy(), expected, rtol=0, atol=1e-12)
    pipelines = [SEARCHES[n][0](retriever, None) for n in names]
    on_pipelines = pt.Experiment(pipelines, topics, qrels, measures, names=names)
    np.testing.assert_allclose(on_pipelines[metrics].to_numpy(), expected, rtol=0, atol=1e-9)
    assert not pt.java.started()  # PyTerrier's own JVM never started beside Pyserini's


def test_a_teacher_reranks_as_the_rerank_rewriter(retriever, topics, dense_index, mini_scifact, tmp_path):
    run = tmp_path / "rerank.trec"
    search_main(["--index", str(dense_index), "--topics", str(mini_scifact["topics"]), "--output", str(run), "--hits",
                 "20", "--threads", "1", "--rewriter", "rerank", "--teacher", "bm25", "--depth", "20"])  # fmt: skip
    frame = (retriever % 20 >> TeacherReranker("bm25", index=retriever))(topics)
    theirs: dict[str, list[str]] = {}
    for line in run.read_text().splitlines():
        theirs.setdefault(line.split()[0], []).append(line.split()[2])
    assert {q: list(d) for q, d in run_of(frame).items()} == theirs
    first = frame[frame["rank"] == 0].iloc[0]
    assert first["score"] == frame[frame["qid"] == first["qid"]]["score"].max() > 0  # the teacher's own score


def test_pyterrier_drs_average_prf_on_our_vectors_is_our_average_prf(retriever, dense_index, topics):
    """pyterrier-dr's AveragePrf reads our doc_vec and query_vec; our retriever searches the query_vec it writes."""
    pyterrier_dr = pytest.importorskip("pyterrier_dr")

    feedback = Retriever(dense_index, num_results=3, doc_vec=True)
    theirs = (feedback >> pyterrier_dr.AveragePrf(k=3) >> retriever)(topics)
    ours = (retriever >> average_prf(prf_depth=3))(topics)
    assert diff_runs(run_of(ours), run_of(theirs)).same


def test_bm25_retriever_is_the_bm25_searcher(bm25_index, topics):
    from tour_pyserini.search import Bm25Searcher

    frame = Retriever(bm25_index, num_results=10)(topics)
    assert "query_vec" not in frame.columns
    results = Bm25Searcher.from_index(bm25_index).retrieve(topics["query"].tolist(), topics["qid"].tolist(), 10)
    ours, theirs = run_of(frame), {r.qid: {h.docid: h.score for h in r.hits} for r in results}
    assert {q: list(d) for q, d in ours.items()} == {q: list(theirs[q]) for q in sorted(theirs)}
    assert max(abs(s - theirs[q][d]) for q in ours for d, s in ours[q].items()) <= 1e-6  # as a run file prints them


def test_bad_input_is_one_line(retriever, topics, dense_index):
    with pytest.raises(UserError, match=r"works over an index: put it right after a Retriever"):
        rocchio()(topics)
    with pytest.raises(UserError, match="prf_dpth"):
        rocchio(prf_dpth=5)
    with pytest.raises(UserError, match="needs a teacher"):
        tour(teacher=None)
    with pytest.raises(UserError, match="lacks query"):
        retriever(topics[["qid"]])
    with pytest.raises(UserError, match="re-ranks a result frame .* lacks docno"):
        TeacherReranker("bm25", index=retriever)(topics)
    with pytest.raises(UserError, match="index= takes a tour_pyserini.pyterrier.Retriever"):
        rocchio(index=str(dense_index))
    unbound = rocchio(prf_depth=5)
    (retriever >> unbound)(topics.head(1))
    assert unbound.index is None  # binding copies: the stage may follow another retriever too


def test_the_worked_example_of_the_docs_runs(dense_index, mini_scifact, capsys):
    """docs/pyterrier.md's example, on the fixture's index, topics and qrels."""
    text = (ROOT / "docs" / "pyterrier.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    for path, fixture in (("indexes/scifact.minilm", dense_index), ("collections/scifact/topics.test.tsv",
                          mini_scifact["topics"]), ("qrels/scifact.test.txt", mini_scifact["qrels"])):  # fmt: skip
        assert path in code
        code = code.replace(path, str(fixture))
    exec(compile(code, "docs/pyterrier.md", "exec"), {"__name__": "__docs__"})
    printed = capsys.readouterr().out
    assert "nDCG@10" in printed and "tour-soft" in printed
