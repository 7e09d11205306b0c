"""PyTerrier pipelines over our searchers, rewriters and teachers rank as the search command does,
``pt.Experiment`` on our runs gives the numbers ``tour-pyserini eval`` gives, every option of every transformer is
a PyTerrier parameter that ``pt.GridScan`` and ``pt.GridSearch`` vary in the pipeline they run, and a stage
composes wherever PyTerrier lets a transformer stand."""

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
from tour_pyserini.numbers import Number, Param, positive_int  # noqa: E402
from tour_pyserini.pyterrier import (  # noqa: E402
    Retriever,
    Rewrite,
    TeacherReranker,
    average_prf,
    rerank,
    rocchio,
    topics_frame,
    tour,
    ttt_embed,
)
from tour_pyserini.results import Hit  # noqa: E402
from tour_pyserini.rewriters import available_rewriters  # noqa: E402
from tour_pyserini.teachers import available_teachers, teacher_options  # noqa: E402

pytestmark = pytest.mark.slow

HITS = 100
# each pipeline and the search command's flags for the same search
SEARCHES = {
    "dense": (lambda r, state: r, []),
    "rocchio": (
        lambda r, state: r >> rocchio(prf_depth=5, topk=3, bottomk=1),
        ["--rewriter", "rocchio", "--prf-depth", "5", "--rocchio-topk", "3", "--rocchio-bottomk", "1"],
    ),
    "tour-soft": (
        lambda r, state: r >> tour(teacher="bm25", depth=10),
        ["--rewriter", "tour-soft", "--teacher", "bm25", "--depth", "10"],
    ),
    "ttt-embed": (
        lambda r, state: r >> ttt_embed(state, task="mini"),
        ["--rewriter", "ttt-embed", "--state", "STATE", "--task", "mini"],
    ),
}


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
def qrels(mini_scifact):
    return pt.io.read_qrels(str(mini_scifact["qrels"]))


@pytest.fixture(scope="module")
def command_runs(dense_index, bm25_index, mini_scifact, state_file, tmp_path_factory):
    """The search command's run of each search."""
    out = tmp_path_factory.mktemp("pyterrier-runs")
    runs = {}
    for name, (_, flags) in SEARCHES.items():
        runs[name] = out / f"{name}.trec"
        flags = [str(state_file) if f == "STATE" else f for f in flags]
        search_main(
            [
                "--index",
                str(dense_index),
                "--topics",
                str(mini_scifact["topics"]),
                "--output",
                str(runs[name]),
                "--hits",
                str(HITS),
                "--threads",
                "1",
                *flags,
            ]
        )
    return runs


@pytest.mark.parametrize("name", list(SEARCHES))
def test_a_pipeline_ranks_as_the_search_command(name, retriever, topics, command_runs, state_file):
    pipeline = SEARCHES[name][0](retriever, state_file)
    frame = pipeline(topics)
    assert {"qid", "query", "query_vec", "docno", "score", "rank"} <= set(frame.columns)
    assert frame.groupby("qid")["rank"].apply(lambda r: r.tolist() == list(range(len(r)))).all()  # PyTerrier's, from 0
    # written as the command writes a run (6 decimals, ties made strictly decreasing): the same file
    lines = "".join(
        format_run_lines(qid, [Hit(r.docno, r.score) for r in hits.itertuples()], "tour_pyserini")
        for qid, hits in frame.groupby("qid", sort=False)
    )
    assert lines == command_runs[name].read_text()


def test_pt_experiment_gives_the_numbers_of_eval(retriever, topics, command_runs, mini_scifact, capsys):
    from pyterrier.measures import AP, R, nDCG

    metrics = ["nDCG@10", "R@100", "AP"]
    qrels = pt.io.read_qrels(str(mini_scifact["qrels"]))
    names = ["dense", "rocchio", "tour-soft"]
    capsys.readouterr()
    eval_main(
        [
            "--qrels",
            str(mini_scifact["qrels"]),
            "--metrics",
            *metrics,
            "--json",
            "--run",
            *[str(command_runs[n]) for n in names],
        ]
    )
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    expected = np.array([[p[m] for m in metrics] for p in printed])
    measures = [nDCG @ 10, R @ 100, AP]
    on_runs = pt.Experiment(
        [pt.io.read_results(str(command_runs[n])) for n in names], topics, qrels, measures, names=names
    )
    np.testing.assert_allclose(on_runs[metrics].to_numpy(), expected, rtol=0, atol=1e-12)
    pipelines = [SEARCHES[n][0](retriever, None) for n in names]
    on_pipelines = pt.Experiment(pipelines, topics, qrels, measures, names=names)
    np.testing.assert_allclose(on_pipelines[metrics].to_numpy(), expected, rtol=0, atol=1e-9)
    assert not pt.java.started()  # PyTerrier's own JVM never started beside Pyserini's


