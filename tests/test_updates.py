"""The rewriters' math against hand-computed values, closed forms and PyTorch's own optimiser."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tour_pyserini.results import Hit
from tour_pyserini.rewriters.base import rerank_head
from tour_pyserini.rewriters.updates import (
    LOG_CLAMP,
    aggregate,
    average_prf,
    clip_by_norm,
    hard_loss_and_grad,
    linear_lr,
    nucleus,
    rocchio,
    sgd_step,
    soft_loss_and_grad,
    softmax,
)

Q = np.array([1.0, 0.0])
C = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])  # scores with Q: 1, 0, -1


def numeric_grad(f, q, eps=1e-6):
    return np.array([(f(q + eps * e) - f(q - eps * e)) / (2 * eps) for e in np.eye(len(q))])


def test_softmax_known_values():
    assert np.allclose(softmax([0.0, np.log(3.0)]), [0.25, 0.75])
    assert np.allclose(softmax([1.0, 2.0], temperature=0.5), softmax([2.0, 4.0]))


@pytest.mark.parametrize(
    "probs, p, expected",
    [
        ([0.1, 0.6, 0.3], 0.5, [1]),  # the teacher's top-1 alone reaches p
        ([0.1, 0.6, 0.3], 0.7, [1, 2]),
        ([0.1, 0.6, 0.3], 0.9, [1, 2]),  # exactly p (0.6 + 0.3) stops there
        ([0.25, 0.25, 0.25, 0.25], 0.5, [0, 1]),  # ties keep retrieval order
        ([1 / 3, 1 / 3, 1 / 3], 0.5, [0, 1]),  # all-equal scores
        ([0.2, 0.3, 0.5], 1.0, [2, 1, 0]),  # p = 1 takes everything despite rounding
        ([0.7, 0.2, 0.1], 0.1, [0]),  # the top-1 is always in
    ],
)
def test_nucleus_hand_made(probs, p, expected):
    assert nucleus(np.array(probs), p).tolist() == expected


def test_nucleus_rejects_bad_p():
    with pytest.raises(ValueError, match="nucleus p"):
        nucleus(np.array([0.5, 0.5]), 0.0)


def test_hard_gradient_closed_form_and_numeric():
    positives = np.array([1])
    loss, grad = hard_loss_and_grad(Q, C, positives)
    p_k = np.exp([1.0, 0.0, -1.0]) / np.exp([1.0, 0.0, -1.0]).sum()
    assert loss == pytest.approx(-np.log(p_k[1]))
    assert np.allclose(grad, p_k @ C - C[1])  # toward the single positive, away from the mean
    f = lambda q: hard_loss_and_grad(q, C, positives)[0]  # noqa: E731
    assert np.allclose(grad, numeric_grad(f, Q), atol=1e-6)
    two = np.array([0, 1])
    _, grad2 = hard_loss_and_grad(Q, C, two)
    within = p_k[:2] / p_k[:2].sum()
    assert np.allclose(grad2, p_k @ C - within @ C[:2])


def test_soft_gradient_closed_form_and_numeric():
    teacher = np.array([0.2, 0.5, 0.3])
    loss, grad = soft_loss_and_grad(Q, C, teacher)
    p_k = softmax(C @ Q)
    assert loss == pytest.approx(np.sum(teacher * np.log(teacher / p_k)))
    assert np.allclose(grad, p_k @ C - teacher @ C)
    f = lambda q: soft_loss_and_grad(q, C, teacher)[0]  # noqa: E731
    assert np.allclose(grad, numeric_grad(f, Q), atol=1e-6)


@pytest.mark.parametrize("temperature", [1.0, 0.05])
def test_losses_at_a_retriever_temperature_match_torch_autograd(temperature):
    """P_k = softmax(C q / temperature) on unit-length vectors (the MiniLM case, where 0.05 is its training
    scale): value and gradient of both losses as torch computes them; at 0.05 some P_k fall below the hard
    loss's clamp."""
    rng = np.random.default_rng(3)
    unit = lambda x: x / np.linalg.norm(x, axis=-1, keepdims=True)  # noqa: E731
    q, cands = unit(rng.standard_normal(16)), unit(rng.standard_normal((20, 16)))
    teacher = softmax(rng.standard_normal(20), 0.5)
    positives = np.array([2, 5, 7])
    qt = torch.tensor(q, requires_grad=True)
    p_k = torch.softmax(torch.tensor(cands) @ qt / temperature, dim=0)
    hard = -torch.log(torch.clamp(p_k[positives].sum(), min=LOG_CLAMP))  # the official code's clamp
    (hard_grad,) = torch.autograd.grad(hard, qt, retain_graph=True)
    soft = torch.sum(torch.tensor(teacher) * (torch.log(torch.tensor(teacher)) - torch.log(p_k)))
    (soft_grad,) = torch.autograd.grad(soft, qt)
    loss, grad = hard_loss_and_grad(q, cands, positives, temperature)
    assert loss == pytest.approx(hard.item()) and np.allclose(grad, hard_grad.numpy())
    loss, grad = soft_loss_and_grad(q, cands, teacher, temperature)
    assert loss == pytest.approx(soft.item()) and np.allclose(grad, soft_grad.numpy())


