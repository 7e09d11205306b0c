"""The reader on tiny random-weight QA models: windows and their stride, span limits, and both selection rules
against a direct computation over every span of every window."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tour_pyserini.answer import Passage, Question, Reader, ReaderOptions
from tour_pyserini.answer.spans import Candidate, Span, best_span, choose
from tour_pyserini.answer.windows import length_sorted_batches, make_windows
from tour_pyserini.encoders import bundled_model_dir

LONG = " ".join(f"word{i} is followed by number {i * 7} and then" for i in range(60))  # about 600 tokens


def tiny_qa_model(path, kind: str = "bert", seed: int = 0):
    """A random-weight extractive QA model with the bundled MiniLM's tokenizer, saved as any checkpoint is."""
    import torch
    from transformers import (
        AutoTokenizer,
        BertConfig,
        BertForQuestionAnswering,
        DistilBertConfig,
        DistilBertForQuestionAnswering,
    )

    tokenizer = AutoTokenizer.from_pretrained(bundled_model_dir())
    torch.manual_seed(seed)
    if kind == "bert":
        config = BertConfig(
            vocab_size=tokenizer.vocab_size,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
        )
        model = BertForQuestionAnswering(config)
    else:  # no token type ids: the windows must not send them
        config = DistilBertConfig(vocab_size=tokenizer.vocab_size, dim=32, n_layers=2, n_heads=2, hidden_dim=64)
        model = DistilBertForQuestionAnswering(config)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_qa_model(tmp_path_factory.mktemp("tiny-qa"))


QUESTIONS = [
    Question(
        "q1", "what number follows word3?", (Passage("long", LONG, 0.9), Passage("b", "Paris is in France.", 0.5))
    ),
    Question("q2", "where is paris", (Passage("b", "Paris is in France.", 0.2), Passage("c", "Rome, Italy", 0.7))),
]


def test_best_span_equals_a_search_over_every_span():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n = int(rng.integers(1, 30))
        start, end = rng.normal(size=n), rng.normal(size=n)
        context = rng.random(n) < 0.7
        limit = int(rng.integers(1, 8))
        found = best_span(start, end, context, limit)
        spans = [
            (start[s] + end[e], s, e)
            for s in range(n)
            for e in range(s, min(n, s + limit))
            if context[s] and context[e]
        ]
        if not spans:
            assert found is None
            continue
        score, s, e = max(spans, key=lambda t: (t[0], -t[1], -t[2]))
        assert (found.score, found.start, found.end) == (pytest.approx(score), s, e)
        assert found.end - found.start < limit and found.selection == start[0]


def test_a_span_is_never_longer_than_the_limit_nor_outside_the_passage():
    start = np.array([9.0, 0.0, 0.0, 5.0, 0.0, 0.0, 0.0])
    end = np.array([9.0, 0.0, 0.0, 0.0, 0.0, 0.0, 4.0])
    context = np.array([False, False, True, True, True, True, True])  # [CLS] and a question token are not context
    assert (best_span(start, end, context, 10).start, best_span(start, end, context, 10).end) == (3, 6)
    short = best_span(start, end, context, 3)  # (3, 6) is 4 tokens long: the best 3-token span instead
    assert short.end - short.start < 3 and short.start == 3


def test_the_rules_by_hand():
    a = Candidate(0, retrieval=10.0, span=Span(1.0, 0, 0, 0.0), window=0, selection=3.0)
    b = Candidate(1, retrieval=8.0, span=Span(2.5, 0, 0, 0.0), window=0, selection=-1.0)
    assert choose([a, b], "orqa", 1.0) == (a, 11.0)  # 10 + 1 > 8 + 2.5
    assert choose([a, b], "orqa", 0.0) == (b, 2.5)  # spans alone
    assert choose([a, b], "dpr") == (a, 1.0)  # a's selection logit is higher; its span's score is reported
    assert choose([], "orqa") is None


