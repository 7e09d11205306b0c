"""A new rewriter is one class: registered, its options are flags of the search command, parameters of a REST
request and of an MCP search, PyTerrier parameters, and bounded by what they are (their role), not by their
names: a server bounds an option it has never heard of by its --max-candidates."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from tour_pyserini.errors import UserError
from tour_pyserini.numbers import Role, param, positive_int
from tour_pyserini.results import SearchResult, timed
from tour_pyserini.rewriters import REWRITERS, QueryBatch, Rewriter, VectorIndex


@dataclass(frozen=True)
class FeedbackConfig:
    feedback_docs: int = param(3, positive_int, "documents averaged into the query", role=Role.CANDIDATES)


class FeedbackToy(Rewriter):
    """Average PRF under another name for its feedback count: the query moved to the mean of itself and its first
    ``feedback_docs`` documents, then the whole index searched again."""

    name = "toy-feedback"
    Config = FeedbackConfig

    def rewrite(self, batch: QueryBatch, index: VectorIndex, hits: int) -> list[SearchResult]:
        self.check_index(index)
        with timed(batch.traces, "search"):
            first = index.search_candidates(batch.vectors, self.config.feedback_docs)
            moved = np.stack([np.vstack([q, c.vectors]).mean(axis=0) for q, c in zip(batch.vectors, first)])
            rankings = index.search_vectors(moved.astype(np.float32), hits)
        return [SearchResult(q, r, t) for q, r, t in zip(batch.qids, rankings, batch.traces)]


@pytest.fixture
def toy(monkeypatch):
    """The toy rewriter, registered for this test only."""
    REWRITERS.all()  # the package's own first, so that the toy is one more
    monkeypatch.setitem(REWRITERS._classes, FeedbackToy.name, FeedbackToy)
    return FeedbackToy


pytestmark = pytest.mark.slow


def test_a_registered_rewriters_option_is_a_flag_a_request_parameter_and_a_pyterrier_parameter(
    toy, dense_index, mini_scifact, tmp_path
):
    from tour_pyserini.commands.search import main, parser
    from tour_pyserini.files.runs import read_run
    from tour_pyserini.pipeline import SearchSpec, build, plan

    assert "--feedback-docs" in parser().format_help()
    common = ["--index", str(dense_index), "--topics", str(mini_scifact["topics"]), "--hits", "10"]
    main([*common, "--rewriter", "toy-feedback", "--feedback-docs", "2", "--output", str(tmp_path / "toy.trec")])
    run = read_run(tmp_path / "toy.trec")
    spec = SearchSpec(str(dense_index), rewriter="avg-prf", rewriter_options={"prf_depth": 2})
    texts = {q: t for q, t in (line.split("\t") for line in mini_scifact["topics"].read_text().splitlines())}
    prf = build(plan(spec)).run(list(texts.values()), list(texts), 10)
    ranked = {q: sorted(run[q], key=run[q].get, reverse=True) for q in run}
    assert ranked == {r.qid: [h.docid for h in r.hits] for r in prf}  # avg-prf under another name
    too_many = SearchSpec(str(dense_index), rewriter="toy-feedback", rewriter_options={"feedback_docs": 10**6})
    with pytest.raises(UserError, match="feedback_docs 1000000 is larger than the index"):
        plan(too_many)  # the candidates-versus-index rule reads the role

    from tour_pyserini.pyterrier import Retriever, Rewrite, topics_frame

    stage = Rewrite("toy-feedback", feedback_docs=2)
    pipeline = Retriever(dense_index, num_results=10) >> stage
    assert stage.get_parameter("feedback_docs") == 2
    stage.set_parameter("feedback_docs", 5)
    assert stage.get_parameter("feedback_docs") == 5
    with pytest.raises(UserError, match="feedback_docs must be positive, got 0"):
        stage.set_parameter("feedback_docs", 0)
    assert len(pipeline.transform(topics_frame(mini_scifact["topics"]))) == 10 * len(texts)


def test_a_server_bounds_the_new_option_by_its_role_without_a_line_of_its_own(toy, dense_index):
    from tour_pyserini.commands.serve import access_config, parser, serve_config
    from tour_pyserini.serve.requests import BadRequest, RequestLimits
    from tour_pyserini.serve.service import SearchService

    args = parser().parse_args(["--index", str(dense_index), "--threads", "1", "--no-mcp"])
    service = SearchService(serve_config(args, access_config(args)), requests=RequestLimits(max_candidates=8))
    service.start()
    try:
        request = service.check_search(
            dense_index.name, {"query": "bone density", "rewriter": "toy-feedback", "feedback-docs": "8"}
        )
        assert request.plan.rewriter_config.feedback_docs == 8
        for value, message in [
            ("9", "parameter 'feedback-docs' (9) is above this server's maximum of 8"),
            ("many", "parameter 'feedback-docs' must be an integer, got 'many'"),
        ]:
            with pytest.raises(BadRequest) as refused:
                service.check_search(
                    dense_index.name, {"query": "a", "rewriter": "toy-feedback", "feedback-docs": value}
                )
            assert str(refused.value) == message
    finally:
        service.close()
