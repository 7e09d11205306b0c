"""The cross-encoder teacher through ONNX Runtime: float32 scores as torch's, the exported graph cached beside the
weights once, int8 the same bytes every run, stores that never mix runtimes, bad input one line."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
import torch
from conftest import ROOT
from transformers import AutoConfig, AutoTokenizer

from tour_pyserini.devices import exact_int8, native_bf16
from tour_pyserini.errors import UserError
from tour_pyserini.files import read_qrels, read_topics
from tour_pyserini.index.corpus import read_jsonl_corpus
from tour_pyserini.runtime.onnx import CACHE, OnnxModel
from tour_pyserini.runtime.openvino import OpenVinoModel
from tour_pyserini.teachers.cross_encoder import CrossEncoderTeacher, pair_text

MODEL = ROOT / "models" / "scifact-rce"


@pytest.fixture(scope="module")
def pairs(mini_scifact) -> list[tuple[str, list[str]]]:
    """Three judged SciFact test claims, each with its relevant abstracts and the same 8 others."""
    qrels = read_qrels(mini_scifact["qrels"])
    docs = {doc.docid: pair_text(doc) for doc in read_jsonl_corpus(mini_scifact["collection"] / "corpus.jsonl")}
    others = [d for d in docs if not any(d in judged for judged in qrels.values())][:8]
    return [(t.text, [docs[d] for d in [*qrels[t.qid], *others]]) for t in read_topics(mini_scifact["topics"])[:3]]


def scores(teacher: CrossEncoderTeacher, pairs) -> np.ndarray:
    return np.concatenate([teacher.score_pairs([query] * len(texts), texts) for query, texts in pairs])


def copy_model(source, target):
    """A model directory of its own (the cache is written beside the weights), without any graph cached."""
    return shutil.copytree(source, target, ignore=shutil.ignore_patterns(CACHE))


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    return copy_model(MODEL, tmp_path_factory.mktemp("rt") / "scifact-rce")


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["onnx", "openvino"])
@pytest.mark.parametrize("which", ["shipped", "tiny"])
def test_float32_scores_through_a_runtime_equal_torchs(which, runtime, shipped, cross_encoder_dir, pairs, tmp_path):
    """The shipped teacher's classifier and a random-headed MiniLM: every score within 1e-5 of torch's, through
    ONNX Runtime's fused graph and through OpenVINO compiling the graph as traced."""
    path = shipped if which == "shipped" else copy_model(cross_encoder_dir, tmp_path / "tiny")
    exact = scores(CrossEncoderTeacher(path, precision="fp32", runtime="torch"), pairs)
    teacher = CrossEncoderTeacher(path, precision="fp32", runtime=runtime)
    assert np.abs(exact - scores(teacher, pairs)).max() < 1e-5
    assert np.ptp(exact) > 1e-2  # scores that spread 1,000 times the tolerance: the comparison means something
    layers = AutoConfig.from_pretrained(path).num_hidden_layers
    fused = operators(teacher.graph.path)["Attention"]
    assert fused == (layers if runtime == "onnx" else 0)  # ONNX Runtime's graph fused; OpenVINO fuses its own
    assert teacher.graph.path.parent.name.endswith("-fused" if runtime == "onnx" else "-fp32-plain")


@pytest.mark.slow
@pytest.mark.skipif(not native_bf16("cpu"), reason="this CPU has no native bfloat16 arithmetic")
def test_openvino_bf16_rounds_and_repeats_itself(shipped, pairs):
    """OpenVINO's bfloat16 hint: scores that are not float32's but near them, the same twice, and auto's choice
    where the CPU multiplies in bfloat16 (torch's rule)."""
    exact = scores(CrossEncoderTeacher(shipped, precision="fp32", runtime="torch"), pairs)
    teacher = CrossEncoderTeacher(shipped, precision="bf16", runtime="openvino")
    a, b = scores(teacher, pairs), scores(teacher, pairs)
    assert np.array_equal(a, b) and not np.array_equal(a, exact) and np.abs(a - exact).max() < 0.2
    assert CrossEncoderTeacher(shipped, runtime="openvino").precision == "bf16"


