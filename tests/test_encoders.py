"""Encoder names resolve to local weights with the right pooling, offline."""

from __future__ import annotations

import pytest

from tour_pyserini.encoders import DEFAULT_ENCODER, EncoderSpec, bundled_model_dir


def test_bundled_minilm_reads_its_sentence_transformers_config():
    spec = EncoderSpec.resolve(DEFAULT_ENCODER)
    assert spec.path == str(bundled_model_dir())
    assert (spec.pooling, spec.l2_norm, spec.max_length) == ("mean", True, 256)


def test_overrides_and_local_directories():
    spec = EncoderSpec.resolve(str(bundled_model_dir()), pooling="cls", l2_norm=False, max_length=128)
    assert (spec.pooling, spec.l2_norm, spec.max_length) == ("cls", False, 128)


def test_missing_local_directory_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such model directory"):
        EncoderSpec.resolve(str(tmp_path / "no-model"))