def test_long_passages_are_read_in_windows_that_overlap_by_the_stride(tiny):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny)
    windows = make_windows(tokenizer, ["what follows?"], [LONG], max_length=64, stride=16)
    assert len(windows) > 10 and all(len(w.input_ids) <= 64 for w in windows) and {w.pair for w in windows} == {0}
    pieces = [[w.offsets[i] for i in np.flatnonzero(w.context)] for w in windows]
    for before, after in zip(pieces, pieces[1:]):
        assert before[-16:] == after[:16]  # the last 16 passage tokens of a window open the next
    every = sorted({o for piece in pieces for o in piece})
    whole = [tuple(o) for o in tokenizer(LONG, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]]
    assert every == whole  # together the windows hold every token of the passage
    batches = length_sorted_batches(windows, 4)
    lengths = [len(windows[i].input_ids) for b in batches for i in b]
    assert lengths == sorted(lengths, reverse=True) and sorted(i for b in batches for i in b) == list(
        range(len(windows))
    )


def direct_answer(reader: Reader, question: Question, rule: str, weight: float = 1.0):
    """The answer by brute force: every span of every window of every passage, scored as the rule says."""
    o = reader.options
    best = None
    per_passage = []
    for passage in question.passages:
        windows = make_windows(
            reader.tokenizer, [question.text], [passage.text], max_length=o.max_length, stride=o.stride
        )
        spans, selection = [], -np.inf
        for window, (start, end) in zip(windows, reader.logits(windows)):
            selection = max(selection, float(start[0]))
            n = len(start)
            for s in range(n):
                for e in range(s, min(n, s + o.max_answer_length)):
                    if window.context[s] and window.context[e]:
                        text = passage.text[window.offsets[s][0] : window.offsets[e][1]]
                        spans.append((float(start[s] + end[e]), text))
        per_passage.append((passage, selection, max(spans)))
    if rule == "orqa":
        best = max(per_passage, key=lambda p: weight * p[0].score + p[2][0])
        return best[2][1], best[0].docid, weight * best[0].score + best[2][0]
    best = max(per_passage, key=lambda p: p[1])
    return best[2][1], best[0].docid, best[2][0]


@pytest.mark.parametrize("rule, weight", [("orqa", 1.0), ("orqa", 0.0), ("orqa", 50.0), ("dpr", 1.0)])
def test_each_rule_equals_the_direct_computation(tiny, rule, weight):
    options = ReaderOptions(
        max_length=48, stride=12, max_answer_length=4, batch_size=3, rule=rule, retrieval_weight=weight
    )
    reader = Reader(str(tiny), options)
    for question, pred in zip(QUESTIONS, reader.read(QUESTIONS)):
        text, docid, score = direct_answer(reader, question, rule, weight)
        assert (pred.qid, pred.answer, pred.docid) == (question.qid, text, docid)
        assert pred.score == pytest.approx(score, abs=1e-5)
        assert len(reader.tokenizer(pred.answer, add_special_tokens=False)["input_ids"]) <= 4


def test_batch_size_and_model_family_do_not_change_the_answers(tmp_path, tiny):
    one = Reader(str(tiny), ReaderOptions(max_length=48, stride=12, batch_size=1)).read(QUESTIONS)
    many = Reader(str(tiny), ReaderOptions(max_length=48, stride=12, batch_size=64)).read(QUESTIONS)
    assert [(p.answer, p.docid) for p in one] == [(p.answer, p.docid) for p in many]
    assert [p.score for p in one] == pytest.approx([p.score for p in many], abs=1e-5)
    distil = Reader(str(tiny_qa_model(tmp_path / "distil", "distilbert")), ReaderOptions(max_length=48, stride=12))
    for question, pred in zip(QUESTIONS, distil.read(QUESTIONS)):
        assert pred.answer and pred.answer in {p.text for p in question.passages if p.docid == pred.docid}.pop()


