"""ORQA's retriever learning: the losses against TOUR-hard, hand values and autograd; ICT blocks and masking;
both trainers end to end through their command lines on a tiny real corpus."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from tour_pyserini.rewriters.updates import LOG_CLAMP, hard_loss_and_grad
from tour_pyserini.training.ict import Block, draw_example, make_blocks, split_sentences, usable, wordpiece_counter
from tour_pyserini.training.losses import early_update_loss, in_batch_nll, marginal_nll

ROOT = Path(__file__).resolve().parents[1]

Q = np.array([1.0, 0.0])
C = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])  # scores with Q: 1, 0, -1


def torch_hard(q: np.ndarray, C: np.ndarray, positives: list[int]) -> tuple[float, np.ndarray]:
    """TOUR-hard's loss through the training loss: one row of scores, autograd for dL/dq."""
    qt = torch.tensor(q, dtype=torch.float64, requires_grad=True)
    mask = torch.zeros(1, len(C), dtype=torch.bool)
    mask[0, positives] = True
    loss = marginal_nll((torch.tensor(C) @ qt)[None], mask, min_mass=LOG_CLAMP)[0][0]
    loss.backward()
    return float(loss.detach()), qt.grad.numpy()


@pytest.mark.parametrize("positives", [[1], [0, 1], [2], [0, 1, 2]])
def test_training_loss_is_tour_hard(positives):
    loss, grad = torch_hard(Q, C, positives)
    expected_loss, expected_grad = hard_loss_and_grad(Q, C, np.array(positives))
    assert loss == pytest.approx(expected_loss, abs=1e-12)
    assert np.allclose(grad, expected_grad, atol=1e-12)


def test_training_loss_is_tour_hard_on_random_vectors_and_below_the_clamp():
    rng = np.random.default_rng(0)
    q, cands = rng.normal(size=8), rng.normal(size=(50, 8))
    for positives in ([3], [0, 7, 49], list(range(25))):
        loss, grad = torch_hard(q, cands, positives)
        expected_loss, expected_grad = hard_loss_and_grad(q, cands, np.array(positives))
        assert loss == pytest.approx(expected_loss, abs=1e-10) and np.allclose(grad, expected_grad, atol=1e-10)
    far = np.array([[30.0, 0.0], [-30.0, 0.0]])  # the positive has mass e^-60: clamped, no gradient
    loss, grad = torch_hard(Q, far, [1])
    assert loss == pytest.approx(-math.log(LOG_CLAMP)) and np.allclose(grad, 0.0)
    assert np.allclose(hard_loss_and_grad(Q, far, np.array([1]))[1], 0.0)


def test_early_update_loss_hand_value_and_skipped_question():
    scores = torch.tensor([[1.0, 0.0, -1.0], [2.0, 1.0, 0.0]], requires_grad=True)
    positives = torch.tensor([[False, True, True], [False, False, False]])
    loss, skipped = early_update_loss(scores, positives, temperature=0.5)
    z = np.exp([2.0, 0.0, -2.0])  # scores / 0.5
    assert skipped == 1
    assert float(loss.detach()) == pytest.approx(-np.log((z[1] + z[2]) / z.sum()))  # the mean over the one kept question
    loss.backward()
    assert torch.all(scores.grad[1] == 0)  # the question without an answer-bearing block contributes nothing
    p = z / z.sum()
    within = np.array([0.0, z[1], z[2]]) / (z[1] + z[2])
    assert np.allclose(scores.grad[0].numpy(), (p - within) / 0.5)
    none, skipped = early_update_loss(scores, torch.zeros(2, 3, dtype=torch.bool), temperature=1.0)
    assert skipped == 2 and float(none.detach()) == 0.0


def test_in_batch_nll_hand_value():
    queries = torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64)
    blocks = torch.tensor([[1.0, 0.0], [0.6, 0.8]], dtype=torch.float64)
    scores = np.array([[1.0, 0.6], [0.0, 0.8]]) / 0.1
    expected = np.mean([-scores[i, i] + np.log(np.exp(scores[i]).sum()) for i in range(2)])
    assert float(in_batch_nll(queries, blocks, temperature=0.1)) == pytest.approx(expected, rel=1e-6)
    assert float(in_batch_nll(queries, blocks, 0.1)) == pytest.approx(
        float(torch.nn.functional.cross_entropy(queries @ blocks.T / 0.1, torch.arange(2))), rel=1e-6
    )


def test_split_sentences():
    text = "Cells divide. They grow (slowly). 3 mice died! \"Quoted\" end? yes no. Fin"
    assert split_sentences(text) == ["Cells divide.", "They grow (slowly).", "3 mice died!", "\"Quoted\" end? yes no.",
                                     "Fin"]  # fmt: skip
    assert split_sentences("  ") == []


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from tour_pyserini.encoders import bundled_model_dir

    return AutoTokenizer.from_pretrained(str(bundled_model_dir()))


@pytest.fixture(scope="module")
def scifact_docs():
    from tour_pyserini.index.corpus import read_jsonl_corpus

    docs = []
    for doc in read_jsonl_corpus(ROOT / "collections" / "scifact" / "corpus.jsonl"):
        docs.append(doc)
        if len(docs) == 50:
            return docs


def test_blocks_respect_sentences_the_limit_and_include_the_title(tokenizer, scifact_docs):
    count = wordpiece_counter(tokenizer)
    for limit in (288, 64):
        for doc in scifact_docs:
            blocks = make_blocks(doc.docid, doc.title, doc.text, count, limit)
            sentences = split_sentences(doc.text)
            if all(count(s) <= limit - 2 - count(doc.title) for s in sentences):
                # boundaries respected: the blocks are the sentences, in order, grouped
                assert [s for b in blocks for s in b.sentences] == sentences
            for i, block in enumerate(blocks):
                ids = tokenizer(block.text())["input_ids"]
                assert len(ids) <= limit
                assert block.text().startswith(doc.title)
                if i + 1 < len(blocks):  # greedy: the next sentence would not have fit
                    grown = Block(doc.docid, doc.title, (*block.sentences, blocks[i + 1].sentences[0]))
                    assert len(tokenizer(grown.text())["input_ids"]) > limit
    long_text = " ".join(["word"] * 400) + ". Short one."
    blocks = make_blocks("d", "T", long_text, count, 288)
    assert all(len(tokenizer(b.text())["input_ids"]) <= 288 for b in blocks) and len(blocks) >= 2


def test_masking_rate_is_ninety_percent_within_sampling_error():
    blocks = [Block(str(i), "t", ("A one.", "B two.", "C three.")) for i in range(10)]
    rng = random.Random(7)
    n = 20_000
    examples = [draw_example(blocks, i % 10, rng, 0.9) for i in range(n)]
    rate = sum(e.masked for e in examples) / n
    assert abs(rate - 0.9) < 4 * math.sqrt(0.9 * 0.1 / n)  # 4 standard errors
    for e in examples[:200]:
        assert (e.query in e.evidence) != e.masked and e.evidence.startswith("t ")
    assert all(draw_example(blocks, 0, rng, 0.0).query in blocks[0].text() for _ in range(10))
    assert usable([Block("x", "t", ("one.",)), blocks[0]]) == [1]
