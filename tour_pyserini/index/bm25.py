"""BM25 indexes built by Anserini's own indexer (what ``python -m pyserini.index.lucene`` runs)."""

from __future__ import annotations

import logging
import subprocess
import tempfile
from pathlib import Path

from tour_pyserini._java import import_pyserini, indexer_command, java_startup_note_hidden
from tour_pyserini.errors import UserError
from tour_pyserini.index.bm25_matrix import write_term_matrix
from tour_pyserini.index.build import check_count, corpus_identity
from tour_pyserini.index.corpus import check_corpus, corpus_file, read_jsonl_corpus, write_normalised
from tour_pyserini.index.docstore import DocStore
from tour_pyserini.index.layout import DOCSTORE_FILE, IndexMeta, lucene_created_major

log = logging.getLogger(__name__)

K1 = 0.9  # Anserini's BM25 defaults, which its searcher and computeQueryDocumentScore use
B = 0.4


def run_indexer(args: list[str]) -> None:
    """Anserini's ``IndexCollection`` with ``args``, in a JVM of its own: a call into this process's JVM holds
    Python's signal handlers until Lucene finishes (seconds), while a child process is killed at once on
    Ctrl-C or SIGTERM, so the staged index is removed with nothing writing into it."""
    with java_startup_note_hidden():
        indexer = subprocess.Popen(indexer_command(args), stdin=subprocess.DEVNULL)
        try:
            status = indexer.wait()
        except BaseException:
            indexer.kill()
            indexer.wait()
            raise
    if status != 0:
        raise UserError(
            f"Anserini's indexer failed (exit status {status}; its messages are above); no index was written"
        )


def write_bm25_index(collection: str | Path, out_dir: Path, threads: int = 1) -> IndexMeta:
    """Index the ``contents`` of a JSONL corpus with Lucene (JsonCollection, positions, raw docs).

    Each document is indexed as :func:`~tour_pyserini.index.corpus.lucene_record` writes it: its ``contents`` are
    Pyserini's ``title\ntext`` with newline-free fields, so Pyserini's own DPR tools read the index's raw documents
    back (the corpus file is given to Anserini as it is when every line already is its record). The index must then
    hold exactly the corpus's documents, less the empty ones (with a warning). The index's term matrix, which the
    BM25 teacher scores with, is exported beside it.
    """
    corpus = corpus_file(collection).resolve()
    check = check_corpus(corpus)
    with tempfile.TemporaryDirectory() as input_dir:
        # JsonCollection reads every file of its input directory; give it the corpus alone
        staged = Path(input_dir) / "corpus.jsonl"
        if check.lucene_ready:
            staged.symlink_to(corpus)
        else:
            write_normalised(corpus, staged, fields="contents")
        run_indexer(
            [
                "-collection",
                "JsonCollection",
                "-generator",
                "DefaultLuceneDocumentGenerator",
                "-input",
                input_dir,
                "-index",
                str(out_dir),
                "-threads",
                str(threads),
                "-storePositions",
                "-storeDocvectors",
                "-storeRaw",
            ]
        )
    indexed = import_pyserini("pyserini.index.lucene").LuceneIndexReader(str(out_dir)).stats()["documents"]
    check_count(corpus, indexer="Lucene", indexed=indexed, expected=check.num_docs - len(check.empty))
    if check.empty:
        log.warning(
            "%s: %d documents have empty text and are not in the BM25 index (first: %s)",
            corpus,
            len(check.empty),
            ", ".join(check.empty[:5]),
        )
    write_term_matrix(out_dir)
    n_docs = DocStore.build(out_dir / DOCSTORE_FILE, read_jsonl_corpus(corpus))
    return IndexMeta(
        kind="bm25",
        collection=str(collection),
        num_docs=n_docs,
        corpus=corpus_identity(corpus),
        lucene_major=lucene_created_major(out_dir),
    )