def operators(graph) -> Counter:
    import onnx

    return Counter(node.op_type for node in onnx.load(str(graph)).graph.node)


@pytest.mark.slow
def test_a_fusion_that_changes_the_output_beyond_the_tolerance_is_not_kept(
    cross_encoder_dir, tmp_path, monkeypatch, caplog
):
    """With no difference tolerated, the fused graph (within 1e-5 of torch, not equal to the plain graph) is
    refused: the plain graph stays as exported, bit for bit, and the log says so."""
    from tour_pyserini.runtime import onnx as runtime
    from tour_pyserini.teachers.cross_encoder import load_classifier, pair_inputs

    tokenizer = AutoTokenizer.from_pretrained(cross_encoder_dir)
    examples = pair_inputs(tokenizer, ["a query", "another query"], ["a document", "a longer text"], 32)
    model = load_classifier(str(cross_encoder_dir), "cpu", attn_implementation="eager")
    runtime.trace_graph(model, examples, "logits", tmp_path / "plain.onnx")
    plain = (tmp_path / "plain.onnx").read_bytes()
    config = model.config
    monkeypatch.setattr(runtime, "FUSED_TOLERANCE", 0.0)
    assert not runtime.fuse_graph(tmp_path / "plain.onnx", config.num_attention_heads, config.hidden_size, examples)
    assert (tmp_path / "plain.onnx").read_bytes() == plain and "Attention" not in operators(tmp_path / "plain.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.onnx"] and "keeping its unfused graph" in caplog.text
    monkeypatch.undo()
    assert runtime.fuse_graph(tmp_path / "plain.onnx", config.num_attention_heads, config.hidden_size, examples)
    assert operators(tmp_path / "plain.onnx")["Attention"] == config.num_hidden_layers


@pytest.mark.slow
def test_the_graph_is_exported_once_and_a_changed_weight_gets_a_new_one(cross_encoder_dir, pairs, tmp_path, caplog):
    path = copy_model(cross_encoder_dir, tmp_path / "model")
    caplog.set_level(logging.INFO, logger="tour_pyserini.runtime")
    first = CrossEncoderTeacher(path, precision="fp32", runtime="onnx")
    graph = first.graph.path
    assert graph.is_relative_to(path / CACHE) and "exporting" in caplog.text
    stamp = graph.stat().st_mtime_ns
    caplog.clear()
    again = CrossEncoderTeacher(path, precision="fp32", runtime="onnx")
    assert again.graph.path == graph and graph.stat().st_mtime_ns == stamp and "exporting" not in caplog.text
    assert np.array_equal(scores(first, pairs), scores(again, pairs))
    folder = graph.parent.name  # staged apart, then renamed; beside it, the lock its export held
    assert sorted(p.name for p in (path / CACHE).iterdir()) == sorted([folder, f".{folder}.lock"])

    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(path)
    with torch.no_grad():
        model.classifier.bias += 1.0
    model.save_pretrained(path)
    changed = CrossEncoderTeacher(path, precision="fp32", runtime="onnx")
    assert changed.graph.path.parent != graph.parent and "exporting" in caplog.text
    assert np.allclose(scores(changed, pairs), scores(first, pairs) + 1.0, atol=1e-5)


@pytest.mark.slow
def test_int8_is_the_same_bytes_every_time_and_quantises(shipped, pairs, tmp_path):
    """Two copies of the model, each exported and quantised on its own: the same graph, the same scores to the
    bit; scores that are not float32's (the weights were quantised) but close to them."""
    other = copy_model(MODEL, tmp_path / "again")
    first, second = (CrossEncoderTeacher(p, precision="int8", runtime="onnx") for p in (shipped, other))
    assert first.graph.path.read_bytes() == second.graph.path.read_bytes()
    fp32 = first.graph.path.parents[1] / first.graph.path.parent.name.replace("int8", "fp32") / "model.onnx"
    assert first.graph.path.stat().st_size < fp32.stat().st_size / 3  # 8-bit weights
    a, b = scores(first, pairs), scores(second, pairs)
    assert np.array_equal(a, b)
    exact = scores(CrossEncoderTeacher(shipped, precision="fp32", runtime="torch"), pairs)
    assert not np.array_equal(a, exact) and np.abs(a - exact).max() < 1.0


