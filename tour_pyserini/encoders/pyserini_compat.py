"""Where Pyserini 1.6.0 and 2.x differ in their encoder classes, and where either needs help under transformers 5.

- **``post_init``.** Transformers 5 needs a model's ``__init__`` to end with ``post_init()``, which records the
  model's tied weights; Pyserini 1.6.0's ``AnceEncoder``, ``CosDprEncoder`` and Aggretriever encoders predate that
  rule, so their ``from_pretrained`` fails (no ``all_tied_weights_keys``). :func:`add_post_init` makes their
  ``__init__`` end as transformers asks; the weights they load and the vectors they make are unchanged. Pyserini
  2.x's classes answer ``all_tied_weights_keys`` themselves and are left alone.
- **Checkpoint formats.** Pyserini 2.x loads ANCE, CosDPR and Aggretriever checkpoints through its own
  ``load_pretrained_encoder``, which reads ``pytorch_model.bin`` only; 1.6.0 reads either that or
  ``model.safetensors`` (transformers' ``from_pretrained``). Under 2.x a directory with safetensors weights alone
  is loaded as 1.6.0 loads it, so a checkpoint that works on one host works on the other.
- **Pre-encoded queries.** 1.6.0's ``QueryEncoder(encoded_query_dir=...)`` keeps its table in ``.embedding``; 2.x
  spells them ``encoded_queries_dir`` and ``.embeddings``.
"""

from __future__ import annotations

import inspect
from functools import wraps
from pathlib import Path

from tour_pyserini._java import import_pyserini

_CLASSES = (
    ("pyserini.encode._ance", "AnceEncoder"),
    ("pyserini.encode._cosdpr", "CosDprEncoder"),
    ("pyserini.encode._aggretriever", "BertAggretrieverEncoder"),
    ("pyserini.encode._aggretriever", "DistlBertAggretrieverEncoder"),
)


def add_post_init() -> None:
    """Once per process, for each of Pyserini's model classes above: ``post_init()`` after its own ``__init__``
    (unless it already does), and, where Pyserini reads ``pytorch_model.bin`` only, safetensors weights too."""
    for module, name in _CLASSES:
        cls = getattr(import_pyserini(module), name)
        load = vars(cls).get("load_pretrained_encoder")
        if load is not None and not getattr(load.__func__, "patched", False):
            cls.load_pretrained_encoder = classmethod(_reading_safetensors(load.__func__))
        if "__init__" not in vars(cls) or getattr(cls.__init__, "patched", False):
            continue
        cls.__init__ = _ending_with_post_init(cls.__init__)


def _ending_with_post_init(init):
    @wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if not hasattr(self, "all_tied_weights_keys"):
            self.post_init()

    __init__.patched = True
    return __init__


def _reading_safetensors(load):
    @wraps(load)
    def load_pretrained_encoder(cls, model_name_or_path: str, device: str):
        path = Path(model_name_or_path)
        if (path / "model.safetensors").is_file() and not (path / "pytorch_model.bin").is_file():
            model = cls.from_pretrained(model_name_or_path)  # what Pyserini 1.6.0 does, in either format
            model.to(device)
            model.eval()
            return model
        return load(cls, model_name_or_path, device)

    load_pretrained_encoder.patched = True
    return load_pretrained_encoder


def encoded_queries(directory: str | Path):
    """Pyserini's ``QueryEncoder`` over pre-encoded queries in ``directory`` (its ``embedding.pkl``)."""
    klass = import_pyserini("pyserini.encode").QueryEncoder
    keyword = "encoded_queries_dir"  # 2.x
    if keyword not in inspect.signature(klass).parameters:
        keyword = "encoded_query_dir"  # 1.6.0
    return klass(**{keyword: str(directory)})


def encoded_table(encoder) -> dict:
    """The text -> vector table of a Pyserini ``QueryEncoder`` over pre-encoded queries, on either host."""
    return encoder.embeddings if hasattr(encoder, "embeddings") else encoder.embedding
