"""The ttt-embed rewriter on a real index: what normalisation preserves, no-op states, refusals."""

from __future__ import annotations

import numpy as np
import pytest

from tour_pyserini.encoders import encoder_identity
from tour_pyserini.errors import UserError
from tour_pyserini.rewriters import Identity, QueryBatch
from tour_pyserini.rewriters.ttt_embed import TttEmbed
from tour_pyserini.ttt.objectives import FitConfig
from tour_pyserini.ttt.state import State, shift_queries

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def batch(searcher, mini_scifact):
    from tour_pyserini.files import read_topics

    topics = read_topics(mini_scifact["topics"])[:12]
    return QueryBatch([t.qid for t in topics], [t.text for t in topics], searcher.encode([t.text for t in topics]))


def doc_matrix(searcher):
    index = searcher.faiss.index
    return index.reconstruct_n(0, index.ntotal).astype(np.float64)


def save_state(path, searcher, scope, keys, vectors, counts, tasks, encoder=None):
    State(
        scope, keys, vectors, counts, tasks, FitConfig().to_json(), encoder or encoder_identity(searcher.encoder)
    ).save(path)
    return path


def test_normalised_query_ranks_as_the_unnormalised_sum(searcher, batch):
    """unit(x + αv)·z = (x·z + α v·z) / ‖x + αv‖: for each query the same positive factor for every document.

    Exact in real arithmetic; in float64 the two score lists are proportional to 1e-12 and sort into
    the same order; the float32 FAISS search returns that order except where two documents' scores
    differ by less than float32 rounding (none here).
    """
    rng = np.random.default_rng(0)
    Z = doc_matrix(searcher)
    v, a = rng.standard_normal(searcher.dimension) * 0.2, 0.75
    for x in batch.vectors.astype(np.float64):
        u = x + a * v
        normalised, summed = Z @ (u / np.linalg.norm(u)), Z @ x + a * (Z @ v)
        assert np.allclose(normalised * np.linalg.norm(u), summed, rtol=0, atol=1e-12)
        assert np.array_equal(np.argsort(-normalised, kind="stable"), np.argsort(-summed, kind="stable"))
    shifted = shift_queries(batch.vectors, np.tile(a * v, (len(batch), 1)))
    docids = searcher.faiss.docids
    for x, hits in zip(batch.vectors.astype(np.float64), searcher.search_vectors(shifted, 50)):
        summed = Z @ x + a * (Z @ v)
        expected = [docids[i] for i in np.argsort(-summed, kind="stable")[:50]]
        assert [h.docid for h in hits] == expected


def test_a_state_that_moves_nothing_gives_the_plain_run(searcher, batch, tmp_path):
    zero = save_state(
        tmp_path / "zero.safetensors",
        searcher,
        "global",
        [(None, None)],
        np.zeros((1, searcher.dimension)),
        [5],
        ["mini"],
    )
    plain = searcher.retrieve_vectors(batch.texts, batch.qids, batch.vectors, 100, rewriter=Identity())
    moved = searcher.retrieve_vectors(batch.texts, batch.qids, batch.vectors, 100, rewriter=TttEmbed(zero))
    for rewritten, base in zip(moved, plain):
        assert [(h.docid, h.score) for h in rewritten.hits] == [(h.docid, h.score) for h in base.hits]


def test_a_query_state_moves_only_its_queries(searcher, batch, tmp_path):
    rng = np.random.default_rng(1)
    rewarded = batch.qids[0]
    path = save_state(
        tmp_path / "query.safetensors",
        searcher,
        "query",
        [("mini", rewarded)],
        rng.standard_normal((1, searcher.dimension)),
        [1],
        ["mini"],
    )
    plain = searcher.retrieve_vectors(batch.texts, batch.qids, batch.vectors, 20, rewriter=Identity())
    moved = searcher.retrieve_vectors(batch.texts, batch.qids, batch.vectors, 20, rewriter=TttEmbed(path, task="mini"))
    assert [h.docid for h in moved[0].hits] != [h.docid for h in plain[0].hits]
    for rewritten, base in zip(moved[1:], plain[1:]):
        assert [(h.docid, h.score) for h in rewritten.hits] == [(h.docid, h.score) for h in base.hits]


def test_states_for_another_encoder_or_task_are_refused(searcher, batch, tmp_path, dense_index, mini_scifact):
    other = {**encoder_identity(searcher.encoder), "weights_sha256": "0" * 64}
    path = save_state(
        tmp_path / "other.safetensors",
        searcher,
        "task",
        [("a", None), ("b", None)],
        np.ones((2, searcher.dimension)),
        [3, 4],
        ["a", "b"],
        encoder=other,
    )
    with pytest.raises(UserError, match="choose one"):
        TttEmbed(path)
    with pytest.raises(UserError, match="no task 'c'"):
        TttEmbed(path, task="c")
    with pytest.raises(UserError, match="was fitted for encoder"):
        searcher.retrieve_vectors(batch.texts, batch.qids, batch.vectors, 10, rewriter=TttEmbed(path, task="a"))
    # on the command line, before the query encoder loads
    from test_cli import run_module

    out = tmp_path / "run.trec"
    proc = run_module(
        "tour_pyserini.search",
        "--index",
        str(dense_index),
        "--topics",
        str(mini_scifact["topics"]),
        "--output",
        str(out),
        "--rewriter",
        "ttt-embed",
        "--state",
        str(path),
        "--task",
        "a",
    )
    assert proc.returncode == 2 and "Loading weights" not in proc.stderr, proc.stderr[-2000:]
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: --state {path} was fitted for encoder") and not out.exists()


def test_tour_starts_from_the_states_moved_query(searcher, batch, tmp_path, mini_scifact):
    """With lr 0 TOUR never moves its query, so its teacher ranks the top-k of the search it starts from:
    with a state, that of unit(x + alpha v) (the ttt-embed rewriter's), without one that of x."""
    from tour_pyserini.rewriters.tour import TourHard
    from tour_pyserini.teachers import get_teacher

    rng = np.random.default_rng(2)
    path = save_state(
        tmp_path / "global.safetensors",
        searcher,
        "global",
        [(None, None)],
        rng.standard_normal((1, searcher.dimension)) * 0.3,
        [5],
        ["mini"],
    )
    oracle = get_teacher(f"oracle:{mini_scifact['qrels']}")
    k = 10

    def heads(rewriter):
        results = searcher.retrieve_vectors(batch.texts, batch.qids, batch.vectors, 30, rewriter=rewriter)
        return [sorted(h.docid for h in r.hits[:k]) for r in results]

    moved = [
        sorted(h.docid for h in r.hits[:k])
        for r in searcher.retrieve_vectors(batch.texts, batch.qids, batch.vectors, k, rewriter=TttEmbed(path))
    ]
    plain = [
        sorted(h.docid for h in r.hits[:k])
        for r in searcher.retrieve_vectors(batch.texts, batch.qids, batch.vectors, k, rewriter=Identity())
    ]
    assert moved != plain
    assert heads(TourHard(oracle, depth=k, lr=0.0, state=str(path))) == moved
    assert heads(TourHard(oracle, depth=k, lr=0.0)) == plain
    with pytest.raises(UserError, match="--task picks the task of a --state"):
        TourHard(oracle, task="mini")
