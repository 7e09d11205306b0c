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
    assert float(loss.detach()) == pytest.approx(
        -np.log((z[1] + z[2]) / z.sum())
    )  # the mean over the one kept question
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
    text = 'Cells divide. They grow (slowly). 3 mice died! "Quoted" end? yes no. Fin'
    assert split_sentences(text) == [
        "Cells divide.",
        "They grow (slowly).",
        "3 mice died!",
        '"Quoted" end? yes no.',
        "Fin",
    ]
    assert split_sentences("  ") == []
    # a lower-cased corpus (Cranfield): every end punctuation followed by space is a boundary
    assert split_sentences("flow past a wing . an experimental study was made . results agree.") == [
        "flow past a wing .",
        "an experimental study was made .",
        "results agree.",
    ]


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


# --- both trainers end to end, through their command lines, on tiny real corpora ---

TINY_ICT = ["--steps", "2", "--batch-size", "4", "--held-out", "8", "--eval-every", "1", "--max-wordpieces", "96"]
TINY_QA = ["--steps", "2", "--batch-size", "4", "--eval-every", "1", "--top-c", "20"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    """50 SciFact abstracts, and 60 nq-oracle passages with the 20 training questions answered in them."""
    from tour_pyserini.files import read_topics
    from tour_pyserini.training.answers import alnum

    out = tmp_path_factory.mktemp("tiny")
    (out / "scifact").mkdir()
    lines = (ROOT / "collections/scifact/corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (out / "scifact/corpus.jsonl").write_text("".join(lines[:50]), encoding="utf-8")
    (out / "nq").mkdir()
    lines = (ROOT / "collections/nq-oracle/corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:60]
    (out / "nq/corpus.jsonl").write_text("".join(lines), encoding="utf-8")
    texts = [alnum(json.loads(line)["text"]) for line in lines]
    topics = [
        t
        for t in read_topics(ROOT / "collections/nq-oracle/topics.train.jsonl")
        if any(alnum(a) in text for a in t.answers for text in texts)
    ][:20]
    (out / "nq/topics.jsonl").write_text(
        "".join(json.dumps({"qid": t.qid, "question": t.text, "answers": list(t.answers)}) + "\n" for t in topics)
    )
    return {"root": out, "scifact": out / "scifact", "nq": out / "nq", "nq_topics": out / "nq/topics.jsonl"}


TRAIN_ICT, TRAIN_QA = "tour_pyserini.commands.train_ict", "tour_pyserini.commands.train_qa"


def cli(module: str, argv: list[str]) -> None:
    import importlib

    from tour_pyserini.commands.runner import run_cli

    run_cli(importlib.import_module(module).main, [str(a) for a in argv])


@pytest.mark.slow
def test_train_ict_then_index_and_search_with_its_pair(tiny, tmp_path, capsys):
    from tour_pyserini.encoders import EncoderSpec
    from tour_pyserini.files.runs import read_run

    out = tmp_path / "ict"
    cli(TRAIN_ICT, ["--collection", tiny["scifact"], "--output", out, *TINY_ICT])
    assert "best held-out accuracy" in capsys.readouterr().out
    report = json.loads((out / "training.json").read_text())
    assert [h["step"] for h in report["history"]] == [0, 1, 2] and report["held_out_examples"] == 8
    for part in ("query", "document"):
        spec = EncoderSpec.resolve(str(out / part))
        assert (spec.pooling, spec.l2_norm, spec.max_length) == ("mean", True, 256)
        assert (out / part / "model.safetensors").is_file()
    topics = tmp_path / "q.tsv"
    topics.write_text("1\tcerebral white matter in newborns\n2\tvitamin D and cancer\n")
    cli(
        "tour_pyserini.commands.index",
        ["--collection", tiny["scifact"], "--encoder", out / "document", "--output", tmp_path / "idx.ict"],
    )
    meta = json.loads((tmp_path / "idx.ict/tour_pyserini.json").read_text())
    assert len(meta["encoder"]["weights_sha256"]) == 64
    cli(
        "tour_pyserini.commands.search",
        [
            "--index",
            tmp_path / "idx.ict",
            "--encoder",
            out / "query",
            "--topics",
            topics,
            "--output",
            tmp_path / "ict.trec",
            "--hits",
            "5",
        ],
    )
    assert set(read_run(tmp_path / "ict.trec")) == {"1", "2"}
    # the same query encoder against an index its document encoder did not build: refused, one line
    cli("tour_pyserini.commands.index", ["--collection", tiny["scifact"], "--output", tmp_path / "idx.minilm"])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        cli(
            "tour_pyserini.commands.search",
            [
                "--index",
                tmp_path / "idx.minilm",
                "--encoder",
                out / "query",
                "--topics",
                topics,
                "--output",
                tmp_path / "bad.trec",
            ],
        )
    err = capsys.readouterr().err
    assert exited.value.code == 2 and "is paired with document encoder" in err and err.count("\n") == 1
    assert not (tmp_path / "bad.trec").exists()


@pytest.mark.slow
def test_train_qa_end_to_end(tiny, tmp_path, capsys):
    from tour_pyserini.encoders.pairing import read_pair
    from tour_pyserini.eval.answers import AnswerMatcher
    from tour_pyserini.files import read_topics
    from tour_pyserini.index.docstore import DocStore
    from tour_pyserini.training.answers import answer_bearing

    idx = tmp_path / "nq.minilm"
    cli("tour_pyserini.commands.index", ["--collection", tiny["nq"], "--output", idx])
    # each question twice (the same answers, another qid): a twin always shares its answer-bearing blocks
    lines = tiny["nq_topics"].read_text().splitlines()
    twins = [json.dumps({**json.loads(line), "qid": json.loads(line)["qid"] + "-twin"}) for line in lines]
    (tmp_path / "topics.jsonl").write_text("".join(line + "\n" for line in lines + twins))
    out = tmp_path / "qa"
    cli(TRAIN_QA, ["--index", idx, "--topics", tmp_path / "topics.jsonl", "--output", out, *TINY_QA])
    printed = capsys.readouterr().out
    assert "best dev Acc@1" in printed
    report = json.loads((out / "training.json").read_text())
    assert report["questions_without_answer_block"] == 0 and report["top_c"] == 20
    assert report["dev_questions"] >= 2 and report["dev_questions"] + report["train_questions"] == 40
    assert all(0.0 <= h["skipped_fraction"] <= 1.0 for h in report["history"][1:])
    # the dev split is grouped: no dev question shares an answer-bearing block with a training question
    topics = read_topics(tmp_path / "topics.jsonl")
    rows = answer_bearing(topics, (idx / "docid").read_text().split(), AnswerMatcher(DocStore(idx / "docstore.sqlite")))
    dev = set(report["dev_qids"])
    assert all((t.qid in dev) == (f"{t.qid}-twin" in dev) for t in topics[:20])
    blocks = [{b for t, r in zip(topics, rows) if (t.qid in dev) is side for b in r} for side in (True, False)]
    assert blocks[0] and blocks[1] and not blocks[0] & blocks[1]
    meta = json.loads((idx / "tour_pyserini.json").read_text())
    assert read_pair(out)["document_weights_sha256"] == meta["encoder"]["weights_sha256"]
    cli(
        "tour_pyserini.commands.search",
        [
            "--index",
            idx,
            "--encoder",
            out,
            "--topics",
            tiny["nq_topics"],
            "--output",
            tmp_path / "qa.trec",
            "--hits",
            "5",
        ],
    )
    assert (tmp_path / "qa.trec").is_file()


@pytest.mark.parametrize(
    "module, argv, message",
    [
        (TRAIN_ICT, ["--collection", "missing", "--output", "o"], "no corpus at missing"),
        (
            TRAIN_ICT,
            ["--collection", "{scifact}", "--output", "o", "--mask-rate", "1.5"],
            "--mask-rate must be in [0, 1]",
        ),
        (
            TRAIN_ICT,
            ["--collection", "{scifact}", "--output", "o", "--batch-size", "1"],
            "--batch-size must be at least 2",
        ),
        (TRAIN_ICT, ["--collection", "{scifact}", "--output", "o", "--init", "./nowhere"], "no such model directory"),
        (TRAIN_QA, ["--index", "missing", "--topics", "{nq_topics}", "--output", "o"], "does not exist"),
        (
            TRAIN_QA,
            ["--index", str(ROOT / "indexes/nq-oracle.bm25"), "--topics", "{nq_topics}", "--output", "o"],
            "needs a dense one",
        ),
        (
            TRAIN_QA,
            ["--index", "{index}", "--topics", str(ROOT / "collections/scifact/topics.test.tsv"), "--output", "o"],
            "fewer than two questions with answers",
        ),
        (
            TRAIN_QA,
            ["--index", "{index}", "--topics", "{nq_topics}", "--output", "o", "--top-c", "0"],
            "--top-c must be positive",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(module, argv, message, tiny, tmp_path, capsys, monkeypatch):
    index = ROOT / "indexes/nq-oracle.minilm"
    needed = [index] * ("{index}" in argv) + [Path(a) for a in argv if a.endswith("nq-oracle.bm25")]
    if not all(p.exists() for p in needed):
        pytest.skip("needs indexes/nq-oracle.minilm and .bm25 (make nq-demo)")
    monkeypatch.chdir(tmp_path)
    argv = [a.format(scifact=tiny["scifact"], nq_topics=tiny["nq_topics"], index=index) for a in argv]
    with pytest.raises(SystemExit) as exited:
        cli(module, argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_existing_output_is_refused(tiny, tmp_path, capsys):
    (tmp_path / "o").mkdir()
    with pytest.raises(SystemExit) as exited:
        cli(TRAIN_ICT, ["--collection", tiny["scifact"], "--output", tmp_path / "o"])
    assert exited.value.code == 2 and "already exists" in capsys.readouterr().err


def test_pairing_check(tmp_path):
    from tour_pyserini.encoders import EncoderSpec
    from tour_pyserini.encoders.pairing import check_pair, write_pair
    from tour_pyserini.errors import UserError

    query = EncoderSpec(name=str(tmp_path), path=str(tmp_path))
    built = {"name": "models/doc", "weights_sha256": "a" * 64}
    check_pair(query, built, "idx")  # no pair file: nothing to check
    write_pair(tmp_path, "models/doc", "a" * 64)
    check_pair(query, built, "idx")
    check_pair(query, {"name": "./gone", "weights_sha256": None}, "idx")  # unknown builder: cannot tell
    with pytest.raises(
        UserError,
        match=r"paired with document encoder models/doc \(weights aaaaaaaaaaaa\), but "
        r"index idx was built by other \(weights bbbbbbbbbbbb\)",
    ):
        check_pair(query, {"name": "other", "weights_sha256": "b" * 64}, "idx")


def test_the_trainers_check_their_config_for_library_callers_too(tmp_path):
    from tour_pyserini.errors import UserError
    from tour_pyserini.training import early_update, ict_training, reranker

    with pytest.raises(UserError, match="^batch_size must be at least 2"):
        ict_training.train("no-collection", tmp_path / "o", "no-model", ict_training.IctConfig(batch_size=1), tied=True)
    with pytest.raises(UserError, match="^top_c must be positive"):
        early_update.train(tmp_path / "no-index", [], tmp_path / "o", "no-model", early_update.QaConfig(top_c=0))
    with pytest.raises(UserError, match="^negatives must be positive"):
        reranker.train("no-index", [], None, tmp_path / "o", "no-model", reranker.TrainConfig(negatives=0))
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("command", ["train-qa", "train-orqa"])
def test_training_where_no_question_has_an_answer_bearing_block_is_one_line_before_any_model_loads(
    command, tiny, tmp_path, capsys, monkeypatch
):
    """Every question would be skipped: not a model "trained" on nothing and exit 0."""
    from test_reader import tiny_qa_model

    from tour_pyserini.training import encoder_io

    idx = tmp_path / "nq.minilm"
    cli("tour_pyserini.commands.index", ["--collection", tiny["nq"], "--output", idx])
    topics = tmp_path / "unanswerable.jsonl"
    topics.write_text(
        "".join(
            json.dumps({"qid": str(i), "question": f"question {i}", "answers": ["Zyzzyvaqx"]}) + "\n" for i in range(6)
        )
    )

    def no_model(*args, **kwargs):
        raise AssertionError("a model loaded although nothing can be trained")

    monkeypatch.setattr(encoder_io, "load_encoder", no_model)
    module, extra = TRAIN_QA, TINY_QA
    if command == "train-orqa":
        module, extra = "tour_pyserini.commands.train_orqa", ["--reader", tiny_qa_model(tmp_path / "reader")]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        cli(module, ["--index", idx, "--topics", topics, "--output", tmp_path / "out", *extra])
    lines = capsys.readouterr().err.strip().splitlines()  # the log's count of questions, then the one error line
    assert exited.value.code == 2 and [line for line in lines if line.startswith("error:")] == lines[-1:], lines
    assert f"no question's answers occur in any block of {idx} (DPR's match)" in lines[-1]
    assert not (tmp_path / "out").exists()
