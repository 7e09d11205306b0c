"""A checkpoint of another architecture is refused in one line by every model loader (encoders of Pyserini's
classes, the cross-encoder, llm and monot5 teachers, the reader), instead of loading with random weights;
tiny random-weight models built here from transformers configs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from tour_pyserini.encoders import EncoderSettings, EncoderSpec, bundled_model_dir
from tour_pyserini.errors import UserError

SMALL = dict(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


def _save(model, out: Path, architectures: list[str] | None = None) -> Path:
    """``model`` and the bundled MiniLM's tokenizer in ``out``; ``architectures`` overwrites what its config
    says it is (a config that claims a head the weights lack)."""
    from transformers import AutoTokenizer

    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(bundled_model_dir()).save_pretrained(out)
    if architectures:
        config = json.loads((out / "config.json").read_text())
        (out / "config.json").write_text(json.dumps({**config, "architectures": architectures}))
    return out


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> Path:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    return _save(BertModel(BertConfig(**SMALL)), tmp_path_factory.mktemp("bert"))


@pytest.mark.parametrize("side", ["query", "document"])
def test_a_dpr_class_on_a_bert_checkpoint_is_refused(bert, side):
    from tour_pyserini.encoders.document import DocumentEncoder
    from tour_pyserini.encoders.query import QueryEncoder

    spec = EncoderSpec.resolve(str(bert), settings=EncoderSettings(encoder_class="dpr"), side=side)
    model = "DPRQuestionEncoder" if side == "query" else "DPRContextEncoder"
    with pytest.raises(
        UserError,
        match=f"the dpr {side} encoder\\): its checkpoint lacks 37 of the 37 parameters "
        f"of {model} \\(.*_encoder.bert_model.embeddings",
    ):
        QueryEncoder.build(spec) if side == "query" else DocumentEncoder(spec)


def test_index_refuses_a_dpr_class_on_a_bert_checkpoint_and_leaves_nothing(bert, mini_scifact, tmp_path):
    from tour_pyserini.commands import index

    out = tmp_path / "dpr-index"
    with pytest.raises(UserError, match="lacks 37 of the 37 parameters of DPRContextEncoder"):
        index.main(
            [
                "--collection",
                str(mini_scifact["collection"]),
                "--output",
                str(out),
                "--no-prebuilt",
                "--encoder",
                str(bert),
                "--encoder-class",
                "dpr",
            ]
        )
    assert not out.exists()


def test_an_encoder_without_a_pooler_loads_and_a_head_it_does_not_read_is_a_warning(bert, tmp_path, caplog):
    """Every encoder class pools hidden states: a missing pooler changes no vector. A cross-encoder's
    checkpoint read as an encoder loses its head: the vectors are the checkpoint's, but it is worth a warning."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertModel

    from tour_pyserini.encoders.query import QueryEncoder

    no_pooler = _save(BertModel(BertConfig(**SMALL), add_pooling_layer=False), tmp_path / "no-pooler")
    with caplog.at_level(logging.WARNING):
        QueryEncoder.build(EncoderSpec.resolve(str(no_pooler)))
        QueryEncoder.build(EncoderSpec.resolve(str(bert)))
    assert not [r for r in caplog.records if r.name.startswith("tour_pyserini")]
    torch.manual_seed(0)
    classifier = _save(BertForSequenceClassification(BertConfig(**SMALL, num_labels=1)), tmp_path / "ce")
    with caplog.at_level(logging.WARNING):
        QueryEncoder.build(EncoderSpec.resolve(str(classifier)))
    assert "2 weights of its checkpoint are not read by BertModel (classifier.bias, classifier.weight)" in caplog.text


def test_teachers_and_the_reader_refuse_a_checkpoint_without_their_head(bert, tmp_path):
    """The llm teacher on a BERT (a causal-LM head it lacks), and configs that claim a head their weights lack."""
    from tour_pyserini.answer.model import Reader, ReaderOptions
    from tour_pyserini.teachers import get_teacher

    with pytest.raises(
        UserError,
        match=r"llm teacher .*: its checkpoint lacks 6 of the \d+ parameters of "
        r"BertLMHeadModel \(cls.predictions.bias, ",
    ):
        get_teacher(f"llm:{bert}")
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    claims = {
        name: _save(BertModel(BertConfig(**SMALL)), tmp_path / name, [name])
        for name in ("BertForSequenceClassification", "BertForQuestionAnswering")
    }
    with pytest.raises(
        UserError,
        match=r"lacks 2 of the \d+ parameters of BertForSequenceClassification "
        r"\(classifier.bias, classifier.weight\)",
    ):
        get_teacher(f"cross-encoder:{claims['BertForSequenceClassification']}")
    with pytest.raises(
        UserError,
        match=r"reader .*: its checkpoint lacks 2 of the \d+ parameters of "
        r"BertForQuestionAnswering \(qa_outputs.bias, qa_outputs.weight\)",
    ):
        Reader(str(claims["BertForQuestionAnswering"]), ReaderOptions())


def test_monot5_refuses_an_encoder_only_t5(tmp_path):
    import torch
    from tiny_models import tiny_tokenizer
    from transformers import T5Config, T5EncoderModel

    from tour_pyserini.teachers import get_teacher

    tokenizer = tiny_tokenizer()
    tokenizer.save_pretrained(tmp_path)
    torch.manual_seed(0)
    T5EncoderModel(
        T5Config(
            vocab_size=len(tokenizer),
            d_model=32,
            d_kv=8,
            d_ff=64,
            num_layers=2,
            num_heads=4,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.pad_token_id,
        )
    ).save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())  # a config that claims the decoder too
    (tmp_path / "config.json").write_text(json.dumps({**config, "is_encoder_decoder": True}))
    with pytest.raises(
        UserError,
        match=r"monot5 teacher .*: its checkpoint lacks \d+ of the \d+ parameters of "
        r"T5ForConditionalGeneration \(.*decoder",
    ):
        get_teacher(f"monot5:{tmp_path}")
