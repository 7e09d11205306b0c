"""Which document encoder a trained query encoder goes with, and the check that search makes of it.

A query encoder trained apart from its document encoder (ORQA's separate encoders, or a question
encoder fine-tuned against a frozen index) only makes sense against an index built by that document
encoder. Its directory holds ``tour_pyserini_pair.json`` with the SHA-256 of the document encoder's
weights; the index's metadata records the same fingerprint of the encoder that built it.
"""

from __future__ import annotations

import json
from pathlib import Path

from tour_pyserini.encoders.spec import EncoderSpec, encoder_identity
from tour_pyserini.errors import UserError

PAIR_FILE = "tour_pyserini_pair.json"


def write_pair(query_dir: str | Path, document_name: str, document_sha256: str | None) -> None:
    """Record in ``query_dir`` the document encoder (name, weights' SHA-256) whose index its queries must search."""
    record = {"document_encoder": document_name, "document_weights_sha256": document_sha256}
    (Path(query_dir) / PAIR_FILE).write_text(json.dumps(record, indent=2) + "\n")


def read_pair(query_dir: str | Path) -> dict | None:
    path = Path(query_dir) / PAIR_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def index_document_sha(index_encoder: dict | None) -> str | None:
    """The weights fingerprint of the encoder that built an index: recorded, or computed from its directory."""
    if not index_encoder:
        return None
    if index_encoder.get("weights_sha256"):
        return index_encoder["weights_sha256"]
    try:  # indexes built before fingerprints were recorded: the named encoder, if it is still on disk
        return encoder_identity(EncoderSpec.resolve(index_encoder["name"]))["weights_sha256"]
    except (UserError, FileNotFoundError, ImportError):  # gone, or not a model any more: cannot tell
        return None


def check_pair(query: EncoderSpec, index_encoder: dict | None, index_dir: str | Path) -> None:
    """Refuse a query encoder whose paired document encoder did not build the index."""
    pair = read_pair(query.path) if Path(query.path).is_dir() else None
    if not pair or not pair.get("document_weights_sha256"):
        return
    built_by = index_document_sha(index_encoder)
    if built_by is not None and built_by != pair["document_weights_sha256"]:
        name = (index_encoder or {}).get("name", "?")
        raise UserError(
            f"query encoder {query.name} is paired with document encoder {pair['document_encoder']} "
            f"(weights {pair['document_weights_sha256'][:12]}), but index {index_dir} was built by {name} "
            f"(weights {built_by[:12]}); rebuild the index with that document encoder"
        )
