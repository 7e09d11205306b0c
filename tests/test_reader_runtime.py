"""The reader through ONNX Runtime and OpenVINO: torch's logits and answers in fp32, int8 the same every time, the
graph exported once beside the weights, and the answer command's runtime recorded with its output."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
from test_answer_cli import NQ, TOPICS
from test_reader import QUESTIONS, tiny_qa_model

from tour_pyserini.answer import Reader, ReaderOptions
from tour_pyserini.answer.windows import make_windows
from tour_pyserini.commands.answer import main as answer_main
from tour_pyserini.devices import native_bf16
from tour_pyserini.files import read_topics
from tour_pyserini.runtime.onnx import CACHE

SHIPPED = Path("models/nq-oracle-reader")


@pytest.fixture(scope="module", params=["bert", "distilbert"])
def tiny(request, tmp_path_factory) -> Path:
    """A random-weight QA model: BERT (token type ids) and DistilBERT (none)."""
    return tiny_qa_model(tmp_path_factory.mktemp(f"tiny-{request.param}"), request.param)


def reader(model: Path, runtime: str = "torch", precision: str = "fp32") -> Reader:
    return Reader(str(model), ReaderOptions(max_length=96, stride=24, runtime=runtime, precision=precision))


def windows(r: Reader):
    texts = [(q.text, p.text) for q in QUESTIONS for p in q.passages]
    return make_windows(r.tokenizer, [q for q, _ in texts], [p for _, p in texts], max_length=96, stride=24)


@pytest.mark.parametrize("runtime", ["onnx", "openvino"])
def test_float32_logits_and_answers_through_a_runtime_are_torchs(runtime, tiny):
    exact, ours = reader(tiny), reader(tiny, runtime)
    assert ours.model is None and ours.graph is not None
    ws = windows(exact)
    assert len({len(w.input_ids) for w in ws}) > 1  # batches pad
    for (s0, e0), (s1, e1) in zip(exact.logits(ws), ours.logits(ws)):
        assert s1.shape == s0.shape and e1.shape == e0.shape
        np.testing.assert_allclose(s1, s0, rtol=0, atol=1e-5)
        np.testing.assert_allclose(e1, e0, rtol=0, atol=1e-5)
    first, second = exact.read(QUESTIONS), ours.read(QUESTIONS)
    assert [(p.answer, p.docid) for p in first] == [(p.answer, p.docid) for p in second]
    np.testing.assert_allclose([p.score for p in second], [p.score for p in first], rtol=0, atol=1e-4)


@pytest.mark.slow
def test_int8_rounds_and_is_the_same_every_time(tiny, tmp_path):
    """Two copies, each exported and quantised on its own: the same logits to the bit, near float32's."""
    other = Path(shutil.copytree(tiny, tmp_path / "again", ignore=shutil.ignore_patterns(CACHE)))
    exact = reader(tiny)
    ws = windows(exact)
    first, second = (reader(m, "onnx", "int8").logits(ws) for m in (tiny, other))
    assert all(np.array_equal(a, b) for x, y in zip(first, second) for a, b in zip(x, y))
    difference = max(np.abs(a - b).max() for x, y in zip(first, exact.logits(ws)) for a, b in zip(x, y))
    assert 1e-5 < difference < 0.5


@pytest.mark.skipif(not native_bf16("cpu"), reason="this CPU has no native bfloat16 arithmetic")
def test_openvino_bf16_rounds_and_repeats_itself(tiny):
    exact, ours = reader(tiny), reader(tiny, "openvino", "bf16")
    ws = windows(exact)
    once, again = ours.logits(ws), ours.logits(ws)
    assert all(np.array_equal(a, b) for x, y in zip(once, again) for a, b in zip(x, y))
    difference = max(np.abs(a - b).max() for x, y in zip(once, exact.logits(ws)) for a, b in zip(x, y))
    assert 1e-5 < difference < 0.1


def test_the_graph_is_exported_once_beside_the_weights(tiny, tmp_path, caplog):
    path = Path(shutil.copytree(tiny, tmp_path / "m", ignore=shutil.ignore_patterns(CACHE)))
    caplog.set_level(logging.INFO, logger="tour_pyserini.runtime")
    graph = reader(path, "onnx").graph.path
    assert graph.is_relative_to(path / CACHE) and "exporting" in caplog.text
    stamp = graph.stat().st_mtime_ns
    caplog.clear()
    assert reader(path, "onnx").graph.path == graph and graph.stat().st_mtime_ns == stamp
    assert "exporting" not in caplog.text
    record = json.loads((graph.parent / "graph.json").read_text())
    assert record["precision"] == "fp32" and len(record["weights_sha256"]) == 64


@pytest.mark.slow
def test_the_shipped_reader_answers_as_torch_through_openvino(tmp_path):
    """The trained reader (a real MiniLM QA model) on nq-oracle test questions, a passage each: the answer
    command's answers through OpenVINO in fp32 are torch's."""
    model = shutil.copytree(SHIPPED, tmp_path / "reader", ignore=shutil.ignore_patterns(CACHE))
    topics = read_topics(TOPICS)[:8]
    run = tmp_path / "run.trec"
    run.write_text("".join(f"{t.qid} Q0 {i} 1 1.0 t\n" for i, t in enumerate(topics)))  # whatever passage i says
    outputs = {}
    for runtime in ("torch", "openvino"):
        outputs[runtime] = tmp_path / f"{runtime}.jsonl"
        answer_main(
            [
                "--run",
                str(run),
                "--topics",
                TOPICS,
                "--collection",
                NQ,
                "--reader",
                str(model),
                "--k",
                "1",
                "--runtime",
                runtime,
                "--precision",
                "fp32",
                "--output",
                str(outputs[runtime]),
            ]
        )
    torch_preds, ours = ([json.loads(line) for line in outputs[r].read_text().splitlines()] for r in outputs)
    assert [(p["qid"], p["answer"]) for p in ours] == [(p["qid"], p["answer"]) for p in torch_preds]
    assert sum(bool(p["answer"]) for p in ours) == len(topics)
    np.testing.assert_allclose([p["score"] for p in ours], [p["score"] for p in torch_preds], rtol=0, atol=1e-4)


def test_auto_is_the_fastest_precision_within_the_readers_bounds():
    """int8 failed the reader's bound, so auto through ONNX Runtime is fp32; through torch and OpenVINO it is bf16
    where native, as for a teacher."""
    from tour_pyserini.answer import resolve_reader_precision

    native = "bf16" if native_bf16("cpu") else "fp32"
    assert resolve_reader_precision("auto", "onnx", "cpu") == "fp32"
    assert resolve_reader_precision("int8", "onnx", "cpu") == "int8"
    assert resolve_reader_precision("auto", "torch", "cpu") == native
    assert resolve_reader_precision("auto", "openvino", "cpu") == native


def test_a_runtime_needs_a_local_model_directory(tmp_path):
    """The graph is cached beside the weights: a hub id (no such directory) is one line through a runtime, and
    anything goes through torch."""
    from tour_pyserini.errors import UserError
    from tour_pyserini.runtime import check_model_directory

    check_model_directory("org/some-reader", "torch", "--runtime", "reader 'org/some-reader'")
    check_model_directory(tmp_path, "onnx", "--runtime", "reader")
    with pytest.raises(
        UserError,
        match=r"^reader 'org/some-reader': --runtime openvino caches the exported model "
        r"beside its weights; give a local model directory$",
    ):
        check_model_directory("org/some-reader", "openvino", "--runtime", "reader 'org/some-reader'")