@pytest.mark.slow
def test_a_search_through_int8_writes_the_same_bytes_twice(shipped, dense_index, mini_scifact, tmp_path):
    """The residual teacher (logit through ONNX Runtime, plus 20 x the retriever's similarity) re-ranking by
    the search command: the same run, byte for byte, from a fresh graph and from the cached one."""
    from tour_pyserini.commands.search import main

    runs = [tmp_path / "first.trec", tmp_path / "second.trec"]
    for run in runs:
        main(
            [
                "--index",
                str(dense_index),
                "--topics",
                str(mini_scifact["topics"]),
                "--output",
                str(run),
                "--teacher",
                f"cross-encoder:{shipped}",
                "--teacher-runtime",
                "onnx",
                "--teacher-precision",
                "int8",
                "--rewriter",
                "rerank",
                "--depth",
                "5",
                "--hits",
                "10",
            ]
        )
    assert runs[0].read_bytes() == runs[1].read_bytes() and runs[0].stat().st_size > 0


@pytest.mark.slow
def test_fingerprints_name_the_runtime_and_precision(cross_encoder_dir):
    prints = {
        (r, p): CrossEncoderTeacher(cross_encoder_dir, precision=p, runtime=r).fingerprint
        for r, p in [("torch", "fp32"), ("onnx", "fp32"), ("onnx", "int8"), ("openvino", "fp32")]
    }
    assert len(set(prints.values())) == 4
    assert prints["openvino", "fp32"] == prints["torch", "fp32"].replace(" weights", " runtime openvino weights")
    assert "runtime" not in prints["torch", "fp32"]  # as before runtimes existed: float32 stores stay usable
    assert prints["onnx", "fp32"] == prints["torch", "fp32"].replace(" weights", " runtime onnx fused weights")
    assert " precision int8 runtime onnx fused weights" in prints["onnx", "int8"]


def test_auto_through_onnx_is_int8_the_fastest_precision_within_the_bounds(cross_encoder_dir):
    """int8 re-ranked SciFact and nq-oracle within the bounds of float32 where the CPU has VNNI
    (docs/benchmarks.md), so auto through ONNX Runtime is int8 there; through torch it stays torch's own choice."""
    teacher = CrossEncoderTeacher(cross_encoder_dir, runtime="onnx")
    if exact_int8():
        assert teacher.precision == "int8" and teacher.graph.path.parent.name.endswith("-int8-fused")
    else:
        assert teacher.precision == "fp32"
    assert CrossEncoderTeacher(cross_encoder_dir).precision in ("fp32", "bf16")


def test_auto_is_openvino_where_it_can_run_the_model_and_torch_elsewhere(cross_encoder_dir, monkeypatch, caplog):
    """The default runtime: OpenVINO (the fastest way within every measured bound) for a local model on the CPU;
    torch on a GPU, for a hub id or a class no runtime runs, and where the runtime extra is missing, which is said
    once. A teacher made with the default is the one asked for by name: the same runtime, the same fingerprint."""
    from tour_pyserini.errors import warn_once
    from tour_pyserini.runtime import resolve_runtime

    def resolve(model=cross_encoder_dir, device="cpu", exportable=True):
        return resolve_runtime("auto", device, model, "--r", "the model", exportable=exportable)

    assert resolve() == "openvino" and resolve_runtime("onnx", "cpu", "org/hub-id", "--r", "m") == "onnx"
    assert resolve(device="cuda") == resolve(model="org/hub-id") == resolve(exportable=False) == "torch"
    auto = CrossEncoderTeacher(cross_encoder_dir)
    assert auto.runtime == "openvino"
    assert auto.fingerprint == CrossEncoderTeacher(cross_encoder_dir, runtime="openvino").fingerprint
    monkeypatch.setitem(sys.modules, "openvino", None)  # as if the runtime extra were not installed
    warn_once.cache_clear()
    with caplog.at_level(logging.WARNING):
        assert resolve() == resolve() == "torch"
    assert [r.getMessage() for r in caplog.records] == [
        "--r auto: torch runs the model, since the runtime extra is not installed (openvino); pip install "
        "'tour-pyserini[runtime]' runs it through OpenVINO, faster within the same bounds"
    ]
    assert CrossEncoderTeacher(cross_encoder_dir).runtime == "torch"


