"""The document encoder ``python -m pyserini.encode`` builds: its class for the encoder, with the keyword
arguments its ``init_encoder`` passes, and the call its encoding loop makes for one batch."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tour_pyserini._java import import_pyserini
from tour_pyserini.encoders.checkpoints import POOLER, checked_loading
from tour_pyserini.encoders.classes import CLASSES
from tour_pyserini.encoders.pyserini_compat import add_post_init
from tour_pyserini.encoders.spec import EncoderSpec
from tour_pyserini.errors import UserError


class DocumentEncoder:
    """Encodes documents (texts with their titles) to float32 vectors (n, d) with ``spec``'s class."""

    def __init__(self, spec: EncoderSpec, device: str = "cpu"):
        self.spec = spec
        self.pyserini = pyserini_document_encoder(spec, device)

    def encode(self, texts: Sequence[str], titles: Sequence[str] | None) -> np.ndarray:
        """One batch as Pyserini's loop passes it: texts, titles (DPR pairs them; the auto classes join them
        as "title text"), the maximum length, no fp16, no separator."""
        vectors = self.pyserini.encode(
            texts=list(texts),
            titles=None if titles is None else list(titles),
            max_length=self.spec.max_length,
            fp16=False,
            add_sep=False,
        )
        return np.asarray(vectors, dtype=np.float32).reshape(len(texts), -1)

    def dimension(self, with_titles: bool) -> int:
        """The size of the vectors (a projection head may make it other than the model's hidden size)."""
        return self.encode(["dimension"], [""] if with_titles else None).shape[1]


def pyserini_document_encoder(spec: EncoderSpec, device: str = "cpu"):
    """The object ``python -m pyserini.encode`` builds for ``spec``, once its checkpoint is known to fit the class."""
    with checked_loading(f"--encoder {spec.name} (the {spec.encoder_class} document encoder)", unused=POOLER):
        return _pyserini_document_encoder(spec, device)


def _pyserini_document_encoder(spec: EncoderSpec, device: str):
    if spec.encoder_class == "st-pipeline":
        from tour_pyserini.encoders.st_pipeline import PipelineEncoder

        return PipelineEncoder(spec.path, device=device, prefix=spec.doc_prefix)
    klass = CLASSES[spec.encoder_class]
    kwargs: dict = dict(model_name=spec.path, device=device)
    if spec.encoder_class in ("auto", "sentence", "contriever"):
        kwargs.update(pooling=spec.pooling, l2_norm=spec.l2_norm, prefix=spec.doc_prefix)
    elif spec.encoder_class == "qwen3":
        kwargs.update(l2_norm=spec.l2_norm, prefix=spec.doc_prefix, explicit_truncate=False)
    add_post_init()  # Pyserini's ANCE, CosDPR and Aggretriever models under transformers 5
    encode = import_pyserini("pyserini.encode")
    try:
        return encode.document_encoder_class_map[klass.document](**kwargs)
    except (OSError, ValueError, TypeError, AttributeError) as e:
        raise UserError(
            f"--encoder {spec.name}: Pyserini's {klass.document} document encoder cannot load it "
            f"({type(e).__name__}: {str(e).splitlines()[0][:200]})"
        ) from e
