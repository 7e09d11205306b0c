"""Encoder names resolve to local weights with the right pooling, offline."""

from __future__ import annotations

import pytest

from tour_pyserini.encoders import DEFAULT_ENCODER, EncoderSpec, bundled_model_dir
from tour_pyserini.encoders.spec import check_model
from tour_pyserini.errors import UserError


def test_bundled_minilm_reads_its_sentence_transformers_config():
    spec = EncoderSpec.resolve(DEFAULT_ENCODER)
    assert spec.path == str(bundled_model_dir())
    assert (spec.pooling, spec.l2_norm, spec.max_length) == ("mean", True, 256)


def test_overrides_and_local_directories():
    spec = EncoderSpec.resolve(str(bundled_model_dir()), pooling="cls", l2_norm=False, max_length=128)
    assert (spec.pooling, spec.l2_norm, spec.max_length) == ("cls", False, 128)


def test_a_model_that_cannot_load_here_is_one_line_before_anything_loads(tmp_path, monkeypatch):
    from huggingface_hub import constants

    with pytest.raises(UserError, match="no such model directory"):
        EncoderSpec.resolve(str(tmp_path / "no-model"))
    (tmp_path / "not-a-model").mkdir()
    with pytest.raises(UserError, match="'.*not-a-model' is not a HuggingFace model directory \\(no config.json\\)"):
        EncoderSpec.resolve(str(tmp_path / "not-a-model"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(UserError, match="'nobody/no-such-model' is neither a local directory nor in the Hugging Face "
                                        "cache, and the hub is offline"):  # fmt: skip
        EncoderSpec.resolve("nobody/no-such-model")
    with pytest.raises(UserError, match="cross-encoder 'nobody/no-such-model' is neither"):
        check_model("cross-encoder", "nobody/no-such-model")


def test_search_with_an_encoder_directory_that_is_not_a_model_is_one_line(dense_index, mini_scifact, tmp_path):
    from test_cli import run_module

    (tmp_path / "empty").mkdir()
    out = tmp_path / "run.trec"
    proc = run_module("tour_pyserini.search", "--index", str(dense_index), "--topics", str(mini_scifact["topics"]),
                      "--output", str(out), "--encoder", str(tmp_path / "empty"))  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("error:")] == [
        f"error: encoder '{tmp_path / 'empty'}' is not a HuggingFace model directory (no config.json)"
    ]
    assert not out.exists() and not out.with_name("run.trec.partial").exists()