def test_a_teacher_reranks_as_the_rerank_rewriter(retriever, topics, dense_index, mini_scifact, tmp_path):
    run = tmp_path / "rerank.trec"
    search_main(
        [
            "--index",
            str(dense_index),
            "--topics",
            str(mini_scifact["topics"]),
            "--output",
            str(run),
            "--hits",
            "20",
            "--threads",
            "1",
            "--rewriter",
            "rerank",
            "--teacher",
            "bm25",
            "--depth",
            "20",
        ]
    )
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


def test_bad_input_is_one_line(retriever, topics, qrels, dense_index):
    with pytest.raises(UserError, match=r"works over an index: put it after a Retriever in the pipeline"):
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
    with pytest.raises(ValueError, match="does not expose a parameter named dpeth"):  # PyTerrier's words
        stage = tour(teacher="bm25")
        pt.GridScan(retriever >> stage, {stage: {"dpeth": [5]}}, topics, qrels, ["ndcg_cut_10"])


def test_the_worked_example_of_the_docs_runs(dense_index, mini_scifact, capsys):
    """docs/pyterrier.md's example, on the fixture's index, topics and qrels."""
    text = (ROOT / "docs" / "pyterrier.md").read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    for path, fixture in (
        ("indexes/scifact.minilm", dense_index),
        ("collections/scifact/topics.test.tsv", mini_scifact["topics"]),
        ("qrels/scifact.test.txt", mini_scifact["qrels"]),
    ):
        assert path in code
        code = code.replace(path, str(fixture))
    exec(compile(code, "docs/pyterrier.md", "exec"), {"__name__": "__docs__"})
    printed = capsys.readouterr().out
    assert "nDCG@10" in printed and "tour-soft" in printed


NDCG, RECALL = "ndcg_cut_10", "recall_50"  # trec_eval's names: GridScan's and Experiment's columns
DEPTHS = [5, 20]  # the candidates TOUR's teacher scores


def measured(pipelines, topics, qrels, metric: str) -> list[float]:
    """``metric`` of each pipeline (or result frame), by ``pt.Experiment``."""
    return pt.Experiment(pipelines, topics, qrels, [metric])[metric].tolist()


def test_grid_scan_over_depth_varies_the_stage_the_pipeline_runs(retriever, topics, qrels):
    """Found on the fixture (40 queries, 672 abstracts, 100 hits): nDCG@10 0.8600 at depth 5, 0.8309 at 20."""
    stage = tour(teacher="bm25", depth=10)
    pipeline = retriever >> stage
    assert list(pipeline) == [retriever, stage] and pipeline[1] is stage  # >> puts the object itself in
    scan = pt.GridScan(pipeline, {stage: {"depth": DEPTHS}}, topics, qrels, [NDCG])
    assert scan["tran_0_depth"].tolist() == DEPTHS
    # each value as a pipeline made with it from the start gives it: the scan searched with each depth
    assert scan[NDCG].tolist() == measured(
        [retriever >> tour(teacher="bm25", depth=d) for d in DEPTHS], topics, qrels, NDCG
    )
    assert scan[NDCG].nunique() == len(DEPTHS)  # and the depth changes the ranking
    assert stage.get_parameter("depth") == DEPTHS[-1]


def test_grid_scan_over_num_results_of_a_stage_and_of_the_retriever(retriever, topics, qrels):
    """Found on the fixture: R@50 0.8629 with 5 hits per query, 1.0 with 50 (TOUR, depth 10); 0.8850 and 1.0 for
    the retriever alone."""
    stage = tour(teacher="bm25", depth=10)
    scan = pt.GridScan(retriever >> stage, {stage: {"num_results": [5, 50]}}, topics, qrels, [RECALL])
    fresh = [retriever >> tour(teacher="bm25", depth=10, num_results=n) for n in (5, 50)]
    assert scan[RECALL].tolist() == measured(fresh, topics, qrels, RECALL)
    assert scan[RECALL].nunique() == 2
    try:
        alone = pt.GridScan(retriever, {retriever: {"num_results": [5, 50]}}, topics, qrels, [RECALL])
        assert alone[RECALL].nunique() == 2
        retriever.set_parameter("num_results", 7)
        assert (retriever >> stage)(topics.head(1)).shape[0] == 50  # the stage's own
        stage.set_parameter("num_results", None)  # unset: the retriever's
        assert (retriever >> stage)(topics.head(1)).shape[0] == 7
    finally:
        retriever.set_parameter("num_results", HITS)
    assert (retriever >> stage)(topics.head(1)).shape[0] == HITS