def test_learning_rate_sequence():
    assert [linear_lr(1.2, t, 3) for t in range(3)] == pytest.approx([1.2, 0.8, 0.4])
    assert linear_lr(0.2, 0, 1) == pytest.approx(0.2)  # no warm-up: the first step is never 0


def test_sgd_and_clipping_match_torch():
    rng = np.random.default_rng(0)
    q0 = rng.standard_normal(8)
    grads = [rng.standard_normal(8) * 3 for _ in range(3)]
    param = torch.nn.Parameter(torch.tensor(q0))
    opt = torch.optim.SGD([param], lr=1.2, momentum=0.99, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: (3 - t) / 3)
    q, buf = q0.copy(), None
    for t, g in enumerate(grads):
        param.grad = torch.tensor(g)
        torch.nn.utils.clip_grad_norm_([param], 1.0)
        opt.step()
        sched.step()
        q, buf = sgd_step(q, clip_by_norm(g, 1.0), buf, linear_lr(1.2, t, 3), 0.99, 0.1)
        assert np.allclose(q, param.detach().numpy(), atol=1e-10)


def test_tour_hard_reduces_to_rocchio():
    """docs/algorithms.md: C_hard = top-k' by rank and uniform P_k give Rocchio with beta = gamma = eta (k - k') / k."""
    rng = np.random.default_rng(1)
    k, kp, d, eta = 10, 3, 16, 0.5
    q = np.zeros(d)
    q[0] = 1.0
    C = rng.standard_normal((k, d))
    C[:, 0] = 0.7  # every candidate has the same score with q, so P_k is uniform
    _, grad = hard_loss_and_grad(q, C, np.arange(kp))
    updated, _ = sgd_step(q, grad, None, eta, momentum=0.99, weight_decay=0.0)
    w = eta * (k - kp) / k
    assert np.allclose(updated, rocchio(q, C, 1.0, w, w, kp, k - kp), atol=1e-12)


def test_rocchio_and_average_prf_hand_made():
    q = np.array([1.0, 0.0], dtype=np.float32)
    D = np.array([[0.0, 1.0], [0.0, 3.0], [2.0, 0.0]], dtype=np.float32)
    assert np.allclose(rocchio(q, D, 0.9, 0.1, 0.1, 2, 0), [0.9, 0.2])
    assert np.allclose(rocchio(q, D, 0.9, 0.1, 0.1, 2, 1), [0.7, 0.2])
    assert np.allclose(average_prf(q, D), [0.75, 1.0])
    assert rocchio(q, D, 0.9, 0.1, 0.1, 2, 1).dtype == np.float32  # Pyserini's dtype, for exact parity


def test_aggregate_endpoints():
    teacher, sim = np.array([2.0, 0.0, 1.0]), np.array([0.9, 0.8, 0.1])
    assert np.allclose(aggregate(teacher, sim, 1.0), softmax(teacher))
    assert np.allclose(aggregate(teacher, sim, 0.0), softmax(sim / 100))
    mixed = aggregate(teacher, sim, 0.1)
    assert np.allclose(mixed, 0.1 * softmax(teacher) + 0.9 * softmax(sim / 100))


def test_rerank_head_orders_head_above_tail():
    hits = [Hit("a", 0.9), Hit("b", 0.8), Hit("c", 0.7), Hit("d", 0.6)]
    out = rerank_head(hits, np.array([0.1, 0.5, 0.5]))
    assert [h.docid for h in out] == ["b", "c", "a", "d"]  # tie b/c keeps retriever order
    assert all(x.score >= y.score for x, y in zip(out, out[1:]))  # the run writer breaks the b/c tie
    assert min(h.score for h in out[:3]) > out[3].score


