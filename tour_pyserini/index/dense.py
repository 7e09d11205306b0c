"""Dense indexes built with Pyserini's own document encoder and Faiss writer, or from a prebuilt encoding;
and re-indexed into another Faiss index type."""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from tour_pyserini._java import import_pyserini
from tour_pyserini.encoders import EncoderSpec, encoder_identity
from tour_pyserini.encoders.document import DocumentEncoder
from tour_pyserini.errors import UserError
from tour_pyserini.index import faiss_index
from tour_pyserini.index.build import check_count, corpus_identity
from tour_pyserini.index.corpus import CorpusCheck, check_corpus, corpus_file, read_jsonl_corpus, write_normalised
from tour_pyserini.index.docstore import DocStore
from tour_pyserini.index.faiss_index import FaissIndexSpec
from tour_pyserini.index.layout import DOCSTORE_FILE, IndexMeta, check_faiss_file, index_kind
from tour_pyserini.index.prebuilt import PREBUILT_DIR, find_prebuilt

log = logging.getLogger(__name__)

FLAT = FaissIndexSpec()


def write_dense_index(
    collection: str | Path,
    out_dir: Path,
    encoder: EncoderSpec,
    batch_size: int = 64,
    fields: tuple[str, ...] = ("title", "text"),
    *,
    prebuilt: Path | None = PREBUILT_DIR,
    faiss_spec: FaissIndexSpec = FLAT,
    device: str = "cpu",
) -> IndexMeta:
    """Encode every document of ``collection`` into a FaissSearcher directory ``out_dir``, as an index of
    ``faiss_spec``'s type.

    When ``prebuilt`` (a folder of prebuilt indexes; None: never) holds this corpus encoded by this
    encoder, its vectors are written instead of encoding again. A docid -> text store goes beside the index.
    """
    corpus = corpus_file(collection)
    check = check_corpus(corpus)
    identity = encoder_identity(encoder)
    found = find_prebuilt(corpus, identity, list(fields), prebuilt) if prebuilt else None
    if found is not None:
        log.debug(
            "using prebuilt %s: vectors of %d documents, encoder checked", found.path.name, found.manifest["num_docs"]
        )
        indexed, dimension = found.write_faiss(out_dir)
    else:
        indexed, dimension = encode_corpus(corpus, out_dir, encoder, batch_size, fields, check, device=device)
    check_count(corpus, indexer="Faiss", indexed=indexed, expected=check.num_docs)
    n_docs = DocStore.build(out_dir / DOCSTORE_FILE, read_jsonl_corpus(corpus))
    extra = {"batch_size": batch_size, "fields": list(fields)}
    return IndexMeta(
        kind="dense",
        collection=str(collection),
        num_docs=n_docs,
        corpus=corpus_identity(corpus),
        encoder=identity,  # with its weights' fingerprint: trained query encoders pair with it
        dimension=dimension,
        faiss_index=rebuild_faiss_index(out_dir, faiss_spec),
        extra={**extra, "prebuilt": found.path.name} if found else extra,
    )


def encode_corpus(
    corpus: Path,
    out_dir: Path,
    encoder: EncoderSpec,
    batch_size: int,
    fields: tuple[str, ...],
    check: CorpusCheck,
    device: str = "cpu",
    shard: tuple[int, int] = (0, 1),
    progress: Callable[[int], None] | None = None,
) -> tuple[int, int]:
    """Encode the corpus (or shard ``(id, count)`` of it, as ``pyserini.encode --shard-id --shard-num`` splits
    it) into ``index`` + ``docid``; (documents indexed, dimension). ``progress`` is told each batch's size.

    The same code path as ``python -m pyserini.encode ... --to-faiss``: Pyserini's
    ``JsonlCollectionIterator`` reads the fields (with a progress bar), the encoder's class encodes them
    (the auto classes "title text" with the encoder's pooling and normalisation; DPR title and text as a
    pair), and ``FaissRepresentationWriter`` writes
    ``index`` (an exact inner-product ``IndexFlatIP``) and ``docid``. A corpus without ``title`` and
    ``text`` on every line is encoded from a normalised copy; the index must then hold exactly the
    corpus's documents.
    """
    import torch

    encode = import_pyserini("pyserini.encode")
    optional = import_pyserini("pyserini.encode.optional")
    document_encoder = DocumentEncoder(encoder, device=device)
    with tempfile.TemporaryDirectory() as tmp:
        source = corpus if check.pyserini_ready else write_normalised(corpus, Path(tmp) / "corpus.jsonl", "title")
        batches = encode.JsonlCollectionIterator(str(source), fields=list(fields))
        with torch.inference_mode():
            dimension = document_encoder.dimension(with_titles="title" in fields)
        writer = optional.FaissRepresentationWriter(str(out_dir), dimension=dimension)
        with writer, torch.inference_mode():
            for batch in batches(batch_size, *shard):
                # Pyserini reads an empty field as None and would encode the string "None"
                texts = [t or "" for t in batch["text"]]
                titles = [t or "" for t in batch["title"]] if "title" in batch else None
                batch["vector"] = document_encoder.encode(texts, titles)
                writer.write(batch, list(fields))
                if progress is not None:
                    progress(len(batch["id"]))
    return writer.index.ntotal, dimension


def rebuild_faiss_index(index_dir: Path, spec: FaissIndexSpec) -> dict:
    """Replace the ``index`` in ``index_dir`` (one that keeps exact vectors) by one of ``spec``'s type over the
    same vectors."""
    import faiss

    path = index_dir / "index"
    current = faiss_index.read(path)
    if spec.type == "flat" and faiss_index.index_type(current) == "flat":
        return spec.to_json()
    spec = spec.resolved(current.ntotal, current.d)

    tmp = path.with_name("index.partial")
    faiss.write_index(faiss_index.build(current, spec), str(tmp))
    tmp.replace(path)
    return spec.to_json()


def copy_dense_index(source: str | Path, out_dir: Path, faiss_spec: FaissIndexSpec) -> IndexMeta:
    """A new index of ``faiss_spec``'s type over the vectors of the dense index ``source`` (no re-encoding),
    with its docids and document store, as ``pyserini.index.faiss --input`` does. ``source`` may be any
    FaissSearcher directory (one of Pyserini's prebuilt indexes too) whose index keeps exact vectors."""
    source = Path(source)
    if index_kind(source) != "dense":
        raise UserError(f"--from-index {source}: not a dense index")
    index = check_faiss_file(source / "index")
    if not faiss_index.exact_vectors(index):
        raise UserError(f"--from-index {source}: its Faiss index does not keep exact vectors")
    for name in ("index", "docid", DOCSTORE_FILE):
        if (source / name).exists():
            shutil.copyfile(source / name, out_dir / name)
    meta = IndexMeta.read(source) or IndexMeta(kind="dense", collection="", num_docs=index.ntotal, dimension=index.d)
    meta.faiss_index = rebuild_faiss_index(out_dir, faiss_spec)
    meta.extra = {**meta.extra, "from_index": str(source)}
    return meta
