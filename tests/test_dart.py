"""DART: its loss, one step and one buffer update by hand, its gradients against torch autograd, and its
cross-query buffer through batches and an interrupted, resumed run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tour_pyserini.errors import UserError
from tour_pyserini.files import read_topics
from tour_pyserini.rewriters import get_rewriter
from tour_pyserini.rewriters.base import DEPTH
from tour_pyserini.rewriters.dart import Dart
from tour_pyserini.rewriters.updates import (
    adaptive_margin,
    bilinear_grad,
    confidence_weights,
    dart_adapt,
    dart_buffer,
    margin_loss_and_grad,
)

Q = np.array([1.0, 0.0])
C = np.array([[1.0, 0.0], [0.5, 0.5], [0.0, 1.0]])  # scores with Q: 1, 0.5, 0
ONE = np.array([1.0])


def test_confidence_weights_by_hand():
    w_pos, w_neg = confidence_weights(np.array([0.9, 0.7, 0.4, 0.2, 0.1]), 2, 2, 0.1)
    assert w_pos == pytest.approx([1 / (1 + np.exp(-2)), 1 / (1 + np.exp(2))])  # softmax(9, 7)
    assert w_neg == pytest.approx([1 / (1 + np.exp(1)), 1 / (1 + np.exp(-1))])  # softmax(-2, -1): the lower, surer


def test_margin_loss_by_hand():
    """Only the pair (0.7, 0.2) is inside the margin 0.55 (by 0.05): the loss is its weight times 0.05 and its
    gradient pushes the positive up and the negative down by its weight."""
    scores = np.array([0.9, 0.7, 0.4, 0.2, 0.1])
    w_pos, w_neg = np.array([0.8, 0.2]), np.array([0.3, 0.7])
    loss, grad = margin_loss_and_grad(scores, w_pos, w_neg, 0.55)
    assert loss == pytest.approx(0.2 * 0.3 * 0.05)
    assert grad == pytest.approx([0.0, -0.06, 0.0, 0.06, 0.0])
    assert margin_loss_and_grad(np.array([1.0, 0.5]), ONE, ONE, 0.5) == (0.0, pytest.approx([0.0, 0.0]))  # at it


def test_adaptive_margin_by_hand():
    """The margin widens by slope (1 - cos(q, c_1)): nearly the base margin where the retriever is sure of its first
    document, wider where it is not, the same on any scale; slope 0 keeps the base margin."""
    q, sure, unsure = np.array([1.0, 0.0]), np.array([0.9, np.sqrt(0.19)]), np.array([0.4, np.sqrt(0.84)])
    assert adaptive_margin(q, sure, 0.1, 1.0) == pytest.approx(0.2)
    assert adaptive_margin(q, unsure, 0.1, 2.0) == pytest.approx(1.3)
    assert adaptive_margin(3 * q, 5 * unsure, 0.1, 2.0) == pytest.approx(1.3)
    assert adaptive_margin(q, unsure, 0.1, 0.0) == 0.1


def test_one_step_and_one_buffer_update_by_hand():
    """One positive (score 1), one negative (score 0), margin 1.5: loss 0.5, dL/ds = (-1, 0, 1), g = C^T dL/ds =
    (-1, 1), dL/dW = q g^T; lr 0.1 gives h = (0.1, -0.1), so W^T q = (1.1, -0.1) and the scores (1.1, 0.5, -0.1).
    The buffer keeps momentum 0.5 of W - I = q h^T; the next query (0.6, 0.8) starts from W_0^T q = (0.63, 0.77)."""
    scores, h, losses = dart_adapt(Q, C, None, ONE, ONE, margin=1.5, lr=0.1, steps=1)
    assert losses == [0.5]
    assert bilinear_grad(Q, C, np.array([-1.0, 0.0, 1.0])) == pytest.approx(np.array([[-1.0, 1.0], [0.0, 0.0]]))
    assert h == pytest.approx([0.1, -0.1]) and scores == pytest.approx([1.1, 0.5, -0.1])
    buffer = dart_buffer(None, Q, h, momentum=0.5)
    assert buffer == pytest.approx(np.array([[0.05, -0.05], [0.0, 0.0]]))
    q2 = np.array([0.6, 0.8])
    start, h2, losses2 = dart_adapt(q2, C, buffer, ONE, ONE, margin=1.5, lr=0.1, steps=0)
    assert start == pytest.approx(C @ [0.63, 0.77]) and not h2.any() and losses2 == []
    expected = 0.5 * (buffer + np.array([[0.6, 1.2], [0.8, 1.6]]))  # B + q h^T with h = (1, 2)
    assert dart_buffer(buffer, q2, np.array([1.0, 2.0]), 0.5) == pytest.approx(expected)
    assert dart_buffer(buffer, q2, h2, 0.0) is None  # momentum 0: nothing carried


def torch_margin_loss(s, w_pos, w_neg, margin):
    n_pos, n_neg = len(w_pos), len(w_neg)
    slack = margin - (s[:n_pos, None] - s[len(s) - n_neg :][None, :])
    return torch.sum(torch.outer(w_pos, w_neg) * torch.relu(slack))


def test_gradients_equal_torch_autograd():
    rng = np.random.default_rng(1)
    d, k = 6, 9
    q, cands, W = rng.normal(size=d), rng.normal(size=(k, d)), np.eye(d) + 0.1 * rng.normal(size=(d, d))
    w_pos, w_neg = confidence_weights(cands @ q, 3, 4, 0.5)
    loss, score_grad = margin_loss_and_grad(cands @ W.T @ q, w_pos, w_neg, margin=2.0)
    tw = torch.tensor(W, requires_grad=True)
    s = torch.tensor(cands) @ tw.T @ torch.tensor(q)  # s_j = q^T W c_j
    expected = torch_margin_loss(s, torch.tensor(w_pos), torch.tensor(w_neg), 2.0)
    (grad,) = torch.autograd.grad(expected, tw)
    assert 0 < np.count_nonzero(score_grad) < k  # some pairs inside the margin, not all candidates in a pair
    assert loss == pytest.approx(expected.item(), abs=1e-12)
    assert bilinear_grad(q, cands, score_grad) == pytest.approx(grad.numpy(), abs=1e-12)


def test_steps_equal_sgd_on_the_full_matrix_with_torch():
    """dart_adapt's rank-one bookkeeping is W = I + B + q h^T: the same scores and W as plain SGD on the d x d W."""
    rng = np.random.default_rng(2)
    d, k, lr, margin, steps = 5, 8, 0.3, 1.0, 4
    q, cands, B = rng.normal(size=d), rng.normal(size=(k, d)), 0.05 * rng.normal(size=(d, d))
    w_pos, w_neg = confidence_weights(cands @ q, 2, 3, 0.5)
    scores, h, losses = dart_adapt(q, cands, B, w_pos, w_neg, margin, lr, steps)
    W, expected = torch.tensor(np.eye(d) + B, requires_grad=True), []
    tq, tc, tp, tn = (torch.tensor(x) for x in (q, cands, w_pos, w_neg))
    for _ in range(steps):
        loss = torch_margin_loss(tc @ W.T @ tq, tp, tn, margin)
        (grad,) = torch.autograd.grad(loss, W)
        expected.append(loss.item())
        W = (W - lr * grad).detach().requires_grad_(True)
    W = W.detach().numpy()
    assert losses == pytest.approx(expected, abs=1e-12) and expected[-1] < expected[0]
    assert scores == pytest.approx(cands @ W.T @ q, abs=1e-12)
    assert np.eye(d) + B + np.outer(q, h) == pytest.approx(W, abs=1e-12)
    assert dart_buffer(B, q, h, 0.9) == pytest.approx(0.9 * (W - np.eye(d)), abs=1e-12)