@pytest.mark.parametrize(
    "teacher_scores, hard_stops, soft_stops",
    [
        ([3.0, 1.0, 0.0], True, True),  # the retriever's top-1 (index 0) is the teacher's favourite
        ([0.0, 3.0, 1.0], False, False),  # the teacher prefers another candidate
        ([2.0, 2.0, 0.0], True, True),  # a tie at the top: stable order keeps the retriever's top-1 first
        ([1.0, 1.0, 1.0], True, True),  # all-equal scores: nothing to learn
        # teacher probabilities 0.33, 0.40, 0.27: the nucleus (p 0.5) needs two candidates and takes the
        # retriever's top-1, which is not the teacher's argmax: hard stops, soft goes on
        ([1.0, 1.1, 0.9], True, False),
    ],
)
def test_early_stop_rules_on_hand_made_scores(teacher_scores, hard_stops, soft_stops):
    from tour_pyserini.rewriters.tour import TourHard, TourSoft

    C = np.eye(3)
    q = np.array([0.3, 0.2, 0.1])  # retrieval order: 0, 1, 2
    scores = np.array(teacher_scores)
    assert TourHard(teacher=None).step(q, C, scores, 1.0).stop is hard_stops
    assert TourSoft(teacher=None).step(q, C, scores, 1.0).stop is soft_stops


def test_hard_loss_clamp_matches_torch_below_and_above_the_clamp():
    """-log clamp(mass, 1e-7): loss and gradient as torch computes them, also when the mass is below the clamp."""
    C2 = np.array([[30.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    for q in (np.array([1.0, 0.0]), np.array([0.1, 0.2])):  # positives' mass ~1e-13, then ordinary
        qt = torch.tensor(q, requires_grad=True)
        p_k = torch.softmax(torch.tensor(C2) @ qt, dim=0)
        loss_t = -torch.log(torch.clamp(p_k[[1, 2]].sum(), min=1e-7))
        loss_t.backward()
        loss, grad = hard_loss_and_grad(q, C2, np.array([1, 2]))
        assert loss == pytest.approx(float(loss_t.detach()), rel=1e-12)
        assert np.allclose(grad, qt.grad.numpy(), atol=1e-12)
    assert np.all(hard_loss_and_grad(np.array([1.0, 0.0]), C2, np.array([1, 2]))[1] == 0.0)


class _Scores:
    """Teacher scores for the early-stop and positive-set rules, without a model."""

    # the retriever's top-1 (index 0) is second for the teacher but inside its 0.9-nucleus
    teacher = np.array([1.0, 1.2, -3.0, -3.0])


def test_fixed_positives_are_the_retrievers_top_k_and_teacher_positives_the_teachers():
    from tour_pyserini.rewriters.tour import TourHard

    scores = np.array([-1.0, 0.5, 3.0, 2.0])
    assert TourHard(None, depth=4, fixed_positives=2).positives(scores).tolist() == [0, 1]
    assert TourHard(None, depth=4, teacher_positives=2).positives(scores).tolist() == [2, 3]
    C4 = np.eye(4)
    # C_{1:k'} always holds the retriever's top-1: that ablation never stops early
    assert not TourHard(None, depth=4, fixed_positives=2).step(np.ones(4), C4, scores, 1.0).stop
    assert not TourHard(None, depth=4, teacher_positives=2).step(np.ones(4), C4, scores, 1.0).stop


def test_more_positives_than_candidates_is_one_readable_line_on_the_command_line_and_over_http():
    from tour_pyserini.errors import UserError
    from tour_pyserini.rewriters.tour import TourHard
    from tour_pyserini.serve.requests import as_request

    with pytest.raises(UserError) as refused:
        TourHard(None, depth=4, teacher_positives=6)
    assert str(refused.value).startswith("--teacher-positives (6) must be at most --depth (4)")
    assert str(as_request(refused.value)).startswith("'teacher-positives' (6) must be at most 'depth' (4)")


def test_soft_early_stop_argmax_or_nucleus():
    from tour_pyserini.rewriters.tour import TourSoft

    q, C4 = np.ones(4), np.eye(4)
    paper = TourSoft(None, depth=4, p=0.9).step(q, C4, _Scores.teacher, 1.0)
    official = TourSoft(None, depth=4, p=0.9, soft_stop="nucleus")
    assert not paper.stop  # the retriever's top-1 is not the teacher's argmax
    assert official.step(q, C4, _Scores.teacher, 1.0).stop  # ... but it is inside the teacher's nucleus
    assert official.stop_reason != TourSoft(None, depth=4).stop_reason