def test_grid_search_sets_the_best_value_on_the_pipeline(retriever, topics, qrels):
    stage = tour(teacher="bm25", depth=10)
    pipeline = retriever >> stage
    fresh = dict(
        zip(DEPTHS, measured([retriever >> tour(teacher="bm25", depth=d) for d in DEPTHS], topics, qrels, NDCG))
    )
    tuned, best, setting = pt.GridSearch(pipeline, {stage: {"depth": DEPTHS}}, topics, qrels, NDCG, return_type="both")
    chosen = max(fresh, key=fresh.get)
    assert tuned is pipeline and setting == [(stage, "depth", chosen)] and best == fresh[chosen]
    assert stage.get_parameter("depth") == chosen
    assert measured([pipeline], topics, qrels, NDCG) == [best]  # the pipeline the user holds now runs the best


def test_a_query_rewrite_before_the_retriever_composes(retriever, topics, qrels):
    """``pt.apply.query(f) >> dense >> tour(...)`` groups as ``(f >> dense) >> tour``: TOUR searches the retriever's
    index with the rewritten queries, as after the retriever alone on rewritten topics."""

    def f(row):
        return row["query"] + " in humans"

    pipeline = pt.apply.query(f) >> retriever >> tour(teacher="bm25", depth=10)
    frame = pipeline(topics)
    assert (frame["query_0"] + " in humans" == frame["query"]).all()  # PyTerrier keeps the query it rewrote
    rewritten = (retriever >> tour(teacher="bm25", depth=10))(topics.assign(query=[f(r) for _, r in topics.iterrows()]))
    assert run_of(frame) == run_of(rewritten)
    assert run_of(frame) != run_of((retriever >> tour(teacher="bm25", depth=10))(topics))
    assert measured([pipeline], topics, qrels, NDCG) == measured([rewritten], topics, qrels, NDCG)


def test_a_stage_composes_wherever_a_transformer_stands(retriever, topics, dense_index):
    def prf():
        return rocchio(prf_depth=5, topk=3, bottomk=1)

    plain = run_of((retriever >> prf())(topics))
    ranked = {q: list(d) for q, d in plain.items()}
    # after another transformer between it and the retriever (which keeps query_vec: Rocchio starts from it)
    assert run_of((retriever >> pt.apply.query(lambda r: r["query"].upper()) >> prf())(topics)) == plain
    # grouped from the right, and cut by %
    assert run_of((retriever >> (prf() >> pt.Transformer.identity()))(topics)) == plain
    cut = run_of((retriever >> prf() % 10)(topics))
    assert {q: list(d) for q, d in cut.items()} == {q: d[:10] for q, d in ranked.items()}
    # a stage after a stage: the index travels with the results
    chained = (retriever >> prf() >> tour(teacher="bm25", depth=10))(topics)
    assert run_of(chained) == run_of((retriever >> prf() >> tour(teacher="bm25", depth=10, index=retriever))(topics))
    # a teacher re-ranks the retriever's cut results with no index=
    assert run_of((retriever % 20 >> TeacherReranker("bm25"))(topics)) == run_of(
        (retriever % 20 >> TeacherReranker("bm25", index=retriever))(topics)
    )
    # one stage in two pipelines follows each one's retriever
    stage, small = prf(), Retriever(dense_index, num_results=7, threads=1)
    assert (small >> stage)(topics).groupby("qid").size().eq(7).all()
    assert run_of((retriever >> stage)(topics)) == plain


def good_value(p: Param, current):
    """A value of ``p`` other than ``current`` that its flag takes (near it: others' limits may depend on it)."""
    if isinstance(p.type, Number):
        near = (2, 0.5) if current is None else (current + 1,) if p.type.kind is int else (current / 2, 0.5)
        return next(v for v in map(p.type.kind, near) if v != current and p.type.refusal(v) is None)
    if p.choices:
        return next(c for c in p.choices if c != current)
    return (not current) if p.type is bool else "runs/x"


def bad_values(p: Param) -> list[tuple[object, str]]:
    """Values of ``p`` its flag refuses, with what the refusal says."""
    if isinstance(p.type, Number):
        if p.type.kind is int:  # a float is no int, as the flag's text "2.5" is none
            return [(v, f"{p.name} {p.type.refusal(v)}") for v in (0, -1) if p.type.refusal(v)] + [
                (2.5, f"{p.name} must be an integer, got 2.5")
            ]
        return [(v, f"{p.name} {p.type.refusal(v)}") for v in (0, -1, float("nan"), 2) if p.type.refusal(v)]
    if p.choices:
        return [("no-such", f"{p.name} must be one of {', '.join(map(str, p.choices))}, got 'no-such'")]
    if p.type is bool:
        return [("yes", f"{p.name} must be true or false, got 'yes'")]
    return [(5, f"{p.name} must be a string")]