def test_settings_are_checked():
    with pytest.raises(UserError, match="--dart-positives 60 and --dart-negatives 50 overlap"):
        get_rewriter("dart", positives=60, negatives=50)
    with pytest.raises(UserError, match="momentum must be in"):
        get_rewriter("dart", momentum=1.0)
    with pytest.raises(UserError, match="asks none"):
        get_rewriter("dart", teacher=object())


def ranked(results):
    return [[(h.docid, h.score) for h in r.hits] for r in results]


@pytest.mark.slow
def test_the_buffer_follows_run_order_across_batches_and_only_in_a_run(searcher, mini_scifact):
    """In a run the buffer carries each query's W to the next, whatever the batches; outside one (a server's
    requests) every query starts from the identity, alone or batched with others."""
    topics = read_topics(mini_scifact["topics"])[:12]
    texts, qids = [t.text for t in topics], [t.qid for t in topics]
    vectors = searcher.encode(texts)

    def run(batch_size, carry=True):
        dart = Dart(depth=30)
        if carry:
            dart.start_run()
        out = []
        for i in range(0, len(texts), batch_size):
            out += searcher.retrieve_vectors(
                texts[i : i + batch_size], qids[i : i + batch_size], vectors[i : i + batch_size], 40, rewriter=dart
            )
        return out, dart

    (whole, dart), (batched, _) = run(12), run(5)
    assert ranked(whole) == ranked(batched) and dart.buffer is not None
    fresh, single = run(12, carry=False), run(1, carry=False)
    assert ranked(fresh[0]) == ranked(single[0]) and fresh[1].buffer is None
    assert ranked(fresh[0])[0] == ranked(whole)[0] and ranked(fresh[0])[1:] != ranked(whole)[1:]
    first, resumed = Dart(depth=30), Dart(depth=30)  # a run's state, handed to another rewriter, carries on
    first.start_run()
    searcher.retrieve_vectors(texts[:6], qids[:6], vectors[:6], 40, rewriter=first)
    resumed.start_run(first.run_state())
    rest = searcher.retrieve_vectors(texts[6:], qids[6:], vectors[6:], 40, rewriter=resumed)
    assert ranked(rest) == ranked(whole[6:])