def test_without_vnni_auto_through_onnx_is_fp32_and_int8_warns(monkeypatch, caplog):
    """Without VNNI, ONNX Runtime's int8 sums saturate and nq-oracle fell outside the bound: auto is fp32, and
    int8 asked for runs with a warning."""
    from tour_pyserini.errors import warn_once
    from tour_pyserini.runtime import choice

    monkeypatch.setattr(choice, "exact_int8", lambda: False)
    warn_once.cache_clear()
    assert choice.resolve_runtime_precision("auto", "onnx", "cpu", "--p", "--r") == "fp32"
    assert not caplog.records
    with caplog.at_level(logging.WARNING):
        assert choice.resolve_runtime_precision("int8", "onnx", "cpu", "--p", "--r") == "int8"
    assert ["--p int8 on a CPU without VNNI" in r.getMessage() for r in caplog.records] == [True]
    monkeypatch.setattr(choice, "exact_int8", lambda: True)
    assert choice.resolve_runtime_precision("auto", "onnx", "cpu", "--p", "--r") == "int8"


@pytest.mark.slow
def test_a_cpu_that_reports_no_vnni_gets_fp32_through_onnx(tmp_path):
    """The processor's own answer decides: told by CPUID that it is an AVX2-only CPU (tests/avx2_cpu.c,
    preloaded, where the processor can fault on CPUID), auto through ONNX Runtime is fp32 on it."""
    with open("/proc/cpuinfo") as f:
        if "cpuid_fault" not in f.read().split() or shutil.which("cc") is None:
            pytest.skip("needs a processor that can fault on CPUID, and a C compiler")
    library = tmp_path / "avx2_cpu.so"
    subprocess.run(
        ["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(ROOT / "tests" / "avx2_cpu.c")], check=True
    )
    code = (
        "from tour_pyserini.devices import exact_int8; from tour_pyserini.runtime import resolve_runtime_precision;"
        "print(exact_int8(), resolve_runtime_precision('auto', 'onnx', 'cpu', '--p', '--r'))"
    )
    told = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "LD_PRELOAD": str(library)},
    ).stdout.split()
    assert told == ["False", "fp32"]
    own = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert own == ([str(exact_int8()), "int8" if exact_int8() else "fp32"])


@pytest.mark.slow
def test_the_runtimes_run_torchs_thread_count(cross_encoder_dir, tmp_path):
    """What the process chose for torch (``--threads``, else its default), not what the machine's load leaves."""
    path = copy_model(cross_encoder_dir, tmp_path / "m")
    onnx = CrossEncoderTeacher(path, precision="fp32", runtime="onnx").graph
    openvino = CrossEncoderTeacher(path, precision="fp32", runtime="openvino").graph
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            assert OnnxModel(onnx.path).session.get_session_options().intra_op_num_threads == n
            compiled = OpenVinoModel(openvino.path, "fp32").compiled
            assert compiled.get_property("INFERENCE_NUM_THREADS") == n
    finally:
        torch.set_num_threads(threads)


