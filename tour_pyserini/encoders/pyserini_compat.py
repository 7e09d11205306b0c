"""Pyserini 1.6.0's own model classes under transformers 5.

Transformers 5 needs a model's ``__init__`` to end with ``post_init()``, which records the model's tied
weights; Pyserini's ``AnceEncoder``, ``CosDprEncoder`` and Aggretriever encoders predate that rule, so their
``from_pretrained`` fails (no ``all_tied_weights_keys``) and ``python -m pyserini.search.faiss
--encoder-class ance`` cannot run here. :func:`add_post_init` makes their ``__init__`` end as transformers
asks; the weights they load and the vectors they make are unchanged.
"""

from __future__ import annotations

from functools import wraps

from tour_pyserini._java import import_pyserini

_CLASSES = (("pyserini.encode._ance", "AnceEncoder"), ("pyserini.encode._cosdpr", "CosDprEncoder"),
            ("pyserini.encode._aggretriever", "BertAggretrieverEncoder"),
            ("pyserini.encode._aggretriever", "DistlBertAggretrieverEncoder"))  # fmt: skip


def add_post_init() -> None:
    """Once per process: each of Pyserini's model classes above calls ``post_init()`` after its own
    ``__init__`` (unless it already does)."""
    for module, name in _CLASSES:
        cls = getattr(import_pyserini(module), name)
        if "__init__" not in vars(cls) or getattr(cls.__init__, "post_init_added", False):
            continue
        cls.__init__ = _ending_with_post_init(cls.__init__)


def _ending_with_post_init(init):
    @wraps(init)
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if not hasattr(self, "all_tied_weights_keys"):
            self.post_init()

    __init__.post_init_added = True
    return __init__
