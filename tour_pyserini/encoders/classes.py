"""Pyserini's text encoder classes, declared as data: which of its classes encodes queries and documents,
what each one takes from the flags, and where our encoding may batch.

``--encoder-class`` takes Pyserini's names (``python -m pyserini.search.faiss`` for queries,
``python -m pyserini.encode`` for documents, where ``sentence`` is spelled ``sentence-transformers``), and
when it is not given the class is inferred as Pyserini infers it: the first class name, in Pyserini's
order, that occurs in the encoder's name; else ``auto``. The keyword arguments each class receives follow
Pyserini's ``init_query_encoder`` / ``init_encoder``, so the vectors are Pyserini's own.

One addition: ``st-pipeline`` runs a sentence-transformers model's whole module pipeline (pooling, Dense
layers, normalisation, named prompts), for models Pyserini's auto classes cannot reproduce.
"""

from __future__ import annotations

from dataclasses import dataclass

from tour_pyserini.errors import UserError


@dataclass(frozen=True)
class EncoderClass:
    """One text encoder class: Pyserini's query and document class names (None: that side does not exist)."""

    name: str
    query: str | None  # key of pyserini.encode.query_encoder_class_map
    document: str | None  # key of pyserini.encode.document_encoder_class_map
    pooling: str | None = None  # fixed by the class (None: the class pools its own way, or as the flags say)
    l2_norm: bool | None = None  # likewise
    query_prefix: bool = False  # --query-prefix reaches the query class (others would silently drop it)
    doc_prefix: bool = False  # --doc-prefix reaches the document class
    query_max_length: bool = False  # --max-length reaches the query class
    # a batch's texts encoded together (padded chunks for the auto family, one token length per call for DPR)
    # give the one-at-a-time vectors within 1e-6 (tested); the other classes take one text per call
    batched: bool = False
    # a separate model encodes the other side (DPR's question and context encoders)
    paired_models: bool = False

    def encodes(self, side: str) -> bool:
        """Whether the class has a ``side`` ("query" or "document") encoder: Pyserini's, or our pipeline's."""
        return self.name == "st-pipeline" or getattr(self, side) is not None


_CLASSES = (
    # Pyserini's order of keyword inference (its query_encoder_class_map)
    EncoderClass("dkrr", "dkrr", None, query_prefix=True),
    EncoderClass("cosdpr", "cosdpr", "cosdpr", paired_models=True),
    EncoderClass("dpr", "dpr", "dpr", batched=True, paired_models=True),
    EncoderClass("bpr", "bpr", None, paired_models=True),
    EncoderClass("tct_colbert", "tct_colbert", "tct_colbert"),
    EncoderClass("ance", "ance", "ance"),
    EncoderClass(
        "sentence", "sentence", "sentence-transformers", pooling="mean", l2_norm=True, query_prefix=True, batched=True
    ),
    EncoderClass(
        "contriever", "contriever", "contriever", pooling="mean", l2_norm=False, query_prefix=True, batched=True
    ),
    EncoderClass("aggretriever", "aggretriever", "aggretriever"),
    EncoderClass("openai-api", "openai-api", "openai-api", query_max_length=True),
    EncoderClass("auto", "auto", "auto", query_prefix=True, doc_prefix=True, batched=True),
    EncoderClass("arctic", "arctic", "arctic"),
    EncoderClass("qwen3", "qwen3", "qwen3", pooling="last", query_prefix=True, doc_prefix=True, query_max_length=True),
    EncoderClass("st-pipeline", None, None, query_prefix=True, doc_prefix=True, batched=True),
)
CLASSES = {c.name: c for c in _CLASSES}
MULTIMODAL = ("clip", "uniir", "dse", "mmeb")  # Pyserini's image and multimodal classes
SPARSE = ("splade", "unicoil")  # document classes of learned sparse indexes, not dense ones
DOCUMENT_ALIASES = {"sentence-transformers": "sentence"}  # pyserini.encode's name -> the class's name here
QUERY_CHOICES = tuple(c.name for c in _CLASSES)
_DOCUMENT_NAMES = {name: alias for alias, name in DOCUMENT_ALIASES.items()}
DOCUMENT_CHOICES = tuple(_DOCUMENT_NAMES.get(c.name, c.name) for c in _CLASSES if c.encodes("document"))
# classes whose vectors share one space with another's (Pyserini's auto class under three names)
_FAMILY = {"sentence": "auto", "contriever": "auto"}


