"""What the trainers that learn from answer strings (train-qa, train-orqa, train-reader) read alike: their
shared flags, the answered training questions, and the dense index the question encoder retrieves from."""

from __future__ import annotations

import argparse
from pathlib import Path

from tour_pyserini.errors import UserError


def add_answer_training_flags(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--exclude-texts-from", metavar="TOPICS", help="drop training questions whose text is in these")
    ap.add_argument("--overwrite", action="store_true", help="replace --output if it exists")


def answered_questions(args: argparse.Namespace, needs: str) -> list:
    """``--topics`` without the texts of ``--exclude-texts-from``, those with answers; at least two, else one
    line saying what ``needs`` them."""
    from tour_pyserini.files import read_topics

    topics = read_topics(args.topics)
    if args.exclude_texts_from:
        held_out = {t.text for t in read_topics(args.exclude_texts_from)}
        topics = [t for t in topics if t.text not in held_out]
    topics = [t for t in topics if t.answers]
    if len(topics) < 2:
        raise UserError(f"{args.topics}: fewer than two questions with answers ({needs})")
    return topics


def dense_index_with_encoder(index: str, why_dense: str):
    """The index directory and its metadata: a dense index built here (its encoder recorded), else one line."""
    from tour_pyserini.index.layout import IndexMeta, MissingIndexError, check_faiss_file, index_kind

    index_dir = Path(index)
    if index_kind(index_dir) != "dense":
        raise MissingIndexError(f"{index_dir} is a BM25 index; {why_dense}")
    check_faiss_file(index_dir / "index")
    meta = IndexMeta.read(index_dir)
    if meta is None or not meta.encoder:
        raise UserError(f"{index_dir} was not built by python -m tour_pyserini.index (no encoder recorded)")
    return index_dir, meta
