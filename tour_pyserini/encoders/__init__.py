"""Encoders as Pyserini builds them: which model, pooled how (``spec``), and which document encoder a
trained query encoder goes with (``pairing``)."""

from tour_pyserini.encoders.spec import (
    DEFAULT_ENCODER,
    EncoderSpec,
    bundled_model_dir,
    describe,
    encoder_identity,
    same_encoder,
    weights_sha256,
)

__all__ = [
    "DEFAULT_ENCODER",
    "EncoderSpec",
    "bundled_model_dir",
    "describe",
    "encoder_identity",
    "same_encoder",
    "weights_sha256",
]
