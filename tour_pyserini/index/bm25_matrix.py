"""A Lucene index's term frequencies as a sparse matrix, exported once and stored beside the index.

What BM25 needs of an index is its postings (term frequencies), each document's one-byte length
norm, each term's document frequency and two field statistics; with them stored as arrays
(``bm25_matrix.npz`` inside the index directory), the BM25 teacher scores any set of (query,
candidate) pairs with one sparse product instead of one Lucene search per pair.
``python -m tour_pyserini.index --bm25`` writes the file; the teacher writes it on first use for an
index built before.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import sparse

from tour_pyserini._java import import_pyserini

MATRIX_FILE = "bm25_matrix.npz"
FIELD = "contents"  # Anserini's indexed text field


@dataclass(frozen=True)
class TermMatrix:
    """Row i is Lucene's internal document i, column j is the analysed term ``terms[j]``."""

    docids: list[str]
    terms: list[str]
    tf: sparse.csr_matrix  # (documents, terms) term frequencies
    df: np.ndarray  # (terms,) documents containing each term
    norms: np.ndarray  # (documents,) Lucene's encoded lengths (uint8)
    doc_count: int  # documents that have the field
    sum_total_tf: int  # tokens in the field, over all documents
    commit: str  # the index commit (segments_N files) the arrays were read from

    def save(self, path: Path) -> None:
        """Write to ``path`` through a temporary file, so readers never see half a file."""
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        try:
            with open(tmp, "wb") as f:
                np.savez(
                    f,
                    allow_pickle=False,  # every array is numeric or text, as np.load reads them by default
                    **_pack("docids", self.docids),
                    **_pack("terms", self.terms),
                    df=self.df,
                    norms=self.norms,
                    indptr=self.tf.indptr,
                    indices=self.tf.indices,
                    data=self.tf.data,
                    stats=np.array([self.doc_count, self.sum_total_tf], dtype=np.int64),
                    commit=np.array(self.commit),
                )
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    @classmethod
    def load(cls, path: Path) -> TermMatrix:
        with np.load(path) as z:
            docids, terms = _unpack(z, "docids"), _unpack(z, "terms")
            tf = sparse.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=(len(docids), len(terms)))
            doc_count, sum_total_tf = (int(v) for v in z["stats"])
            return cls(docids, terms, tf, z["df"], z["norms"], doc_count, sum_total_tf, str(z["commit"]))


def _pack(name: str, strings: list[str]) -> dict[str, np.ndarray]:
    """Strings as one UTF-8 buffer and offsets: compact, and loadable without pickle."""
    encoded = [s.encode("utf-8") for s in strings]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return {f"{name}_utf8": np.frombuffer(b"".join(encoded), dtype=np.uint8), f"{name}_offsets": offsets}


def _unpack(z, name: str) -> list[str]:
    buffer, offsets = z[f"{name}_utf8"].tobytes(), z[f"{name}_offsets"]
    return [buffer[a:b].decode("utf-8") for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]


def index_commit(index_dir: Path) -> str:
    return " ".join(sorted(p.name for p in index_dir.glob("segments_*")))


def export_term_matrix(index_dir: str | Path) -> TermMatrix:
    """Read postings, norms, statistics and collection docids out of a Lucene index (about 3 s per 5k docs)."""
    index_dir = Path(index_dir)
    autoclass = import_pyserini("pyserini.pyclass").autoclass
    utils = autoclass("io.anserini.index.IndexReaderUtils")
    no_more_docs = autoclass("org.apache.lucene.search.DocIdSetIterator").NO_MORE_DOCS
    freqs = autoclass("org.apache.lucene.index.PostingsEnum").FREQS
    reader = utils.getReader(str(index_dir))
    try:
        if reader.hasDeletions():
            raise ValueError(f"{index_dir} has deleted documents; rebuild it with `python -m tour_pyserini.index`")
        n = reader.maxDoc()
        columns: dict[str, dict[int, int]] = {}  # term -> {document: tf}, over all segments
        norms = np.zeros(n, dtype=np.uint8)
        leaves = reader.leaves()
        for li in range(leaves.size()):
            context = leaves.get(li)
            leaf, base = context.reader(), context.docBase
            if (terms := leaf.terms(FIELD)) is not None:
                term_iter, postings = terms.iterator(), None
                while (term := term_iter.next()) is not None:
                    postings = term_iter.postings(postings, freqs)
                    column = columns.setdefault(term.utf8ToString(), {})
                    while (doc := postings.nextDoc()) != no_more_docs:
                        column[base + doc] = postings.freq()
            if (values := leaf.getNormValues(FIELD)) is not None:
                while (doc := values.nextDoc()) != no_more_docs:
                    norms[base + doc] = values.longValue() & 0xFF
        docids = [utils.convertLuceneDocidToDocid(reader, i) for i in range(n)]
        doc_count, sum_total_tf = reader.getDocCount(FIELD), reader.getSumTotalTermFreq(FIELD)
    finally:
        reader.close()
    terms = sorted(columns)
    df = np.array([len(columns[t]) for t in terms], dtype=np.int64)
    indptr = np.zeros(len(terms) + 1, dtype=np.int64)
    np.cumsum(df, out=indptr[1:])
    rows = np.fromiter((d for t in terms for d in columns[t]), dtype=np.int32, count=int(indptr[-1]))
    data = np.fromiter((f for t in terms for f in columns[t].values()), dtype=np.int32, count=int(indptr[-1]))
    tf = sparse.csc_matrix((data, rows, indptr), shape=(n, len(terms))).tocsr()
    tf.sort_indices()
    return TermMatrix(docids, terms, tf, df, norms, doc_count, sum_total_tf, index_commit(index_dir))


def write_term_matrix(index_dir: str | Path) -> TermMatrix:
    matrix = export_term_matrix(index_dir)
    matrix.save(Path(index_dir) / MATRIX_FILE)
    return matrix


def load_term_matrix(index_dir: str | Path) -> TermMatrix:
    """The stored matrix of ``index_dir``, exported (and stored, where the directory is writable) when missing
    or exported from another commit of the index."""
    index_dir = Path(index_dir)
    path = index_dir / MATRIX_FILE
    if path.exists():
        matrix = TermMatrix.load(path)
        if matrix.commit == index_commit(index_dir):
            return matrix
    matrix = export_term_matrix(index_dir)
    try:
        matrix.save(path)
    except OSError:  # a read-only index: keep the export in memory only
        pass
    return matrix