def family(name: str) -> str:
    """The class whose arithmetic ``name`` runs: sentence and contriever are Pyserini's auto class with fixed
    pooling, so indexes built under the three names are alike when pooling and normalisation agree."""
    return _FAMILY.get(name, name)


def infer_class(encoder: str) -> str:
    """Pyserini's rule: the first class name that occurs in the lower-cased encoder name, else ``auto``."""
    lowered = encoder.lower()
    for c in _CLASSES:
        if c.query and c.name in lowered:
            return c.name
    return "auto"


def get_class(name: str, flag: str = "--encoder-class") -> EncoderClass:
    """The class ``name`` (a query or a document name), or one line listing the choices."""
    name = DOCUMENT_ALIASES.get(name, name)
    if name in MULTIMODAL:
        raise UserError(
            f"{flag} {name}: Pyserini's image and multimodal encoders are not supported; "
            f"text classes: {', '.join(QUERY_CHOICES)}"
        )
    if name in SPARSE:
        raise UserError(f"{flag} {name}: a learned sparse encoder, not a dense one; use Pyserini's own tools")
    if name not in CLASSES:
        raise UserError(f"{flag} {name!r}: unknown encoder class; choose from {', '.join(QUERY_CHOICES)}")
    return CLASSES[name]


def check_class_options(
    cls: EncoderClass,
    *,
    pooling: str | None,
    l2_norm: bool | None,
    query_prefix: str | None,
    doc_prefix: str | None,
    max_length_given: bool,
    side: str,
) -> None:
    """One line for a flag the class would ignore: Pyserini drops it silently, which hides a wrong setup."""
    name = cls.name
    if side == "query" and not cls.encodes("query"):
        raise UserError(f"--encoder-class {name} encodes documents only; Pyserini has no query encoder of that class")
    if side == "document" and not cls.encodes("document"):
        raise UserError(f"--encoder-class {name} encodes queries only; Pyserini has no document encoder of that class")
    if query_prefix is not None and not cls.query_prefix:
        raise UserError(f"--query-prefix: Pyserini's {name} query encoder takes no prefix (it would be ignored)")
    if doc_prefix is not None and not cls.doc_prefix:
        raise UserError(f"--doc-prefix: Pyserini's {name} document encoder takes no prefix (it would be ignored)")
    if pooling in ("last", "eos") and cls.name == "auto":
        raise UserError(
            f"--pooling {pooling}: Pyserini's auto encoder pools only cls or mean; last-token pooling "
            "is the qwen3 class (--encoder-class qwen3)"
        )
    if name in ("auto", "st-pipeline"):
        if name == "st-pipeline" and pooling is not None:
            raise UserError("--pooling: an st-pipeline encoder pools as its modules.json says")
        return
    if pooling is not None and pooling != cls.pooling:
        own = cls.pooling or "fixed by the model"
        raise UserError(
            f"--pooling {pooling}: Pyserini's {name} encoder pools its own way ({own}); --pooling "
            "applies to --encoder-class auto"
        )
    if l2_norm is not None and name != "qwen3" and l2_norm != cls.l2_norm:
        raise UserError(
            f"--l2-norm: Pyserini's {name} encoder normalises its own way; --l2-norm applies to "
            "--encoder-class auto and qwen3"
        )
    if side == "query" and max_length_given and not cls.query_max_length:
        raise UserError(
            f"--max-length: Pyserini's {name} query encoder truncates at its own length (it would be "
            "ignored); it applies to qwen3 and openai-api"
        )
