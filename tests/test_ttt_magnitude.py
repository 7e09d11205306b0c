"""The α of a shared state chosen by cross-validation over its rewarded queries: folds, the choice, and a state
that keeps its chosen α through a file."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tour_pyserini.ttt.fitting import RewardedQuery
from tour_pyserini.ttt.magnitude import GRID, MagnitudeConfig, choose_alpha, cross_validated_alpha, fold_of
from tour_pyserini.ttt.objectives import FitConfig
from tour_pyserini.ttt.state import State

D = 32


def unit(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def queries(rng, n: int, shared: bool) -> list[RewardedQuery]:
    """n queries with 8 candidates each, all as far from the query, in random directions; the rewarded one's
    direction is one shared by every query (``shared``) or a random one of its own, like the others'."""
    u = unit(rng.standard_normal(D))
    out = []
    for i in range(n):
        x = unit(rng.standard_normal(D))
        Z = unit(x + 1.2 * unit(rng.standard_normal((8, D))))
        if shared:
            Z[3] = unit(x + 1.2 * u)
        out.append(RewardedQuery("t", str(i), x, Z, np.eye(8)[3] * 4.0))
    return out


def test_folds_hold_out_each_item_once_and_differ_in_size_by_at_most_one():
    fold = fold_of(23, 5, seed=7)
    assert sorted(np.bincount(fold)) == [4, 4, 5, 5, 5]
    assert not np.array_equal(fold, fold_of(23, 5, seed=8)) and np.array_equal(fold, fold_of(23, 5, seed=7))


def test_choice_is_the_best_significant_gain_or_zero():
    base = np.linspace(0.4, 0.6, 12)
    better = np.stack([base, base + 0.05 + 0.01 * np.sin(np.arange(12)), base + 0.1 + 0.01 * np.cos(np.arange(12))], 1)
    choice = choose_alpha(better, (0.25, 0.5))
    assert choice.alpha == 0.5 and choice.gains[0.5] == pytest.approx(0.1 + 0.01 * np.cos(np.arange(12)).mean())
    assert choice.p < 1e-6 and choice.queries == 12
    noisy = np.stack([base, base + 0.2 * np.sin(np.arange(12))], 1)  # mean gain ≈ 0.02, far from significant
    assert choose_alpha(noisy, (0.5,)).alpha == 0.0
    worse = np.stack([base, base - 0.05], 1)
    assert choose_alpha(worse, (0.5,)).alpha == 0.0 and choose_alpha(better[:1], (0.25, 0.5)).alpha == 0.0


def test_a_shared_displacement_is_kept_and_private_ones_are_not():
    rng = np.random.default_rng(0)
    shared = cross_validated_alpha(queries(rng, 40, shared=True), "task", FitConfig())
    assert shared.alpha > 0 and shared.p < 0.05 and shared.gains[shared.alpha] > 0.1 and shared.queries == 40
    private = cross_validated_alpha(queries(rng, 40, shared=False), "task", FitConfig())
    assert private.alpha == 0.0, private.describe()
    with pytest.raises(ValueError, match="global, task and neighbours"):
        cross_validated_alpha(queries(rng, 4, shared=True), "query")


def test_a_chosen_alpha_is_what_the_state_applies_and_survives_its_file(tmp_path):
    rng = np.random.default_rng(1)
    encoder = {"name": "m", "pooling": "mean", "l2_norm": True, "max_length": 256, "weights_sha256": "ab" * 32}
    state = State(
        "task",
        [("t", None)],
        rng.standard_normal((1, D)),
        [9],
        ["t"],
        FitConfig().to_json(),
        encoder,
        chosen_alphas=[GRID[1]],
    )
    assert state.alphas == [0.25] and state.alpha_rule == "cv"
    assert np.array_equal(state.residuals(["q"], "t")[0], 0.25 * state.vectors[0].astype(np.float64))
    state.save(tmp_path / "s.safetensors")
    loaded = State.load(tmp_path / "s.safetensors")
    assert loaded.alphas == [0.25] and loaded.alpha_rule == "cv" and loaded.metadata() == state.metadata()
    counted = State("task", [("t", None)], state.vectors, [9], ["t"], FitConfig().to_json(), encoder)
    counted.save(tmp_path / "c.safetensors")
    assert State.load(tmp_path / "c.safetensors").alphas == [0.9] and counted.alpha_rule == "count"
    ranked = replace(state, provenance={"magnitude": {"rule": "ranking"}})  # α chosen by the re-searched rankings
    ranked.save(tmp_path / "r.safetensors")
    loaded = State.load(tmp_path / "r.safetensors")
    assert loaded.alphas == [0.25] and loaded.alpha_rule == ranked.alpha_rule == "ranking"


