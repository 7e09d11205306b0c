"""The auto classes' transformer through an inference runtime: the query encoder's model exported once, cached
beside its weights, and run by ONNX Runtime (fp32 fused, or int8) or OpenVINO (fp32, or bf16 where native).

Pyserini's auto, sentence and contriever classes pool the transformer's last hidden states (mean or first token)
and normalise them; :class:`~tour_pyserini.encoders.query.QueryEncoder` does that pooling itself on padded
batches, so only the transformer (token ids and mask in, hidden states out) runs through the runtime. Other
classes run code of their own around the model (projection heads, fixed-length padding, APIs) and stay torch's.
"""

from __future__ import annotations

from pathlib import Path

from tour_pyserini.encoders.spec import EncoderSpec, weights_sha256
from tour_pyserini.errors import UserError
from tour_pyserini.runtime import check_model_directory

EXPORTABLE = ("auto", "sentence", "contriever")  # the classes whose model is a plain transformer
OUTPUT = "last_hidden_state"
INPUTS = ("input_ids", "attention_mask")  # the auto classes tokenise without token type ids


def check_exportable(spec: EncoderSpec, runtime: str, flag: str = "--encoder-runtime") -> None:
    """``spec``'s model can run through ``runtime`` (other than torch): one of :data:`EXPORTABLE`'s classes,
    with its weights in a local directory (the exported graph is cached by their hash); else one line."""
    if runtime == "torch":
        return
    if spec.encoder_class not in EXPORTABLE:
        raise UserError(
            f"{flag} {runtime} runs the {', '.join(EXPORTABLE)} encoder classes; --encoder {spec.name} "
            f"is Pyserini's {spec.encoder_class} class, which runs through torch only"
        )
    check_model_directory(spec.path, runtime, flag, f"--encoder {spec.name}")


def exported_transformer(model, tokenizer, path: str | Path, precision: str, runtime: str):
    """``model`` (the torch transformer of the encoder in ``path``) through ``runtime`` (onnx or openvino) at
    ``precision``: a callable from ``{"input_ids", "attention_mask"}`` (integer arrays) to the last hidden states
    (batch, tokens, width), float32. The graph comes from the cache beside the weights, exported the first time."""
    from tour_pyserini.runtime import exported_model

    def export(write, graph: Path) -> None:
        examples = tokenizer(
            ["a query", "another, longer query"], padding=True, return_tensors="pt", return_token_type_ids=False
        )
        write(model.eval(), {name: examples[name] for name in INPUTS}, OUTPUT, graph)

    return exported_model(path, weights_sha256(path), precision, runtime, export, f"--encoder {path}")
