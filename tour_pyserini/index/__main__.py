"""python -m tour_pyserini.index: build a dense or a BM25 index of a JSONL collection."""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

from tour_pyserini.cli_util import run_cli
from tour_pyserini.encoders import DEFAULT_ENCODER, EncoderSpec
from tour_pyserini.errors import UserError
from tour_pyserini.index.build import build_index, corpus_file
from tour_pyserini.index.corpus import check_corpus


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tour_pyserini.index", description=__doc__)
    ap.add_argument("--collection", required=True, help="collection directory with corpus.jsonl, or a .jsonl file")
    ap.add_argument("--output", required=True, help="index directory to create (reused when it already exists)")
    ap.add_argument("--bm25", action="store_true", help="build a Lucene BM25 index instead of a dense one")
    ap.add_argument("--encoder", default=DEFAULT_ENCODER, help="local model directory or hub id (dense only)")
    ap.add_argument("--pooling", choices=["mean", "cls"], help="override the encoder's pooling")
    ap.add_argument("--l2-norm", action=argparse.BooleanOptionalAction, default=None, help="override normalisation")
    ap.add_argument("--max-length", type=int, help="override the encoder's maximum document length in tokens")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="Lucene indexing threads (BM25 only)")
    ap.add_argument("--overwrite", action="store_true", help="rebuild even if --output exists")
    ap.add_argument("--no-prebuilt", action="store_true", help="encode even if prebuilt/ holds this corpus's vectors")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    for flag in ("batch_size", "threads"):
        if getattr(args, flag) < 1:
            raise UserError(f"--{flag.replace('_', '-')} must be positive, got {getattr(args, flag)}")
    reused = Path(args.output).exists() and not args.overwrite
    corpus = corpus_file(args.collection)  # fail on a missing or malformed corpus before loading models or the JVM
    if not reused:
        check_corpus(corpus)
    if args.bm25:
        from tour_pyserini.index.bm25 import write_bm25_index

        write = partial(write_bm25_index, args.collection, threads=args.threads)
    else:
        from tour_pyserini.index.dense import write_dense_index

        spec = EncoderSpec.resolve(args.encoder, args.pooling, args.l2_norm, args.max_length)
        write = partial(write_dense_index, args.collection, encoder=spec, batch_size=args.batch_size,
                        **({"prebuilt": None} if args.no_prebuilt else {}))  # fmt: skip
    meta = build_index(args.output, lambda tmp: write(out_dir=tmp), overwrite=args.overwrite)
    print(
        ("reusing " if reused else "")
        + f"{meta.kind} index {args.output}: {meta.num_docs} docs"
        + (f", {meta.dimension}-d {meta.encoder['name']}" if meta.encoder else "")
        + f"; built in {meta.build_seconds:.1f} s, peak memory {meta.peak_rss_mb:.0f} MB"
    )


if __name__ == "__main__":
    run_cli(main)
