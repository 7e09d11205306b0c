"""The query encoder through ONNX Runtime and OpenVINO: torch's vectors in fp32, int8 and bf16 as asked and the
same every time, the graph cached by the weights' hash, and every refusal one line before a model loads."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tour_pyserini.devices import native_bf16
from tour_pyserini.encoders import EncoderSettings, EncoderSpec, bundled_model_dir
from tour_pyserini.encoders.exported import check_exportable
from tour_pyserini.encoders.query import QueryEncoder, QueryEncoders, resolve_query_precision
from tour_pyserini.errors import UserError
from tour_pyserini.files import read_topics
from tour_pyserini.runtime.onnx import CACHE, graph_path


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    """The bundled MiniLM copied where its graphs may be cached (the installed package stays as it is)."""
    return Path(shutil.copytree(bundled_model_dir(), tmp_path_factory.mktemp("encoder") / "minilm"))


@pytest.fixture(scope="module")
def texts(mini_scifact) -> list[str]:
    texts = [t.text for t in read_topics(mini_scifact["topics"])]
    return texts + ["tumours", texts[0] + " in mice"]  # lengths far apart: chunks pad


def encoder(model: Path, runtime: str, precision: str = "fp32") -> QueryEncoder:
    return QueryEncoder.build(EncoderSpec.resolve(str(model)), precision=precision, runtime=runtime)


@pytest.fixture(scope="module")
def exact(model, texts) -> np.ndarray:
    return encoder(model, "torch").encode(texts)


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["onnx", "openvino"])
def test_float32_vectors_through_a_runtime_are_torchs(runtime, model, texts, exact):
    """Within the rounding of a matrix product of another shape, in padded chunks and alone."""
    ours = encoder(model, runtime)
    assert ours.graph is not None and ours.runtime == runtime
    vectors = ours.encode(texts)
    np.testing.assert_allclose(vectors, exact, rtol=0, atol=1e-5)
    np.testing.assert_allclose(ours.encode(texts[:1]), exact[:1], rtol=0, atol=1e-5)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)  # normalised as Pyserini's class says


@pytest.mark.slow
def test_int8_rounds_and_is_the_same_every_time(model, texts, exact, tmp_path):
    """Two copies of the model, each exported and quantised on its own: the same vectors to the bit, near
    float32's but not equal to them (the weights were quantised)."""
    other = Path(shutil.copytree(model, tmp_path / "again", ignore=shutil.ignore_patterns(CACHE)))
    first, second = (encoder(m, "onnx", "int8").encode(texts) for m in (model, other))
    assert np.array_equal(first, second)
    difference = np.abs(first - exact).max()
    assert 1e-4 < difference < 0.1


@pytest.mark.skipif(not native_bf16("cpu"), reason="this CPU has no native bfloat16 arithmetic")
def test_openvino_bf16_rounds_and_repeats_itself(model, texts, exact):
    ours = encoder(model, "openvino", "bf16")
    vectors = ours.encode(texts)
    assert np.array_equal(vectors, ours.encode(texts))
    assert 1e-4 < np.abs(vectors - exact).max() < 1e-2


@pytest.mark.slow
def test_the_graph_is_exported_once_beside_the_weights(model, texts, tmp_path, caplog):
    path = Path(shutil.copytree(model, tmp_path / "m", ignore=shutil.ignore_patterns(CACHE)))
    caplog.set_level(logging.INFO, logger="tour_pyserini.runtime")
    first = encoder(path, "openvino")
    graph = first.graph.path
    assert graph.is_relative_to(path / CACHE) and "exporting" in caplog.text
    stamp = graph.stat().st_mtime_ns
    caplog.clear()
    again = encoder(path, "openvino")
    assert again.graph.path == graph and graph.stat().st_mtime_ns == stamp and "exporting" not in caplog.text
    assert np.array_equal(first.encode(texts), again.encode(texts))