def test_bf16_reads_the_same_spans_up_to_rounding(tiny):
    from tour_pyserini.devices import native_bf16

    if not native_bf16("cpu"):
        pytest.skip("torch has no native bfloat16 kernels on this CPU")
    fp32 = Reader(str(tiny), ReaderOptions(max_length=48, stride=12)).read(QUESTIONS)
    bf16 = Reader(str(tiny), ReaderOptions(max_length=48, stride=12, precision="bf16")).read(QUESTIONS)
    assert [p.score for p in bf16] == pytest.approx([p.score for p in fp32], abs=0.1)
    assert all(p.answer in LONG or p.answer in "Paris is in France. Rome, Italy" for p in bf16)


@pytest.mark.parametrize("max_length, stride", [(10, 2), (64, 16), (64, 31)])
def test_a_long_question_in_short_windows_is_cut_to_leave_the_passage_room(tiny, max_length, stride):
    """The question keeps at most max_length - special tokens - stride - 1 tokens (the tokenizer's overflow needs
    more than stride tokens of passage per window), instead of tokenizers' Truncation error."""
    from transformers import AutoTokenizer

    question = "which number follows the word that comes after word3 in the long list of words and numbers " * 3
    windows = make_windows(
        AutoTokenizer.from_pretrained(tiny), [question], [LONG], max_length=max_length, stride=stride
    )
    assert windows and all(len(w.input_ids) <= max_length for w in windows)
    assert all(w.context.sum() > stride for w in windows[:-1])  # every window but the last has room past the stride
    reader = Reader(str(tiny), ReaderOptions(k=1, max_length=max_length, stride=stride))
    assert reader.read([Question("q", question, (Passage("long", LONG, 1.0),))])[0].docid == "long"


def test_k_limits_the_passages_read(tiny):
    preds = Reader(str(tiny), ReaderOptions(k=1, max_length=48, stride=12)).read(QUESTIONS)
    assert [p.docid for p in preds] == ["long", "b"]


# ---- training: the losses, distant supervision, a whole (tiny) run ----


def test_span_loss_is_the_marginal_likelihood_over_the_target_spans():
    import torch

    from tour_pyserini.training.reader import selection_nll, span_marginal_nll

    torch.manual_seed(0)
    start = torch.randn(7, dtype=torch.float64, requires_grad=True)
    end = torch.randn(7, dtype=torch.float64, requires_grad=True)
    context = torch.tensor([False, False, True, True, True, True, False])
    starts, ends = torch.tensor([2, 4]), torch.tensor([3, 4])
    p_start = torch.softmax(start[2:6], 0)  # positions 2..5 are the passage's
    p_end = torch.softmax(end[2:6], 0)
    by_hand = -torch.log(p_start[0] * p_end[1] + p_start[2] * p_end[2])
    loss = span_marginal_nll(start, end, context, starts, ends)
    assert float(loss.detach()) == pytest.approx(float(by_hand.detach()), abs=1e-12)
    loss.backward()
    assert start.grad[[0, 1, 6]].abs().max() == 0 and end.grad[[0, 1, 6]].abs().max() == 0  # not context: no pull
    assert torch.autograd.gradcheck(lambda s, e: span_marginal_nll(s, e, context, starts, ends), (start, end))
    selection = torch.tensor([2.0, 0.5, -1.0], dtype=torch.float64)
    assert float(selection_nll(selection)) == pytest.approx(-float(torch.log_softmax(selection, 0)[0]))


def test_every_occurrence_of_every_answer_is_a_target_and_only_in_the_passage():
    from tour_pyserini.training.reader import occurrences

    ids = [101, 7, 8, 102, 7, 8, 9, 7, 8, 102]
    context = np.array([False, False, False, False, True, True, True, True, True, False])
    assert occurrences(ids, context, [[7, 8], [9]]) == [(4, 5), (6, 6), (7, 8)]  # not the question's 7 8
    assert occurrences(ids, context, [[8, 9, 7, 8, 102]]) == []  # runs into [SEP]