def check_parameter(stage, p: Param) -> None:
    """``p`` read, set and refused by name on ``stage``, each refusal one line that changes nothing."""
    before = stage.get_parameter(p.name)
    value = good_value(p, before)
    stage.set_parameter(p.name, value)
    assert stage.get_parameter(p.name) == value
    stage.set_parameter(p.name, before)
    assert stage.get_parameter(p.name) == before
    for bad, says in bad_values(p):
        with pytest.raises(UserError) as refused:
            stage.set_parameter(p.name, bad)
        assert str(refused.value).startswith(says) and "\n" not in str(refused.value), (p.name, bad)
        assert stage.get_parameter(p.name) == before


@pytest.mark.parametrize("name", sorted(n for n in available_rewriters() if n != "none"))
def test_every_option_of_a_rewriter_is_a_parameter(name):
    cls = available_rewriters()[name]
    state = {"state": "runs/unread.safetensors"} if "state" in {p.name for p in cls.options} else {}
    stage = Rewrite(name, teacher="bm25" if cls.needs_teacher else None, **state)
    assert not {p.name for p in cls.options} & {p.name for p in teacher_options()}  # one name, one parameter
    assert not {p.name for p in cls.options} & set(Rewrite("none").parameters())
    config = cls.configure(**state)
    for p in cls.options:
        assert stage.get_parameter(p.name) == getattr(config, p.name)
        check_parameter(stage, p)
    assert {p.name for p in cls.options} | {"rewriter", "teacher", "num_results", "index"} <= set(stage.parameters())


@pytest.mark.parametrize("option", teacher_options(), ids=lambda p: p.name)
def test_every_option_of_a_teacher_is_a_parameter(option):
    kind = next(n for n, c in sorted(available_teachers().items()) if option in c.options)
    for stage in (rerank(teacher=f"{kind}:models/unread"), TeacherReranker(f"{kind}:models/unread")):
        assert stage.get_parameter(option.name) == option.default
        check_parameter(stage, option)
        stage.set_parameter(option.name, None)  # unset: the default
        assert stage.get_parameter("teacher_options") == {} and stage.get_parameter(option.name) == option.default
    with pytest.raises(UserError, match=f"{option.option}: not an option of the bm25 teacher"):
        rerank(teacher="bm25", **{option.name: good_value(option, option.default)})


def test_the_stage_and_retriever_settings_are_parameters(dense_index, topics):
    stage = tour(teacher="bm25", depth=10)
    check_parameter(stage, Param("num_results", positive_int))
    for name, bad, says in (
        ("teacher_max_length", 0, "teacher_max_length must be positive, got 0"),
        ("teacher_precision", "fp64", "teacher_precision must be one of"),
        ("rewriter", "tour-sfot", "unknown rewriter 'tour-sfot'"),
        ("teacher", "bm52", "unknown teacher 'bm52'"),
        ("index", "indexes/x", "index= takes a tour_pyserini.pyterrier.Retriever"),
    ):
        before = stage.get_parameter(name)
        with pytest.raises(UserError, match=says):
            stage.set_parameter(name, bad)
        assert stage.get_parameter(name) == before
    stage.set_parameter("rewriter", "tour-hard")
    assert stage.get_parameter("rewriter") == "tour-hard" and stage.get_parameter("depth") == 10
    retriever = Retriever(dense_index, num_results=7, threads=1)
    assert retriever.get_parameter("index") == str(dense_index) and retriever.get_parameter("threads") == 1
    for name, bad, says in (
        ("num_results", 0, "num_results must be positive, got 0"),
        ("threads", 0, "threads must be positive, got 0"),
        ("bm25_b", 2, "bm25_b must be in [0, 1], got 2"),
        ("ef_search", 16, "--ef-search applies to HNSW indexes"),
        ("doc_vec", "yes", "doc_vec must be true or false, got 'yes'"),
        ("encoder_runtime", "tensorflow", "encoder_runtime must be one of"),
    ):
        before = retriever.get_parameter(name)
        with pytest.raises(UserError, match=re.escape(says)):
            retriever.set_parameter(name, bad)
        assert retriever.get_parameter(name) == before
    pipeline = retriever >> rocchio()
    retriever.set_parameter("num_results", 3)
    assert pipeline(topics).groupby("qid").size().eq(3).all()  # the stage's default: the retriever's, now 3
    retriever.set_parameter("doc_vec", True)
    assert "doc_vec" in retriever(topics.head(1)).columns