def search(dense_index, mini_scifact, tmp_path, *flags):
    """The search command's exit status, as a shell sees it, on flags it refuses."""
    from tour_pyserini.commands.runner import run_cli
    from tour_pyserini.commands.search import main

    out = tmp_path / "run.trec"
    with pytest.raises(SystemExit) as exit_info:
        run_cli(
            main,
            [
                "--index",
                str(dense_index),
                "--topics",
                str(mini_scifact["topics"]),
                "--output",
                str(out),
                "--rewriter",
                "rerank",
                *flags,
            ],
        )
    assert not out.exists() and not out.with_name("run.trec.partial").exists()
    return exit_info.value.code


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--teacher-precision", "int8"],
            "error: --teacher-precision int8 runs through ONNX Runtime only (--teacher-runtime onnx)",
        ),
        (
            ["--teacher-runtime", "onnx", "--teacher-precision", "bf16"],
            "error: --teacher-precision bf16: ONNX "
            "Runtime's CPU kernels have no bfloat16 matrix products; use fp32, int8 or auto",
        ),
        (
            ["--teacher-runtime", "openvino", "--teacher-precision", "int8"],
            "error: --teacher-precision int8 runs through ONNX Runtime only (--teacher-runtime onnx)",
        ),
    ],
)
def test_bad_runtime_and_precision_are_one_line_before_any_model_loads(
    flags, message, dense_index, mini_scifact, tmp_path, capsys
):
    code = search(dense_index, mini_scifact, tmp_path, "--teacher", "cross-encoder:/no/such/model", *flags)
    err = capsys.readouterr().err
    assert code == 2 and [line for line in err.splitlines() if line.startswith("error:")] == [message]
    assert "Traceback" not in err


def test_an_unknown_runtime_and_a_runtime_for_another_teacher_are_refused(dense_index, mini_scifact, tmp_path, capsys):
    assert (
        search(
            dense_index, mini_scifact, tmp_path, "--teacher", f"cross-encoder:{MODEL}", "--teacher-runtime", "tensorrt"
        )
        == 2
    )
    assert "--teacher-runtime: invalid choice: 'tensorrt'" in capsys.readouterr().err
    assert search(dense_index, mini_scifact, tmp_path, "--teacher", "bm25", "--teacher-runtime", "onnx") == 2
    assert "error: --teacher-runtime: not an option of the bm25 teacher" in capsys.readouterr().err
    with pytest.raises(UserError, match="--teacher-runtime must be one of auto, torch, onnx, openvino, got 'tvm'"):
        CrossEncoderTeacher("/no/such/model", runtime="tvm")  # the library's own check, before the path's


@pytest.mark.slow
def test_openvino_exports_and_runs_without_onnx_runtime(cross_encoder_dir, pairs, tmp_path, monkeypatch):
    """The plain graph OpenVINO reads is torch's export alone: with ONNX Runtime missing it is made, recorded
    without ONNX Runtime's version, and scores as torch does."""
    import json

    path = copy_model(cross_encoder_dir, tmp_path / "m")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if not installed
    teacher = CrossEncoderTeacher(path, precision="fp32", runtime="openvino")
    record = json.loads((teacher.graph.path.parent / "graph.json").read_text())
    assert record["recipe"] == "plain" and "onnxruntime" not in record and "onnx" in record
    monkeypatch.undo()
    exact = scores(CrossEncoderTeacher(path, precision="fp32", runtime="torch"), pairs)
    assert np.abs(exact - scores(teacher, pairs)).max() < 1e-5


@pytest.mark.parametrize("runtime, module", [("onnx", "onnxruntime"), ("openvino", "openvino")])
def test_without_the_runtime_the_error_names_the_extra(
    runtime, module, dense_index, mini_scifact, tmp_path, capsys, monkeypatch
):
    monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    code = search(
        dense_index,
        mini_scifact,
        tmp_path,
        "--teacher",
        f"cross-encoder:{MODEL}",
        "--teacher-runtime",
        runtime,
        "--teacher-precision",
        "fp32",
    )
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and errors == [
        f"error: --teacher-runtime {runtime} needs the runtime extra ({module} is not "
        "installed): pip install 'tour-pyserini[runtime]'"
    ]
