"""Encoders as Pyserini builds them: which model and which of Pyserini's classes runs it (``spec``,
``classes``), the query and document encoders (``query``, ``document``, ``st_pipeline``), and which
document encoder a trained query encoder goes with (``pairing``)."""

from tour_pyserini.encoders.spec import (
    DEFAULT_ENCODER,
    EncoderSettings,
    EncoderSpec,
    bundled_model_dir,
    describe,
    encoder_identity,
    same_encoder,
    setting_differences,
    weights_sha256,
)

__all__ = [
    "DEFAULT_ENCODER",
    "EncoderSettings",
    "EncoderSpec",
    "bundled_model_dir",
    "describe",
    "encoder_identity",
    "same_encoder",
    "setting_differences",
    "weights_sha256",
]
