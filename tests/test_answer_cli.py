"""The answer command on nq-oracle with a tiny random QA model: predictions that eval scores, an interrupted
run resumed to the same bytes, the lock, and bad input as one line and exit 2 before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_reader import tiny_qa_model

from tour_pyserini.answer import Reader
from tour_pyserini.commands.answer import main as answer_main
from tour_pyserini.commands.eval import main as eval_main
from tour_pyserini.commands.runner import run_cli
from tour_pyserini.encoders import bundled_model_dir
from tour_pyserini.errors import UserError
from tour_pyserini.files import read_topics
from tour_pyserini.files.predictions import PredictionWriter, read_predictions

NQ = "collections/nq-oracle"
TOPICS = f"{NQ}/topics.test.jsonl"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return str(tiny_qa_model(tmp_path_factory.mktemp("tiny-qa")))


@pytest.fixture()
def run(tmp_path):
    """Six test questions, each with three nq-oracle passages (whatever they are: the reader reads them)."""
    topics = read_topics(TOPICS)[:6]
    path = tmp_path / "run.trec"
    path.write_text(
        "".join(
            f"{t.qid} Q0 {d} {r} {1.0 - r / 10:.6f} t\n"
            for i, t in enumerate(topics)
            for r, d in enumerate([str(i), str(i + 100), str(i + 200)], 1)
        )
    )
    return path


def answer(run, tiny, output, *extra):
    answer_main(
        [
            "--run",
            str(run),
            "--topics",
            TOPICS,
            "--collection",
            NQ,
            "--reader",
            tiny,
            "--k",
            "2",
            "--max-length",
            "96",
            "--stride",
            "24",
            "--output",
            str(output),
            *extra,
        ]
    )


@pytest.mark.slow
def test_predictions_are_written_and_scored(tmp_path, run, tiny, capsys):
    out = tmp_path / "p.jsonl"
    answer(run, tiny, out)
    preds = read_predictions(out)
    assert len(preds) == 6 and all(p.answer and p.docid for p in preds.values())
    first = json.loads(out.read_text().splitlines()[0])
    assert set(first) == {"qid", "answer", "docid", "score"}
    first_two: dict[str, set] = {}
    for line in run.read_text().splitlines():
        qid, _, docid, rank, _, _ = line.split()
        if int(rank) <= 2:  # --k 2
            first_two.setdefault(qid, set()).add(docid)
    assert all(p.docid in first_two[q] for q, p in preds.items())
    capsys.readouterr()
    eval_main(["--predictions", str(out), "--answers", TOPICS, "--json"])
    scores = json.loads(capsys.readouterr().out)
    assert set(scores) == {"EM", "F1"} and 0.0 <= scores["EM"] <= scores["F1"] <= 1.0


@pytest.mark.slow
def test_an_indexs_document_store_reads_the_same_passages_as_the_collection(tmp_path, run, tiny, mini_nq, capsys):
    """``--index``: the passages come from the index's document store (mini_nq's BM25 index holds nq-oracle's first
    300 passages, which the run names), so the answers are the collection's; a passage the store lacks is one line."""
    from_collection, from_index = tmp_path / "collection.jsonl", tmp_path / "index.jsonl"
    answer(run, tiny, from_collection)
    answer_main(
        [
            "--run",
            str(run),
            "--topics",
            TOPICS,
            "--index",
            str(mini_nq["bm25"]),
            "--reader",
            tiny,
            "--k",
            "2",
            "--max-length",
            "96",
            "--stride",
            "24",
            "--output",
            str(from_index),
        ]
    )
    assert from_index.read_bytes() == from_collection.read_bytes()
    run.write_text(run.read_text().replace(" Q0 1 ", " Q0 1000 "))  # nq-oracle's, but not in the mini index
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        run_cli(
            answer_main,
            [
                "--run",
                str(run),
                "--topics",
                TOPICS,
                "--index",
                str(mini_nq["bm25"]),
                "--reader",
                tiny,
                "--output",
                str(tmp_path / "missing.jsonl"),
            ],
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1 and "'1000'" in err, err


def test_an_interrupted_run_resumes_to_the_same_bytes(tmp_path, run, tiny, monkeypatch, capsys):
    whole = tmp_path / "whole.jsonl"
    answer(run, tiny, whole, "--questions-per-batch", "2")
    original, calls = Reader.read, []

    def read_twice_then_stop(self, questions):
        calls.append(len(questions))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return original(self, questions)

    monkeypatch.setattr(Reader, "read", read_twice_then_stop)
    cut = tmp_path / "cut.jsonl"
    with pytest.raises(KeyboardInterrupt, match="keeps 4 answered questions; run the same command again"):
        answer(run, tiny, cut, "--questions-per-batch", "2")
    assert not cut.exists() and len(cut.with_name("cut.jsonl.partial").read_text().splitlines()) == 4
    monkeypatch.setattr(Reader, "read", original)
    answer(run, tiny, cut, "--questions-per-batch", "2")
    assert "resuming" in capsys.readouterr().err
    assert cut.read_bytes() == whole.read_bytes()
    assert not cut.with_name("cut.jsonl.partial").exists() and not cut.with_name("cut.jsonl.partial.json").exists()


def test_a_second_writer_is_refused_while_the_first_holds_the_output(tmp_path):
    out = tmp_path / "p.jsonl"
    with PredictionWriter(out):
        with pytest.raises(UserError, match="is locked"):
            PredictionWriter(out)


@pytest.mark.parametrize(
    "case, message",
    [
        ("other-collection", "passages are not in collections/nq-oracle (a run over another collection?)"),
        ("not-qa", "is not an extractive QA model: its config names BertModel"),
        ("no-model", "no such model directory"),
        ("no-common-question", "have no question in common"),
        ("bad-stride", "--stride 60 must be below half of --max-length 96"),
        ("no-room", "--max-length 6 with --stride 2 leaves no room for a question"),
        ("no-weights", "has a config but no weights (none of model.safetensors"),
        ("onnx-bf16", "--precision bf16: ONNX Runtime's CPU kernels have no bfloat16 matrix products"),
        ("openvino-int8", "--precision int8 runs through ONNX Runtime only (--runtime onnx)"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_any_model_loads(
    tmp_path, run, tiny, monkeypatch, capsys, case, message
):
    def no_model(*args, **kwargs):
        raise AssertionError("a model loaded before the input was checked")

    monkeypatch.setattr(Reader, "__init__", no_model)
    reader, extra = tiny, []
    if case == "other-collection":
        run.write_text(run.read_text().replace(" Q0 1 ", " Q0 scifact-4983 "))
    elif case == "not-qa":
        reader = str(bundled_model_dir())
    elif case == "no-model":
        reader = str(tmp_path / "missing")
    elif case == "no-common-question":
        run.write_text("nope Q0 1 1 1.0 t\n")
    elif case == "bad-stride":
        extra = ["--stride", "60"]
    elif case == "no-room":
        extra = ["--max-length", "6", "--stride", "2"]
    elif case == "onnx-bf16":
        extra = ["--runtime", "onnx", "--precision", "bf16"]
    elif case == "openvino-int8":
        extra = ["--runtime", "openvino", "--precision", "int8"]
    elif case == "no-weights":
        reader = str(tmp_path / "no-weights")
        (tmp_path / "no-weights").mkdir()
        for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
            (tmp_path / "no-weights" / name).write_bytes((Path(tiny) / name).read_bytes())
    out = tmp_path / "p.jsonl"
    argv = [
        "--run",
        str(run),
        "--topics",
        TOPICS,
        "--collection",
        NQ,
        "--reader",
        reader,
        "--max-length",
        "96",
        "--stride",
        "24",
        "--output",
        str(out),
        *extra,
    ]
    with pytest.raises(SystemExit) as exit_info:
        run_cli(answer_main, argv)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists() and not out.with_name("p.jsonl.partial").exists()
