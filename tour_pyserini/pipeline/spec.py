"""What a search system is made of, as one typed, hashable value: :class:`SearchSpec`.

Every face (the command line, the server's requests, the Python API, the PyTerrier transformers, the commands that
search to train, the benchmarks) describes the search it wants as a spec; :func:`~tour_pyserini.pipeline.plan`
checks it and :func:`~tour_pyserini.pipeline.build` assembles it. Two equal specs describe the same ranking (a
server searches the requests of equal specs as one batch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tour_pyserini.encoders import EncoderSettings
from tour_pyserini.index.bm25 import K1, B
from tour_pyserini.runtime import AUTO
from tour_pyserini.teachers import TeacherSpec


class Values(dict):
    """Option values by parameter name that can be hashed, so that the spec holding them can: read like a dict,
    never changed."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))

    def __reduce__(self) -> tuple[type[Values], tuple[dict[str, Any]]]:
        # pickle (a Ray worker's spec) would rebuild the dict item by item, through the refused __setitem__
        return type(self), (dict(self),)

    def _frozen(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError("option values in a spec are not changed: make another spec (dataclasses.replace)")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _frozen  # type: ignore[assignment]


@dataclass(frozen=True)
class SearchSpec:
    """A search system: the index and its knobs, the query encoder, the rewriter with its own options, the teacher
    it asks (a spec such as ``bm25`` or ``cross-encoder:PATH``, or one parsed) with the teachers' settings, and the
    score store. ``rewriter`` is a registered name (``none``: the retriever's ranking alone)."""

    index: str
    encoder: str | None = None  # default: the one the index was built with
    encoder_settings: EncoderSettings = EncoderSettings()  # class, pooling, prefix, ... as the flags give them
    encoded_queries: str | None = None  # Pyserini's pre-encoded queries instead of an encoder
    encoder_precision: str | None = None  # the query encoder's arithmetic: auto (None), fp32, bf16 or int8
    encoder_runtime: str = AUTO  # what runs the query encoder: auto (resolve_runtime), torch, onnx or openvino
    rewriter: str = "none"
    rewriter_options: Mapping[str, Any] = field(default_factory=Values)  # by the parameters the rewriter declares
    teacher: str | TeacherSpec | None = None
    teacher_max_length: int | None = None
    teacher_precision: str | None = None
    teacher_options: Mapping[str, Any] = field(default_factory=Values)  # values of the flags teachers declare
    score_store: str | None = None
    threads: int | None = None  # torch's own for models, 1 for Faiss when None
    device: str = "cpu"
    ef_search: int | None = None
    nprobe: int | None = None
    bm25_k1: float = K1
    bm25_b: float = B

    def __post_init__(self) -> None:
        object.__setattr__(self, "rewriter_options", Values(self.rewriter_options))
        object.__setattr__(self, "teacher_options", Values(self.teacher_options))
        if self.teacher is not None:
            object.__setattr__(self, "teacher", TeacherSpec.parse(self.teacher))

    @property
    def teacher_spec(self) -> TeacherSpec | None:
        """``teacher``, which a spec holds parsed (a string given is parsed when the spec is made)."""
        return None if self.teacher is None else TeacherSpec.parse(self.teacher)
