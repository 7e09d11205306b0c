"""The neighbours scope: an unseen query mixes the query states of the rewarded queries nearest it."""

from __future__ import annotations

import numpy as np
import pytest

from tour_pyserini.commands.runner import run_cli
from tour_pyserini.commands.ttt import main
from tour_pyserini.rewriters import QueryBatch
from tour_pyserini.rewriters.ttt_embed import TttEmbed
from tour_pyserini.ttt.fitting import RewardedQuery, fit_scope
from tour_pyserini.ttt.neighbours import NeighbourConfig, mix
from tour_pyserini.ttt.objectives import FitConfig
from tour_pyserini.ttt.state import State, shift_queries

ENCODER = {"name": "m", "pooling": "mean", "l2_norm": True, "max_length": 256, "weights_sha256": "ab" * 32}


def test_mix_is_a_softmax_over_the_nearest_anchors_by_cosine():
    X = np.array([[2.0, 0.0]])  # cosine, not the inner product: its length does not matter
    anchors = np.array([[1.0, 0.0], [0.0, 3.0], [-1.0, 0.0]])
    residuals = np.array([[1.0, 0.0], [0.0, 2.0], [5.0, 5.0]])
    e = np.e
    got = mix(X, anchors, residuals, NeighbourConfig(neighbours=2, neighbour_temperature=1.0))
    assert got == pytest.approx(np.array([[e / (e + 1), 2 / (e + 1)]]), abs=1e-12)  # cosines 1 and 0; -1 is not near
    sharp = mix(X, anchors, residuals, NeighbourConfig(neighbours=3, neighbour_temperature=0.01))
    assert sharp == pytest.approx(residuals[:1], abs=1e-12)  # a cold softmax: the nearest alone
    assert not mix(X, anchors[:0], residuals[:0], NeighbourConfig()).any()


def test_a_neighbours_state_moves_each_query_by_its_neighbours_and_survives_its_file(tmp_path):
    rng = np.random.default_rng(0)
    anchors, V = rng.standard_normal((4, 8)), rng.standard_normal((4, 8))
    keys = [("a", "1"), ("a", "2"), ("a", "3"), ("b", "9")]
    state = State(
        "neighbours",
        keys,
        V,
        [1] * 4,
        ["a", "b"],
        FitConfig().to_json(),
        ENCODER,
        anchors=anchors,
        mixing=NeighbourConfig(neighbours=2),
    )
    X = rng.standard_normal((3, 8))
    expected = mix(
        X,
        anchors[:3].astype(np.float32),
        0.5 * V[:3].astype(np.float32).astype(np.float64),
        NeighbourConfig(neighbours=2),
    )
    assert np.array_equal(state.residuals(["x", "y", "z"], "a", X), expected)  # task a's anchors only, α = 1/2
    state.save(tmp_path / "n.safetensors")
    loaded = State.load(tmp_path / "n.safetensors")
    assert loaded.mixing == NeighbourConfig(neighbours=2) and loaded.anchors.tobytes() == state.anchors.tobytes()
    assert np.array_equal(loaded.residuals(["x", "y", "z"], "a", X), expected)
    with pytest.raises(ValueError, match="by their vectors"):
        loaded.residuals(["x"], "a")
    with pytest.raises(ValueError, match="needs the vector of each rewarded query"):
        State("neighbours", keys, V, [1] * 4, ["a", "b"], FitConfig().to_json(), ENCODER)


def test_fitted_neighbours_are_query_states(tmp_path):
    rng = np.random.default_rng(1)
    queries = [
        RewardedQuery("t", str(i), rng.standard_normal(8), rng.standard_normal((5, 8)), rng.standard_normal(5))
        for i in range(6)
    ]
    assert np.array_equal(fit_scope(queries, "neighbours")[1], fit_scope(queries, "query")[1])


@pytest.mark.slow
def test_fit_search_and_refusals_from_the_command_line(
    dense_index, bm25_index, mini_scifact, searcher, tmp_path, capsys
):
    from tour_pyserini.files import read_topics

    rewards, state_file = tmp_path / "r.tsv", tmp_path / "n.safetensors"
    main(
        [
            "rewards",
            "--index",
            str(dense_index),
            "--topics",
            str(mini_scifact["topics"]),
            "--teacher",
            "bm25",
            "--budget",
            "2",
            "--task",
            "mini",
            "--output",
            str(rewards),
        ]
    )
    main(["fit", "--rewards", str(rewards), "--output", str(state_file), "--scope", "neighbours", "--neighbours", "3"])
    state = State.load(state_file)
    assert state.scope == "neighbours" and len(state.keys) == 8 and state.mixing.neighbours == 3
    topics = read_topics(mini_scifact["topics"])
    vectors = searcher.encode([t.text for t in topics])
    batch = QueryBatch([t.qid for t in topics], [t.text for t in topics], vectors)
    moved = searcher.retrieve_vectors(batch.texts, batch.qids, vectors, 10, rewriter=TttEmbed(state_file))
    by_hand = searcher.search_vectors(shift_queries(vectors, state.residuals(batch.qids, "mini", vectors)), 10)
    assert [[h.docid for h in r.hits] for r in moved] == [[h.docid for h in hits] for hits in by_hand]
    unjudged = [i for i, t in enumerate(topics) if ("mini", t.qid) not in state.keys]
    assert unjudged and any(state.residuals([topics[i].qid for i in unjudged], "mini", vectors[unjudged]).any(axis=1))
    with pytest.raises(SystemExit) as exited:
        run_cli(
            main,
            [
                "fit",
                "--rewards",
                str(rewards),
                "--output",
                str(tmp_path / "t.safetensors"),
                "--scope",
                "task",
                "--neighbours",
                "3",
            ],
        )
    assert exited.value.code == 2 and "this fit is of the task scope" in capsys.readouterr().err
