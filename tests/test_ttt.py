"""TTT-Embed's pure core: objectives against torch autograd, allocation, rewards and state files."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tour_pyserini.errors import UserError
from tour_pyserini.ttt.allocation import allocate, query_order
from tour_pyserini.ttt.fitting import RewardedQuery, fit_scope, pad, scope_plan
from tour_pyserini.ttt.objectives import (
    FitConfig,
    Problem,
    fit_targets,
    logit_gradients,
    masked_log_softmax,
    normalise_rewards,
)
from tour_pyserini.ttt.rewards import Rewards, TaskSource, read_rewards, write_rewards
from tour_pyserini.ttt.state import State, alpha

D = 16


def unit_rows(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def rewarded(rng, task, qid, k=5):
    return RewardedQuery(
        task,
        qid,
        unit_rows(rng.standard_normal(D)),
        unit_rows(rng.standard_normal((k, D))),
        rng.standard_normal(k) * 7 + 3,
    )


def torch_losses(V, X, Z, R, mask, group, config):
    """The objectives written directly from their equations, for torch autograd (per-query losses)."""
    X, Z, R, mask = (torch.as_tensor(a) for a in (X, Z, R, mask))
    xt = X + V[torch.as_tensor(group)]
    xt = xt / xt.norm(dim=-1, keepdim=True)
    log_p = ((Z @ xt[:, :, None])[:, :, 0] / config.tau_student).masked_fill(~mask, -torch.inf).log_softmax(-1)
    log_p = log_p.masked_fill(~mask, 0.0)
    log_t = (R / config.tau_teacher).masked_fill(~mask, -torch.inf).log_softmax(-1).masked_fill(~mask, 0.0)
    if config.objective == "kd":
        return (log_t.exp() * (log_t - log_p)).sum(-1)
    if config.objective == "rkl":
        return (log_p.exp() * (log_p - log_t)).sum(-1)
    x0 = X / X.norm(dim=-1, keepdim=True)
    log_ref = ((Z @ x0[:, :, None])[:, :, 0] / config.tau_student).masked_fill(~mask, -torch.inf).log_softmax(-1)
    log_ref = log_ref.masked_fill(~mask, 0.0)
    n = mask.sum(-1, keepdim=True)
    mean = (R * mask).sum(-1, keepdim=True) / n
    std = (((R - mean) * mask) ** 2).sum(-1, keepdim=True).div(n).sqrt()
    A = (R - mean) / std.clamp_min(config.std_floor) * mask
    ratio = (log_p - log_ref).exp()
    surrogate = torch.minimum(ratio * A, ratio.clamp(1 - config.clip, 1 + config.clip) * A)
    return -(log_ref.exp() * surrogate * mask).sum(-1)


@pytest.mark.parametrize("objective", ["kd", "rkl", "grpo"])
@pytest.mark.parametrize("scope", ["global", "query"])
@pytest.mark.parametrize("many_groups", [32, 0], ids=["per-group-products", "batched-products"])
def test_gradient_equals_torch_autograd(objective, scope, many_groups, monkeypatch):
    """The closed-form gradient of the whole fitting loss, ragged candidate lists and weights included."""
    monkeypatch.setattr(Problem, "MANY_GROUPS", many_groups)  # both ways of computing the products
    rng = np.random.default_rng(0)
    queries = [rewarded(rng, "a", "q0", k=5), rewarded(rng, "b", "q1", k=3), rewarded(rng, "a", "q2", k=4)]
    config = FitConfig(objective=objective, clip=0.5)  # some ratios leave the clip range, some stay inside
    keys, group, weights, _ = scope_plan(queries, scope)
    X, Z, R, mask = pad(queries)
    Z = Z.astype(np.float64)  # float32 as an index stores it; the check runs in float64
    V0 = rng.standard_normal((len(keys), D)) * 0.4
    problem = Problem(X, Z, R, mask, group, weights, len(keys), dtype=np.float64)  # in group order already
    S, norm = problem.scores(V0)
    targets = fit_targets(problem, config)
    log_p = masked_log_softmax(S / config.tau_student, problem.mask)
    G = logit_gradients(log_p, problem.mask, config, **targets) * weights[:, None] / config.tau_student
    grad = problem.gradient(V0, S, norm, G)
    V = torch.tensor(V0, requires_grad=True)
    (torch.as_tensor(weights) * torch_losses(V, X, Z, R, mask, group, config)).sum().backward()
    assert np.allclose(grad, V.grad.numpy(), rtol=1e-9, atol=1e-12)
    if objective == "grpo":  # the clip is active for some candidates, or the test would not test it
        ratio = np.exp(log_p - targets["log_ref"])[problem.mask]
        assert (np.abs(ratio - 1) > config.clip).any() and (np.abs(ratio - 1) < config.clip).any()
    if scope == "query":  # no component along the current query direction
        xt = unit_rows(X + V0)
        assert np.abs((grad * xt).sum(-1)).max() < 1e-12


@pytest.mark.parametrize("n", [0, 1, 2, 3, 9, 1000])
def test_alpha_is_n_over_n_plus_one_exactly(n):
    assert alpha(n) == n / (n + 1)
    state = State("task", [("a", None)], np.zeros((1, 2)), [n], ["a"], {}, {})
    assert state.alphas == [n / (n + 1)]


def test_reward_normalisation_is_scale_free():
    scores = np.array([3.0, -1.0, 7.0, 7.0])
    assert normalise_rewards(scores).tolist() == [0.5, 0.0, 1.0, 1.0]
    assert np.allclose(normalise_rewards(40 * scores - 11), normalise_rewards(scores))
    assert normalise_rewards(np.array([2.0, 2.0])).tolist() == [0.0, 0.0]  # no preference, no target


TASKS = [[f"a{i}" for i in range(30)], [f"b{i}" for i in range(100)], [f"c{i}" for i in range(7)]]
BUDGETS = [0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100]


def test_allocation_is_nested_and_exact():
    n = sum(map(len, TASKS))
    previous: set = set()
    for budget in BUDGETS:
        pairs = allocate(TASKS, budget)
        assert len(pairs) == int(np.floor(budget * n + 0.5)) == len(set(pairs))
        assert previous <= set(pairs)
        assert pairs == allocate(TASKS, budget)  # same pairs whoever asks
        previous = set(pairs)
    assert len(previous) == n * 100  # b = 100 judges the whole base top-100


def test_allocation_water_fills_task_by_task():
    order = query_order(TASKS)
    assert [t for t, _ in order[:9]] == [0, 1, 2] * 3  # one query from each task in turn
    assert [t for t, _ in order[21:24]] == [0, 1, 0]  # task 2 ran out after 7 queries
    assert {q for t, q in order if t == 2} == set(TASKS[2]) and len(order) == 137
    perm = np.random.default_rng(1001).permutation(100)
    assert [q for t, q in order if t == 1][:5] == [f"b{i}" for i in perm[:5]]
    pairs = allocate(TASKS, 1.0)  # 137 pairs: 13 queries with their top-10, then 7 of the next query
    assert [p.rank for p in pairs[:10]] == list(range(10)) and len({p.qid for p in pairs}) == 14
    shallow = allocate(TASKS, 2.0, depth=2)  # breadth: every query, top-2
    assert {p.rank for p in shallow} == {0, 1} and len({p.qid for p in shallow}) == 137
    with pytest.raises(ValueError, match="budget"):
        allocate(TASKS, 101)


def test_scope_weights_balance_tasks():
    rng = np.random.default_rng(1)
    queries = [rewarded(rng, "big", f"q{i}") for i in range(6)] + [rewarded(rng, "small", "s0")]
    keys, group, weights, counts = scope_plan(queries, "global")
    assert keys == [(None, None)] and counts == [7]
    assert weights[:6].sum() == pytest.approx(0.5) and weights[6] == pytest.approx(0.5)
    keys, group, weights, counts = scope_plan(queries, "task")
    assert keys == [("big", None), ("small", None)] and counts == [6, 1] and group.tolist() == [0] * 6 + [1]
    assert weights.tolist() == pytest.approx([1 / 6] * 6 + [1.0])


def test_fitting_groups_together_equals_fitting_each_alone():
    rng = np.random.default_rng(2)
    queries = [rewarded(rng, "t", f"q{i}", k=3 + i) for i in range(3)]
    config = FitConfig(steps=50)
    keys, V, counts = fit_scope(queries, "query", config)
    assert keys == [("t", "q0"), ("t", "q1"), ("t", "q2")] and counts == [1, 1, 1]
    for i, q in enumerate(queries):
        _, alone, _ = fit_scope([q], "query", config)
        # float32 products sum padded and unpadded lists in different orders: rounding, not coupling
        assert np.allclose(V[i], alone[0], rtol=0, atol=1e-6)


def test_warm_start_begins_at_the_given_residuals_and_keeps_fitting_the_same_loss():
    rng = np.random.default_rng(5)
    queries = [rewarded(rng, "t", f"q{i}") for i in range(6)]
    keys, V, _ = fit_scope(queries, "task", FitConfig())
    _, same, _ = fit_scope(queries, "task", FitConfig(steps=0), init=dict(zip(keys, V)))
    assert np.array_equal(same, V)
    _, fresh, _ = fit_scope(queries, "task", FitConfig(steps=0), init={("another task", None): V[0]})
    assert not fresh.any()  # keys the init does not hold start at 0
    # the last 100 steps of a 300-step fit, restarted from where the first 200 ended, land where it does
    # (up to Adam's moments, which a warm start begins afresh)
    _, first, _ = fit_scope(queries, "task", FitConfig(steps=200))
    _, warm, _ = fit_scope(queries, "task", FitConfig(steps=100), init=dict(zip(keys, first)))
    _, cold, _ = fit_scope(queries, "task", FitConfig(steps=100))
    assert np.linalg.norm(warm - V) < 0.5 * np.linalg.norm(cold - V)


@pytest.mark.parametrize("objective", ["kd", "rkl", "grpo"])
def test_each_objective_moves_towards_the_rewarded_candidate(objective):
    rng = np.random.default_rng(3)
    x = unit_rows(rng.standard_normal(D))
    Z = unit_rows(rng.standard_normal((4, D)))
    assert np.argsort(-(Z @ x)).tolist()[:2] == [0, 1]
    q = RewardedQuery("t", "q", x, Z, np.array([0.0, 5.0, 0.0, 0.0]))  # the teacher prefers the second
    _, V, _ = fit_scope([q], "query", FitConfig(objective=objective))
    assert np.argmax(Z @ unit_rows(x + V[0])) == 1
    flat = RewardedQuery("t", "q", x, Z, np.ones(4))
    _, V, _ = fit_scope([flat], "query", FitConfig(objective=objective))
    if objective == "grpo":  # no preference, no advantage: only the ridge acts and v stays 0
        assert np.abs(V).max() < 1e-6
    else:  # the distillation target is uniform: the student's scores spread less
        assert np.ptp(Z @ unit_rows(x + V[0])) < np.ptp(Z @ x)


def test_state_round_trips_bit_exactly(tmp_path):
    rng = np.random.default_rng(4)
    state = State(
        "query",
        [("scifact", "1"), ("nq", "7")],
        rng.standard_normal((2, D)),
        [1, 1],
        ["scifact", "nq"],
        FitConfig().to_json(),
        {"name": "m", "pooling": "mean", "l2_norm": True, "max_length": 256, "weights_sha256": "ab" * 32},
        {"r.tsv": {"teacher": "bm25"}},
    )
    state.save(tmp_path / "s.safetensors")
    loaded = State.load(tmp_path / "s.safetensors")
    assert loaded.vectors.tobytes() == state.vectors.tobytes() and loaded.vectors.dtype == np.float32
    assert loaded.metadata() == state.metadata() and loaded.keys == state.keys
    loaded.save(tmp_path / "again.safetensors")
    assert (tmp_path / "again.safetensors").read_bytes() == (tmp_path / "s.safetensors").read_bytes()
    residuals = loaded.residuals(["7", "8"], "nq")
    assert np.array_equal(residuals[0], 0.5 * state.vectors[1].astype(np.float64)) and not residuals[1].any()
    with pytest.raises(UserError, match="choose one"):
        loaded.residuals(["7"], None)
    other = {**state.encoder, "weights_sha256": "cd" * 32}
    with pytest.raises(UserError, match="fitted for encoder m") as refused:
        loaded.check_encoder(other, "state s.safetensors")
    assert "\n" not in str(refused.value)
    (tmp_path / "junk.safetensors").write_text("not a state")
    with pytest.raises(UserError, match="not a safetensors state file"):
        State.load(tmp_path / "junk.safetensors")


def test_rewards_file_round_trip_and_errors(tmp_path):
    rewards = Rewards(tasks={"sf": TaskSource("sf", "indexes/sf", "topics.tsv")})
    rewards.add("sf", "q1", "d1", np.float64(2.5))
    rewards.add("sf", "q1", "d2", -1e-3)
    write_rewards(tmp_path / "r.tsv", rewards, {"teacher": "bm25"})
    back = read_rewards([tmp_path / "r.tsv"])
    assert back.judgments == {"sf": {"q1": {"d1": 2.5, "d2": -1e-3}}} and back.tasks == rewards.tasks
    assert back.provenance[str(tmp_path / "r.tsv")]["teacher"] == "bm25"
    bad = tmp_path / "bad.tsv"
    for body, message in [
        ("q1\td1\tx\tsf", "bad.tsv:2: reward 'x' is not a number"),
        ("q1\td1\t1.0\tother", "bad.tsv:2: task 'other' is not declared"),
        ("q1\td1\t1.0", "bad.tsv:2: expected"),
        ("q1\td1\t1\tsf\nq1\td1\t2\tsf", "bad.tsv:3: a second reward"),
    ]:
        bad.write_text(f"# task: sf\tindexes/sf\ttopics.tsv\n{body}\n")
        with pytest.raises(UserError, match=message):
            read_rewards([bad])