def test_a_read_only_model_directory_caches_its_graph_in_the_users_cache(tmp_path, monkeypatch):
    """A model installed as a package, in a directory this user may not write: the user's cache, keyed alike."""
    sha = "ab" * 32
    model = tmp_path / "model"
    model.mkdir()
    assert graph_path(model, sha, "fp32").parent == model / CACHE / f"{sha[:16]}-fp32-fused"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    writable = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != model and writable(p, mode))
    expected = tmp_path / "cache" / "tour_pyserini" / CACHE / f"{sha[:16]}-int8-fused" / "model.onnx"
    assert graph_path(model, sha, "int8") == expected


def test_auto_is_float32_through_every_runtime_and_bad_pairs_are_one_line():
    """int8 and bf16 reorder near-tied documents beyond the ranking bound (docs/benchmarks.md): auto keeps fp32."""
    for runtime in ("torch", "onnx", "openvino"):
        assert resolve_query_precision(None, "cpu", runtime) == resolve_query_precision("auto", "cpu", runtime)
        assert resolve_query_precision("auto", "cpu", runtime) == "fp32"
    assert resolve_query_precision("int8", "cpu", "onnx") == "int8"
    with pytest.raises(UserError, match=r"--encoder-precision int8 runs through ONNX Runtime only \(--encoder-runtime"):
        resolve_query_precision("int8", "cpu", "openvino")
    with pytest.raises(UserError, match="--encoder-precision bf16: ONNX Runtime's CPU kernels have no bfloat16"):
        resolve_query_precision("bf16", "cpu", "onnx")
    with pytest.raises(UserError, match="--encoder-runtime must be one of auto, torch, onnx, openvino, got 'tvm'"):
        resolve_query_precision("fp32", "cpu", "tvm")


def test_ways_of_one_model_share_its_loaded_weights(model, texts, exact):
    """A teacher's torch float32 encoder beside the searcher's OpenVINO one: no second copy of the model is
    loaded, and its vectors are still torch's own, bit for bit."""
    encoders = QueryEncoders()
    spec = EncoderSpec.resolve(str(model))
    through = encoders.get(spec, runtime="openvino")
    plain = encoders.get(spec)
    assert plain is not through and plain.graph is None and plain.pyserini is through.pyserini
    assert encoders.get(spec) is plain
    assert np.array_equal(plain.encode(texts), exact)


@pytest.mark.slow
def test_a_search_through_a_runtime_with_the_dense_teacher_loads_the_encoder_once(
    mini_scifact, model, tmp_path, encoder_loads
):
    """The dense teacher keeps torch's float32 (its scores are its fingerprint's); the searcher's OpenVINO graph
    is exported from the same loaded model."""
    index = dense_index_of(model, mini_scifact, tmp_path / "mini.minilm")
    loads = encoder_loads
    search(
        index,
        mini_scifact,
        tmp_path / "run.trec",
        "--rewriter",
        "tour-soft",
        "--teacher",
        "dense",
        "--depth",
        "10",
        "--encoder-runtime",
        "openvino",
    )
    assert len(loads) == 1


def test_only_the_plain_transformer_classes_run_through_a_runtime(model):
    check_exportable(EncoderSpec.resolve(str(model)), "onnx")
    dpr = EncoderSpec.resolve(str(model), settings=EncoderSettings(encoder_class="dpr"))
    check_exportable(dpr, "torch")
    with pytest.raises(UserError, match="--encoder-runtime onnx runs the auto, sentence, contriever encoder classes"):
        check_exportable(dpr, "onnx")


def dense_index_of(model: Path, mini_scifact, out: Path) -> Path:
    """The fixture collection's dense index encoded by ``model`` (whose graphs it may cache)."""
    from tour_pyserini.index.build import build_index
    from tour_pyserini.index.dense import write_dense_index

    build_index(out, lambda tmp: write_dense_index(mini_scifact["collection"], tmp, EncoderSpec.resolve(str(model))))
    return out


def search(dense_index, mini_scifact, out: Path, *flags) -> Path:
    from tour_pyserini.commands.search import main

    main(
        [
            "--index",
            str(dense_index),
            "--topics",
            str(mini_scifact["topics"]),
            "--output",
            str(out),
            "--hits",
            "20",
            *flags,
        ]
    )
    return out


