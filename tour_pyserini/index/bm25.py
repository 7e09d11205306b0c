"""BM25 indexes built by Anserini's own indexer (what ``python -m pyserini.index.lucene`` runs)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from tour_pyserini._java import import_pyserini
from tour_pyserini.index.bm25_matrix import write_term_matrix
from tour_pyserini.index.build import corpus_file
from tour_pyserini.index.docstore import DocStore, read_jsonl_corpus
from tour_pyserini.index.layout import DOCSTORE_FILE, IndexMeta


def write_bm25_index(collection: str | Path, out_dir: Path, threads: int = 1) -> IndexMeta:
    """Index the ``contents`` field of a JSONL corpus with Lucene (JsonCollection, positions, raw docs).

    The index's term matrix, which the BM25 teacher scores with, is exported beside it.
    """
    corpus = corpus_file(collection).resolve()
    autoclass = import_pyserini("pyserini.pyclass").autoclass
    with tempfile.TemporaryDirectory() as input_dir:
        # JsonCollection reads every file of its input directory; give it the corpus alone
        (Path(input_dir) / corpus.name).symlink_to(corpus)
        args = [
            "-collection", "JsonCollection",
            "-generator", "DefaultLuceneDocumentGenerator",
            "-input", input_dir,
            "-index", str(out_dir),
            "-threads", str(threads),
            "-storePositions", "-storeDocvectors", "-storeRaw",
        ]  # fmt: skip
        autoclass("io.anserini.index.IndexCollection").main(args)
    write_term_matrix(out_dir)
    n_docs = DocStore.build(out_dir / DOCSTORE_FILE, read_jsonl_corpus(corpus))
    return IndexMeta(kind="bm25", collection=str(collection), num_docs=n_docs)
