"""ReFIT: its steps by hand and against torch autograd, and its one-step run equal to a TOUR-soft configuration."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tour_pyserini.files import read_topics
from tour_pyserini.rewriters import QueryBatch
from tour_pyserini.rewriters.refit import Refit
from tour_pyserini.rewriters.tour import TourSoft
from tour_pyserini.rewriters.updates import refit_update, softmax
from tour_pyserini.teachers import TeacherContext, get_teacher

C = np.eye(2)
TEACHER = softmax([np.log(3.0), 0.0])  # (0.75, 0.25)


def test_two_steps_by_hand():
    """q = (1, 1) scores both candidates 1: P_k = (0.5, 0.5), KL = 0.75 ln 1.5 + 0.25 ln 0.5, the gradient
    P_k - P_teacher = (-0.25, 0.25), and lr 0.4 moves q to (1.1, 0.9); then P_k = (sigmoid(0.2), sigmoid(-0.2))."""
    q, losses = refit_update(np.array([1.0, 1.0]), C, TEACHER, lr=0.4, steps=2)
    p = 1 / (1 + np.exp(-0.2))
    assert losses[0] == pytest.approx(0.75 * np.log(1.5) + 0.25 * np.log(0.5), abs=1e-12)
    assert losses[1] == pytest.approx(0.75 * np.log(0.75 / p) + 0.25 * np.log(0.25 / (1 - p)), abs=1e-12)
    assert q == pytest.approx([1.1 + 0.4 * (0.75 - p), 0.9 - 0.4 * (0.75 - p)], abs=1e-12)
    assert q == pytest.approx([1.180066, 0.819934], abs=1e-6)
    assert refit_update(np.array([1.0, 1.0]), C, TEACHER, lr=0.4, steps=1)[0] == pytest.approx([1.1, 0.9])


def test_steps_equal_torch_autograd():
    rng = np.random.default_rng(0)
    q0, cands = rng.normal(size=5), rng.normal(size=(7, 5))
    teacher = softmax(rng.normal(size=7), 0.5)
    q, losses = refit_update(q0, cands, teacher, lr=0.3, steps=3, temperature=0.7)
    x, t, cc = torch.tensor(q0, requires_grad=True), torch.tensor(teacher), torch.tensor(cands)
    expected = []
    for _ in range(3):
        loss = torch.sum(t * (torch.log(t) - torch.log_softmax(cc @ x / 0.7, dim=0)))
        (grad,) = torch.autograd.grad(loss, x)
        expected.append(loss.item())
        x = (x - 0.3 * grad).detach().requires_grad_(True)
    assert losses == pytest.approx(expected, abs=1e-12)
    assert q == pytest.approx(x.detach().numpy(), abs=1e-12)


class CountingIndex:
    """The index as a rewriter sees it, counting its searches."""

    def __init__(self, index):
        self.index, self.searches = index, 0

    def __getattr__(self, name):
        return getattr(self.index, name)

    def search_candidates(self, vectors, depth):
        self.searches += 1
        return self.index.search_candidates(vectors, depth)

    def search_vectors(self, vectors, depth, return_vector=False):
        self.searches += 1
        return self.index.search_vectors(vectors, depth, return_vector)


@pytest.mark.slow
def test_one_step_is_tour_softs_first_iteration_without_stop_clip_or_decay(
    searcher, dense_index, bm25_index, mini_scifact
):
    """At one step ReFIT is TOUR-soft with T = 1, no early stop, no weight decay and no clipping (a norm no gradient
    reaches): the same rankings and scores, bit for bit. With more steps it still searches only twice."""
    topics = read_topics(mini_scifact["topics"])[:12]
    texts, qids = [t.text for t in topics], [t.qid for t in topics]
    teacher = get_teacher("bm25", TeacherContext(index_dir=str(dense_index)))
    shared = {"depth": 20, "lr": 0.2, "tau": 1.0, "lam": 0.5, "smoothing": 0.05}
    refit = searcher.retrieve(texts, qids, 30, rewriter=Refit(teacher, **shared))
    tour = searcher.retrieve(
        texts,
        qids,
        30,
        rewriter=TourSoft(teacher, iterations=1, early_stop=False, weight_decay=0.0, clip=1e300, **shared),
    )
    assert [[(h.docid, h.score) for h in r.hits] for r in refit] == [[(h.docid, h.score) for h in r.hits] for r in tour]
    assert [r.trace.losses for r in refit] == [r.trace.losses for r in tour]
    counted = CountingIndex(searcher)
    several = Refit(teacher, iterations=3, **shared).rewrite(
        QueryBatch(qids, texts, searcher.encode(texts)), counted, 30
    )
    assert counted.searches == 2 and all(len(r.trace.losses) == 3 for r in several)
    assert [[h.docid for h in r.hits] for r in several] != [[h.docid for h in r.hits] for r in refit]