def write_collection(root):
    """Eight short passages, four questions whose answers occur in them (one of them twice)."""
    docs = [
        ("0", "Paris", "Paris is the capital of France. Paris has the Louvre."),
        ("1", "Rome", "Rome is the capital of Italy, on the Tiber."),
        ("2", "Berlin", "Berlin is the capital of Germany."),
        ("3", "Madrid", "Madrid is the capital of Spain."),
        ("4", "Oslo", "Oslo is in Norway."),
        ("5", "Lima", "Lima is in Peru."),
        ("6", "Bern", "Bern is in Switzerland."),
        ("7", "Rabat", "Rabat is in Morocco."),
    ]
    (root / "corpus.jsonl").write_text("".join(json.dumps({"id": d, "title": t, "text": x}) + "\n" for d, t, x in docs))
    questions = [
        ("a", "capital of france", ["Paris"]),
        ("b", "capital of italy", ["Rome"]),
        ("c", "capital of germany", ["Berlin"]),
        ("d", "capital of spain", ["Madrid"]),
    ]
    (root / "topics.jsonl").write_text(
        "".join(json.dumps({"qid": q, "question": t, "answers": a}) + "\n" for q, t, a in questions)
    )
    lines = [
        f"{q} Q0 {d} {r} {1 - r / 10:.3f} t\n"
        for i, (q, _, _) in enumerate(questions)
        for r, d in enumerate([str(i), str(i + 4), str((i + 1) % 4)], 1)
    ]
    (root / "run.trec").write_text("".join(lines))
    return root


def test_train_reader_writes_a_float16_reader_that_answer_reads(tmp_path, tiny):
    from safetensors import safe_open

    from tour_pyserini.commands.train_reader import main as train_main

    root = write_collection(tmp_path)
    out = tmp_path / "reader"
    train_main(
        [
            "--run",
            str(root / "run.trec"),
            "--topics",
            str(root / "topics.jsonl"),
            "--collection",
            str(root),
            "--init",
            str(tiny),
            "--output",
            str(out),
            "--steps",
            "3",
            "--batch-size",
            "2",
            "--eval-every",
            "2",
            "--dev-fraction",
            "0.25",
            "--max-length",
            "48",
            "--stride",
            "8",
            "--k",
            "3",
        ]
    )
    report = json.loads((out / "training.json").read_text())
    assert [h["step"] for h in report["history"]] == [2, 3] and report["dev_questions"] == 1
    assert report["trained_questions"] == 3 and report["skipped_fraction"] == 0.0
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        assert {str(f.get_tensor(k).dtype) for k in f.keys()} == {"torch.float16"}
    preds = Reader(str(out), ReaderOptions(k=3, max_length=48, stride=8)).read(
        [Question("a", "capital of france", (Passage("0", "Paris is the capital of France.", 1.0),))]
    )
    assert preds[0].answer and preds[0].docid == "0"