def test_a_search_through_openvino_ranks_as_torch_and_writes_the_same_bytes_twice(
    dense_index, bm25_index, mini_scifact, model, tmp_path
):
    """TOUR with the BM25 teacher (whose query vector steps start from the encoder's): the runtime's run is
    torch's up to ties of 1e-5, and the same command writes the same bytes again (from the cached graph). With no
    flag (auto, the default) the command runs OpenVINO: the runtime extra is installed and the model is local."""
    from tour_pyserini.files.runs import read_run
    from tour_pyserini.files.sameness import diff_runs

    flags = ["--encoder", str(model), "--rewriter", "tour-soft", "--teacher", "bm25", "--depth", "10"]
    torch_run = search(dense_index, mini_scifact, tmp_path / "torch.trec", *flags, "--encoder-runtime", "torch")
    first = search(dense_index, mini_scifact, tmp_path / "first.trec", *flags)
    second = search(dense_index, mini_scifact, tmp_path / "second.trec", *flags, "--encoder-runtime", "openvino")
    assert first.read_bytes() == second.read_bytes()
    report = diff_runs(read_run(torch_run), read_run(first))
    assert report.same and report.queries == len(read_topics(mini_scifact["topics"])), report.summary()


@pytest.mark.parametrize(
    "flags, message",
    [
        (
            ["--encoder-precision", "int8"],
            "error: --encoder-precision int8 runs through ONNX Runtime only (--encoder-runtime onnx)",
        ),
        (
            ["--encoder-runtime", "onnx", "--encoder-precision", "bf16"],
            "error: --encoder-precision bf16: ONNX "
            "Runtime's CPU kernels have no bfloat16 matrix products; use fp32, int8 or auto",
        ),
        (
            ["--encoder-runtime", "onnx", "--encoded-queries", "/no/such/dir"],
            "error: --encoded-queries replaces the query encoder: give no --encoder or encoder flags",
        ),
    ],
)
def test_bad_encoder_runtime_flags_are_one_line_before_any_model_loads(
    flags, message, dense_index, mini_scifact, tmp_path, capsys
):
    from tour_pyserini.commands.runner import run_cli
    from tour_pyserini.commands.search import main

    out = tmp_path / "run.trec"
    with pytest.raises(SystemExit) as exit_info:
        run_cli(
            main, ["--index", str(dense_index), "--topics", str(mini_scifact["topics"]), "--output", str(out), *flags]
        )
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and [line for line in err.splitlines() if line.startswith("error:")] == [message]
    assert "Traceback" not in err and "Loading weights" not in err and not out.exists()


@pytest.mark.slow
def test_a_server_through_openvino_ranks_as_the_search_command_through_it(mini_scifact, bm25_index, model, tmp_path):
    """``serve --encoder-runtime openvino`` exports the index's encoder (no graph is there before it starts), its
    rankings are the search command's with the same flags, and /v1/status names the runtime."""
    from serve_server import Server, http_run

    from tour_pyserini.files.runs import read_run
    from tour_pyserini.files.sameness import diff_runs

    own = Path(shutil.copytree(model, tmp_path / "minilm", ignore=shutil.ignore_patterns(CACHE)))
    index = dense_index_of(own, mini_scifact, tmp_path / "mini.minilm")
    teacher = f"bm25:{bm25_index}"
    topics = read_topics(mini_scifact["topics"])
    with Server(
        "--index",
        str(index),
        "--teacher",
        teacher,
        "--encoder-runtime",
        "openvino",
        "--threads",
        "1",
        "--data-dir",
        str(tmp_path / "serve-data"),
    ) as server:
        assert (own / CACHE).is_dir()
        served = http_run(server, index.name, topics, {"rewriter": "tour-soft", "teacher": teacher, "k": "10"}, 20)
        status = server.get("/v1/status")[1]
    assert status["query_encoder"] == {"runtime": "openvino", "precision": "fp32"}
    cli = search(
        index,
        mini_scifact,
        tmp_path / "cli.trec",
        "--rewriter",
        "tour-soft",
        "--teacher",
        teacher,
        "--depth",
        "10",
        "--encoder-runtime",
        "openvino",
        "--threads",
        "1",
    )
    diff = diff_runs(read_run(cli), served)
    assert diff.same and diff.queries == len(topics), diff.summary()
