"""Encoder names resolve to local weights with the right pooling, offline."""

from __future__ import annotations

import pytest

from tour_pyserini.encoders import DEFAULT_ENCODER, EncoderSettings, EncoderSpec, bundled_model_dir
from tour_pyserini.encoders.spec import check_model
from tour_pyserini.errors import UserError, warn_once


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
    with pytest.raises(
        UserError,
        match="'nobody/no-such-model' is neither a local directory nor in the Hugging Face "
        "cache, and the hub is offline",
    ):
        EncoderSpec.resolve("nobody/no-such-model")
    with pytest.raises(UserError, match="cross-encoder 'nobody/no-such-model' is neither"):
        check_model("cross-encoder", "nobody/no-such-model")


def test_search_with_an_encoder_directory_that_is_not_a_model_is_one_line(dense_index, mini_scifact, tmp_path):
    from test_cli import run_module

    (tmp_path / "empty").mkdir()
    out = tmp_path / "run.trec"
    proc = run_module(
        "tour_pyserini.search",
        "--index",
        str(dense_index),
        "--topics",
        str(mini_scifact["topics"]),
        "--output",
        str(out),
        "--encoder",
        str(tmp_path / "empty"),
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert [line for line in proc.stderr.splitlines() if line.startswith("error:")] == [
        f"error: encoder '{tmp_path / 'empty'}' is not a HuggingFace model directory (no config.json)"
    ]
    assert not out.exists() and not out.with_name("run.trec.partial").exists()


@pytest.mark.parametrize(
    "content, message",
    [
        ('[{"path": "", "type": "sentence_transformers.models.Transformer"},', r"modules.json:1: not JSON \("),
        ('{"0": "Transformer"}', "modules.json: not a sentence-transformers module list"),
        ("[1, 2]", "modules.json: not a sentence-transformers module list"),
    ],
)
def test_a_corrupt_modules_json_is_one_line(tmp_path, content, message):
    import shutil

    model = tmp_path / "model"
    shutil.copytree(bundled_model_dir(), model)
    (model / "modules.json").write_text(content)
    with pytest.raises(UserError, match=message):
        EncoderSpec.resolve(str(model))


def test_a_tokenizer_of_another_vocabulary_is_one_line_or_a_warning(tmp_path, caplog):
    """Token ids beyond the encoder's embeddings cannot be encoded; another vocabulary of a fitting size would
    encode other words: Pyserini takes either silently."""
    import json
    import logging
    import shutil

    from tiny_models import tiny_tokenizer

    small = tmp_path / "small-vocabulary"
    tiny_tokenizer().save_pretrained(small)  # 1000 tokens
    config = json.loads((bundled_model_dir() / "config.json").read_text())
    (small / "config.json").write_text(json.dumps({**config, "vocab_size": 1000}))
    with pytest.raises(UserError, match=r"--tokenizer .* has 30522 tokens, more than the 1000 embeddings of encoder"):
        EncoderSpec.resolve(str(small), settings=EncoderSettings(tokenizer=str(bundled_model_dir())))
    shutil.copy(bundled_model_dir() / "config.json", small / "config.json")
    warn_once.cache_clear()  # said once per process: this test must see it
    with caplog.at_level(logging.WARNING):
        EncoderSpec.resolve(str(bundled_model_dir()), settings=EncoderSettings(tokenizer=str(small)))
    assert "has another vocabulary than encoder" in caplog.text


def test_query_settings_unlike_the_index_are_a_warning_and_flags_run_the_auto_class(dense_index, caplog):
    """The index records the sentence class (mean pooling, L2 norm); --no-l2-norm or --pooling on it runs the
    auto class with those settings, as on a model whose name makes it the sentence class, and says so."""
    import logging

    from tour_pyserini.index.query_side import query_encoder_spec

    warn_once.cache_clear()  # said once per process: this test must see it
    with caplog.at_level(logging.WARNING):
        plain = query_encoder_spec(dense_index, None, EncoderSettings(l2_norm=False))
        cls = query_encoder_spec(dense_index, None, EncoderSettings(pooling="cls"))
    assert (plain.encoder_class, plain.pooling, plain.l2_norm) == ("auto", "mean", False)
    assert (cls.encoder_class, cls.pooling, cls.l2_norm) == ("auto", "cls", True)
    assert "other settings than its queries get (l2_norm True, asked False)" in caplog.text
    assert "other settings than its queries get (pooling mean, asked cls)" in caplog.text
