"""Prebuilt dense indexes shipped in ``prebuilt/``: a collection's document vectors with their encoder's identity.

As Pyserini's prebuilt indexes spare their users the encoding, ``prebuilt/<name>/`` keeps what encoding a
corpus produced: ``vectors.npy`` (float16, half the size of Faiss's float32), ``docid`` (one per line, in
index order) and ``prebuilt.json`` (the corpus's SHA-256, the fields encoded, and the encoder's identity:
name, pooling, normalisation, maximum length and a SHA-256 of its weights). A dense index of that corpus
with that encoder is then written from the vectors (an exact ``IndexFlatIP``, seconds) instead of being
encoded (minutes); another corpus, encoder or setting is encoded as usual.

float16 keeps 11 significant bits: a unit vector's inner products move by about 1e-4, which can swap
documents whose scores are closer than that.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tour_pyserini.encoders import describe, same_encoder
from tour_pyserini.errors import UserError
from tour_pyserini.files.digest import file_sha256

log = logging.getLogger(__name__)

PREBUILT_DIR = Path(__file__).resolve().parents[2] / "prebuilt"
MANIFEST = "prebuilt.json"
FORMAT = "tour-pyserini prebuilt dense 1"


@dataclass(frozen=True)
class Prebuilt:
    """One prebuilt encoding: its directory and its manifest."""

    path: Path
    manifest: dict

    @classmethod
    def read(cls, path: Path) -> Prebuilt:
        manifest = json.loads((path / MANIFEST).read_text())
        if manifest.get("format") != FORMAT:
            raise UserError(f"{path / MANIFEST}: not a prebuilt index manifest ({FORMAT!r})")
        return cls(path, manifest)

    def docids(self) -> list[str]:
        return (self.path / "docid").read_text(encoding="utf-8").splitlines()

    def vectors(self) -> np.ndarray:
        """(n, d) float32, as Faiss stores them."""
        return np.load(self.path / "vectors.npy").astype(np.float32)

    def write_faiss(self, out_dir: Path) -> tuple[int, int]:
        """Write ``index`` and ``docid`` as Pyserini's ``FaissRepresentationWriter`` does; (docs, dimension)."""
        import faiss

        vectors, docids = self.vectors(), self.docids()
        if len(docids) != len(vectors) or vectors.shape[1] != self.manifest["dimension"]:
            raise UserError(
                f"{self.path}: {len(docids)} docids for {vectors.shape} vectors; the prebuilt index is "
                "damaged (restore it with git, or build with --no-prebuilt)"
            )
        index = faiss.IndexFlatIP(vectors.shape[1])
        index.add(np.ascontiguousarray(vectors))
        faiss.write_index(index, str(out_dir / "index"))
        (out_dir / "docid").write_text("".join(f"{d}\n" for d in docids), encoding="utf-8")
        return len(docids), vectors.shape[1]


def find_prebuilt(corpus: Path, identity: dict, fields: list[str], root: Path = PREBUILT_DIR) -> Prebuilt | None:
    """The prebuilt encoding of ``corpus`` by the encoder ``identity`` (``encoder_identity()``), or None.

    A prebuilt index of the same corpus made by another encoder is not used; a line on stdout says why.
    """
    candidates = sorted(p.parent for p in Path(root).glob(f"*/{MANIFEST}")) if Path(root).is_dir() else []
    if not candidates:
        return None
    corpus_sha = file_sha256(corpus)
    for path in candidates:
        prebuilt = Prebuilt.read(path)
        manifest = prebuilt.manifest
        if manifest["corpus_sha256"] != corpus_sha or manifest["fields"] != list(fields):
            continue
        if same_encoder(manifest["encoder"], identity):
            return prebuilt
        log.info(
            "not using prebuilt %s: its vectors come from %s, not %s; encoding the corpus",
            path.name,
            describe(manifest["encoder"]),
            describe(identity),
        )
    return None


def export_prebuilt(index_dir: str | Path, corpus: str | Path, output: str | Path) -> Prebuilt:
    """Write the prebuilt form of a dense index built by ``python -m tour_pyserini.index`` from ``corpus``."""
    from tour_pyserini.encoders import EncoderSpec, encoder_identity
    from tour_pyserini.index.faiss_index import read_vectors
    from tour_pyserini.index.layout import IndexMeta

    index_dir, output = Path(index_dir), Path(output)
    meta = IndexMeta.read(index_dir)
    if meta is None or meta.kind != "dense":
        raise UserError(f"{index_dir} is not a dense index built by tour_pyserini")
    built_with = meta.dense_encoder
    spec = EncoderSpec.resolve(
        built_with["name"], built_with["pooling"], built_with["l2_norm"], built_with["max_length"]
    )
    vectors, _ = read_vectors(index_dir)
    output.mkdir(parents=True, exist_ok=True)
    np.save(output / "vectors.npy", vectors.astype(np.float16))
    (output / "docid").write_bytes((index_dir / "docid").read_bytes())
    manifest = {
        "format": FORMAT,
        "corpus_sha256": file_sha256(corpus),
        "fields": meta.extra.get("fields", ["title", "text"]),
        "num_docs": int(vectors.shape[0]),
        "dimension": int(vectors.shape[1]),
        "dtype": "float16",
        "encoder": encoder_identity(spec),
    }
    (output / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return Prebuilt(output, manifest)