def test_train_reader_refuses_topics_without_answers(tmp_path, capsys):
    from tour_pyserini.commands.runner import run_cli
    from tour_pyserini.commands.train_reader import main as train_main

    root = write_collection(tmp_path)
    (root / "topics.jsonl").write_text('{"qid": "a", "question": "capital of france"}\n')
    with pytest.raises(SystemExit) as exit_info:
        run_cli(
            train_main,
            [
                "--run",
                str(root / "run.trec"),
                "--topics",
                str(root / "topics.jsonl"),
                "--collection",
                str(root),
                "--output",
                str(tmp_path / "reader"),
            ],
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "fewer than two questions with answers" in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_a_second_train_reader_on_the_same_output_is_refused_while_the_first_trains(tmp_path, tiny):
    """Two real processes: the second is refused in one line (not a silent replacement of the first's reader)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    root = write_collection(tmp_path)
    out, log = tmp_path / "reader", tmp_path / "first.txt"
    argv = [
        sys.executable,
        "-m",
        "tour_pyserini",
        "train-reader",
        "--run",
        root / "run.trec",
        "--topics",
        root / "topics.jsonl",
        "--collection",
        root,
        "--init",
        tiny,
        "--output",
        out,
        "--batch-size",
        "2",
        "--dev-fraction",
        "0.25",
        "--max-length",
        "48",
        "--stride",
        "8",
        "--k",
        "3",
    ]
    with open(log, "w") as f:
        first = subprocess.Popen([*map(str, argv), "--steps", "100000"], stdout=f, stderr=f)
    try:
        deadline = time.monotonic() + 300
        while "train reader" not in log.read_text():  # the first is training, its output locked
            assert first.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.05)
        second = subprocess.run(
            [*map(str, argv), "--steps", "2"],
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
        )
        assert second.returncode == 2 and second.stderr.strip().splitlines() == [
            f"error: {out}.partial is locked: another command is writing this --output; wait for it or choose "
            "another --output"
        ]
    finally:
        first.send_signal(signal.SIGTERM)
        assert first.wait(timeout=120) == 143
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["corpus.jsonl", "topics.jsonl", "run.trec", "first.txt"]
    )


NOTHING_TO_TRAIN_ON = {  # case: (answers of questions a-d, extra flags, the error's words)
    "no-answer-in-the-run": (
        ["Tokyo", "Tokyo", "Tokyo", "Tokyo"],
        [],
        "no question has a passage containing one of its answers (DPR's match) in its top 3",
    ),
    "all-in-dev": (
        ["Paris", "Tokyo", "Tokyo", "Tokyo"],
        ["--seed", "5"],
        "the 1 question(s) with an answer-bearing passage in their top 3 all went to the dev split",
    ),
    "answer-longer-than-a-window": (
        ["Paris is the capital of France. Paris has the Louvre"] * 4,
        ["--max-length", "16", "--stride", "2", "--seed", "1"],
        "never hold a whole answer in one window's tokens (e.g. question a: 'Paris is",
    ),
}


@pytest.mark.parametrize("case", list(NOTHING_TO_TRAIN_ON))
def test_train_reader_says_why_no_question_can_be_trained_on(case, tmp_path, tiny, capsys):
    from tour_pyserini.commands.runner import run_cli
    from tour_pyserini.commands.train_reader import main as train_main

    root = write_collection(tmp_path)
    answers, extra, message = NOTHING_TO_TRAIN_ON[case]
    (root / "topics.jsonl").write_text(
        "".join(
            json.dumps({"qid": q, "question": t, "answers": [a]}) + "\n"
            for q, t, a in zip(
                "abcd", ["capital of france", "capital of italy", "capital of germany", "capital of spain"], answers
            )
        )
    )
    with pytest.raises(SystemExit) as exit_info:
        run_cli(
            train_main,
            [
                "--run",
                str(root / "run.trec"),
                "--topics",
                str(root / "topics.jsonl"),
                "--collection",
                str(root),
                "--init",
                str(tiny),
                "--output",
                str(tmp_path / "reader"),
                "--steps",
                "2",
                "--dev-fraction",
                "0.25",
                "--k",
                "3",
                *extra,
            ],
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1 and message in err, err
    assert not list(tmp_path.glob("reader*"))


# ---- ORQA's joint training: the gradients of its two losses ----


def test_the_full_update_pulls_retrieval_and_spans_toward_the_matching_derivations():
    """d loss / d S_retr(b) = P(b) - P(b | match), d loss / d start_s = P(s) - P(s | match): the closed form of
    a marginal likelihood's gradient, against torch autograd."""
    import torch

    from tour_pyserini.training.orqa_joint import full_update_loss, span_scores

    torch.manual_seed(1)
    w, n, limit = 3, 6, 3
    retrieval = torch.randn(w, dtype=torch.float64, requires_grad=True)
    start = torch.randn(w, n, dtype=torch.float64, requires_grad=True)
    end = torch.randn(w, n, dtype=torch.float64, requires_grad=True)
    context = torch.ones(w, n, dtype=torch.bool)
    context[:, 0] = False  # [CLS]
    targets = torch.zeros(w, n, n, dtype=torch.bool)
    targets[0, 2, 3] = targets[2, 1, 1] = targets[2, 4, 5] = True
    loss, matched = full_update_loss(retrieval, start, end, context, targets, limit)
    assert matched
    loss.backward()
    with torch.no_grad():
        derivations = retrieval[:, None, None] + span_scores(start, end, context, limit)
        p = torch.softmax(derivations.flatten(), 0).view(w, n, n)
        q = torch.softmax(derivations.masked_fill(~targets, float("-inf")).flatten(), 0).view(w, n, n)
        assert torch.allclose(retrieval.grad, p.sum((1, 2)) - q.sum((1, 2)))
        assert torch.allclose(start.grad, p.sum(2) - q.sum(2)) and torch.allclose(end.grad, p.sum(1) - q.sum(1))
        # by hand: loss = -log of the matching derivations' share of exp(S)
        assert float(loss) == pytest.approx(-float(torch.log(p[targets].sum())))
    no_match, matched = full_update_loss(retrieval, start, end, context, torch.zeros_like(targets), limit)
    assert not matched and float(no_match) == 0.0
    too_long = torch.zeros_like(targets)
    too_long[0, 1, 5] = True  # 5 tokens > limit 3: not a derivation at all
    assert not full_update_loss(retrieval, start, end, context, too_long, limit)[1]


def test_joint_gradients_reach_the_question_encoder_and_the_reader_but_not_the_blocks(tiny):
    """A tiny question encoder and reader: the question vector's gradient is sum_b (dL/dS_b) b / tau, with
    dL/dS_b = [P_c(b) - P_c(b | answer-bearing)] + [P(b) - P(b | match)], early update plus full update."""
    import torch
    from transformers import AutoModel, AutoModelForQuestionAnswering, AutoTokenizer

    from tour_pyserini.answer.windows import collate
    from tour_pyserini.training.losses import early_update_loss
    from tour_pyserini.training.orqa_joint import collate_context, full_update_loss
    from tour_pyserini.training.reader import occurrences

    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    encoder = AutoModel.from_pretrained(tiny, dtype=torch.float64)
    reader = AutoModelForQuestionAnswering.from_pretrained(tiny, dtype=torch.float64)
    texts = ["Paris is the capital of France.", "Rome is in Italy.", "Paris, Texas is a town.", "Oslo is cold."]
    bearing = torch.tensor([[True, False, True, False]])
    blocks = torch.nn.functional.normalize(torch.randn(4, 32, dtype=torch.float64), dim=1)  # the frozen index
    tau, k = 0.1, 3
    inputs = tokenizer(["capital of france"], return_tensors="pt")
    q = torch.nn.functional.normalize(encoder(**inputs)[0].mean(1), dim=1)
    q.retain_grad()
    cosines = q @ blocks.T
    early, _ = early_update_loss(cosines, bearing, tau)
    beam = cosines.detach().topk(k, dim=1).indices[0].tolist()
    windows = make_windows(tokenizer, ["capital of france"] * k, [texts[b] for b in beam], max_length=32, stride=4)
    batch = {key: torch.from_numpy(v) for key, v in collate(windows, 0).items()}
    out = reader(**batch)
    width = out.start_logits.shape[1]
    targets = torch.zeros(len(windows), width, width, dtype=torch.bool)
    paris = [tokenizer("Paris", add_special_tokens=False)["input_ids"]]
    for row, window in enumerate(windows):
        for s, e in occurrences(window.input_ids, window.context, paris):
            targets[row, s, e] = True
    retrieval = torch.stack([cosines[0, beam[w.pair]] / tau for w in windows])
    retrieval.retain_grad()
    full, matched = full_update_loss(
        retrieval, out.start_logits, out.end_logits, torch.from_numpy(collate_context(windows, width)), targets, 10
    )
    assert matched
    (early + full).backward()
    with torch.no_grad():
        p_c = torch.softmax(cosines[0] / tau, 0)
        early_grad = p_c - torch.where(bearing[0], p_c, 0) / p_c[bearing[0]].sum()
        full_grad = torch.zeros(4, dtype=torch.float64)
        for w, window in enumerate(windows):
            full_grad[beam[window.pair]] += retrieval.grad[w]
        expected = ((early_grad + full_grad) @ blocks) / tau
    assert torch.allclose(q.grad[0], expected, atol=1e-10)
    assert encoder.embeddings.word_embeddings.weight.grad.abs().sum() > 0
    assert reader.qa_outputs.weight.grad.abs().sum() > 0 and not blocks.requires_grad