def test_the_rule_is_declared_once():
    assert MagnitudeConfig().alpha_rule == "count"
    with pytest.raises(ValueError):
        MagnitudeConfig(alpha_rule="always")
    with pytest.raises(ValueError):
        MagnitudeConfig(cv_folds=1)


def test_auto_chooses_a_shared_scope_for_a_shared_displacement_and_the_query_scope_for_private_ones():
    """One task: its task and global states are the same, so the first tried (task) is chosen; with private
    displacements no shared scope keeps an α, and the query scope moves only the rewarded queries."""
    from tour_pyserini.ttt.magnitude import choose_scope

    rng = np.random.default_rng(0)
    scope, choice, tried = choose_scope(queries(rng, 40, shared=True), FitConfig())
    assert scope == "task" and choice is tried["task"] and choice.alpha > 0
    assert tried["global"].gains == tried["task"].gains
    scope, choice, tried = choose_scope(queries(rng, 40, shared=False), FitConfig())
    assert (scope, choice) == ("query", None) and all(c.alpha == 0 for c in tried.values()), tried


def test_judged_ndcg_counts_an_unjudged_document_as_gaining_nothing():
    from tour_pyserini.ttt.agreement import judged_ndcg

    gains = {"a": 1.0, "b": 0.5, "c": 0.0}
    assert judged_ndcg(["a", "b", "c"], gains) == 1.0
    assert judged_ndcg(["new", "a", "b"], gains) == pytest.approx(
        (1 / np.log2(3) + 0.5 / np.log2(4)) / (1 + 0.5 / np.log2(3))
    )
    assert np.isnan(judged_ndcg(["a"], {"a": 0.0}))  # nothing rewarded: no verdict


def test_the_ranking_rule_sees_the_unjudged_documents_a_state_pulls_into_the_top_10():
    """Each query's nearest candidate and one along a shared direction u are rewarded; unjudged documents near the
    query and further along u wait outside its top 10. Moving along u orders the judged candidates ever better, so
    the agreement keeps a long move; re-searched, the long move lets the unjudged ones push the nearest candidate
    down, so the ranking rule keeps a shorter one."""
    rng = np.random.default_rng(0)
    u = unit(rng.standard_normal(D))
    queries, rows, names = [], [], []
    for i in range(40):
        x = unit(rng.standard_normal(D))
        x = unit(x - (x @ u) * u)
        Z = unit(x + 1.2 * unit(rng.standard_normal((8, D))))
        Z[0], Z[3] = unit(x + 0.3 * unit(rng.standard_normal(D))), unit(x + 1.2 * u)
        docids = tuple(f"{i}.{j}" for j in range(8))
        rows += [Z, unit(x + 1.2 * u + 0.6 * unit(rng.standard_normal((6, D))))]
        names += [*docids, *(f"{i}.unjudged{j}" for j in range(6))]
        queries.append(RewardedQuery("t", str(i), x, Z, np.array([3, 0, 0, 4, 0, 0, 0, 0.0]), docids))
    index = np.concatenate(rows)

    def search(task, vectors):  # exact inner-product search of the index above
        return [[names[k] for k in np.argsort(-row)[:10]] for row in vectors @ index.T]

    agreement = cross_validated_alpha(queries, "task", FitConfig())
    ranking = cross_validated_alpha(queries, "task", FitConfig(), MagnitudeConfig(alpha_rule="ranking"), search=search)
    assert agreement.alpha == 0.75 and agreement.gains[1.0] >= agreement.gains[0.75] and agreement.rule == "cv"
    assert ranking.alpha == 0.5 and ranking.gains[1.0] < ranking.gains[0.5] and ranking.rule == "ranking"
    with pytest.raises(ValueError, match="pass search"):
        cross_validated_alpha(queries, "task", FitConfig(), MagnitudeConfig(alpha_rule="ranking"))