@pytest.mark.slow
def test_each_query_of_a_batch_gets_its_own_margin(searcher, mini_scifact):
    """The loss before the first step, from W = I, is the margin loss of the retriever's own scores at that query's
    margin: the margin is read from each query's first document, not one for the batch."""
    topics = read_topics(mini_scifact["topics"])[:6]
    texts, qids = [t.text for t in topics], [t.qid for t in topics]
    vectors = searcher.encode(texts)
    dart = Dart(depth=30, margin=0.0, margin_slope=1.0)
    results = searcher.retrieve_vectors(texts, qids, vectors, 40, rewriter=dart)
    margins = []
    for x, found, result in zip(vectors, searcher.search_candidates(vectors, 30), results):
        q, C = x.astype(np.float64), found.vectors.astype(np.float64)
        w_pos, w_neg = confidence_weights(C @ q, 5, 20, 0.05)
        margins.append(adaptive_margin(q, C[0], 0.0, 1.0))
        assert result.trace.losses[0] == pytest.approx(margin_loss_and_grad(C @ q, w_pos, w_neg, margins[-1])[0])
    assert len(set(np.round(margins, 6))) == len(margins) and all(r.trace.losses[0] > 0 for r in results)


@pytest.mark.slow
def test_an_interrupted_run_resumes_byte_identically(dense_index, mini_scifact, tmp_path, monkeypatch):
    """The buffer is recorded with each whole batch: a run interrupted at its third batch and resumed writes the
    bytes of a run never interrupted; without the buffer (momentum 0) the run differs, so the state matters."""
    from conftest import interrupted_at_the_third_batch

    from tour_pyserini.commands.search import main as search_main

    out = tmp_path / "dart.trec"
    args = [
        "--index",
        str(dense_index),
        "--topics",
        str(mini_scifact["topics"]),
        "--output",
        str(out),
        "--hits",
        "20",
        "--batch-size",
        "8",
        "--threads",
        "1",
        "--rewriter",
        "dart",
        DEPTH.option,
        "30",
    ]
    search_main(args)
    complete = out.read_text()
    search_main([*args, "--dart-momentum", "0", "--output", str(tmp_path / "fresh.trec")])
    assert (tmp_path / "fresh.trec").read_text() != complete
    out.unlink()
    interrupted_at_the_third_batch(monkeypatch, lambda: search_main(args))
    assert out.with_name(out.name + ".partial").read_text().count("\n") == 2 * 8 * 20
    search_main(args)
    assert out.read_text() == complete


@pytest.mark.slow
def test_ray_is_refused_before_it_starts(dense_index, mini_scifact, tmp_path):
    """Ray workers would each carry their own buffer over their own batches: not the run's order."""
    from tour_pyserini.commands.search import main as search_main

    with pytest.raises(UserError, match="carries its state from query to query in run order"):
        search_main(
            [
                "--index",
                str(dense_index),
                "--topics",
                str(mini_scifact["topics"]),
                "--output",
                str(tmp_path / "run.trec"),
                "--rewriter",
                "dart",
                "--ray",
            ]
        )
    assert not list(tmp_path.iterdir())
