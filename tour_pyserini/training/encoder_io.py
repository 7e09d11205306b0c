"""Loading an encoder to train, encoding with gradients as Pyserini encodes, and saving encoder directories.

A saved directory is a sentence-transformers model (config, safetensors weights, tokenizer,
``modules.json`` with Transformer, mean Pooling and Normalize, ``sentence_bert_config.json``), so that
``EncoderSpec.resolve(DIR)`` reads mean pooling, L2 norm and the maximum length from it and
``index --encoder DIR`` / ``search --encoder DIR`` accept it.
"""

from __future__ import annotations

import json
from pathlib import Path

from tour_pyserini.encoders import EncoderSpec


def load_encoder(name: str):
    """(spec, tokenizer, model) of a local encoder directory or the bundled MiniLM, in float32, train mode."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    spec = EncoderSpec.resolve(name)
    tokenizer = AutoTokenizer.from_pretrained(spec.path)
    model = AutoModel.from_pretrained(spec.path, dtype=torch.float32)
    model.train()
    return spec, tokenizer, model


def encode(model, tokenizer, texts: list[str], *, max_length: int, pooling: str | None, l2_norm: bool):
    """(n, d) vectors with gradients: masked mean pooling (``pooling`` "mean") or the [CLS] token (any other
    ``pooling``, None included), and L2 norm, as Pyserini's encoders do."""
    import torch

    inputs = tokenizer(
        texts,
        max_length=max_length,
        truncation=True,
        padding="longest",
        return_tensors="pt",
        return_token_type_ids=False,
    )
    tokens = model(**inputs)[0]
    if pooling == "mean":
        mask = inputs["attention_mask"].unsqueeze(-1).to(tokens.dtype)
        vectors = (tokens * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
    else:
        vectors = tokens[:, 0]
    vectors = vectors.float()
    return torch.nn.functional.normalize(vectors, dim=-1) if l2_norm else vectors


def encode_batches(model, tokenizer, texts: list[str], spec: EncoderSpec, max_length: int, size: int = 64):
    """:func:`encode` with ``spec``'s pooling and normalisation, ``size`` texts at a time, concatenated."""
    import torch

    return torch.cat(
        [
            encode(
                model, tokenizer, texts[i : i + size], max_length=max_length, pooling=spec.pooling, l2_norm=spec.l2_norm
            )
            for i in range(0, len(texts), size)
        ]
    )


def save_encoder(model, tokenizer, out_dir: str | Path, spec: EncoderSpec) -> Path:
    """Write a sentence-transformers directory with ``spec``'s pooling, normalisation and maximum length."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if spec.l2_norm:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        (out / "2_Normalize").mkdir(exist_ok=True)
    (out / "modules.json").write_text(json.dumps(modules, indent=2) + "\n")
    (out / "1_Pooling").mkdir(exist_ok=True)
    pooling = {
        "word_embedding_dimension": model.config.hidden_size,
        "pooling_mode_cls_token": spec.pooling == "cls",
        "pooling_mode_mean_tokens": spec.pooling == "mean",
        "pooling_mode_max_tokens": False,
    }
    (out / "1_Pooling" / "config.json").write_text(json.dumps(pooling, indent=2) + "\n")
    (out / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": spec.max_length, "do_lower_case": False}) + "\n"
    )
    return out
