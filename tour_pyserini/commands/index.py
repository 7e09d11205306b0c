"""python -m tour_pyserini.index: build a dense or a BM25 index of a JSONL collection.

Dense indexes are exact (``--faiss-index flat``, the default), HNSW graphs or IVF-PQ with exact refinement
vectors; ``--from-index`` builds one type from another dense index's vectors without encoding again.
"""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path

from tour_pyserini.commands.flags import ArgumentParser, add_encoder_flags, encoder_settings
from tour_pyserini.devices import check_device
from tour_pyserini.encoders import DEFAULT_ENCODER, EncoderSpec, encoder_identity
from tour_pyserini.errors import UserError
from tour_pyserini.index.build import IndexRequest, build_index
from tour_pyserini.index.corpus import check_corpus, corpus_file
from tour_pyserini.index.faiss_index import INDEX_TYPES, FaissIndexSpec
from tour_pyserini.numbers import positive_int


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="python -m tour_pyserini.index", description=__doc__)
    source = ap.add_mutually_exclusive_group(required=True)
    source.add_argument("--collection", help="collection directory with corpus.jsonl, or a .jsonl file")
    source.add_argument("--from-index", metavar="DIR", help="re-index the vectors of this dense index (no encoding)")
    ap.add_argument("--output", required=True, help="index directory to create (reused when it exists and was "
                    "built as asked, refused when built otherwise)")  # fmt: skip
    ap.add_argument("--bm25", action="store_true", help="build a Lucene BM25 index instead of a dense one")
    ap.add_argument("--encoder", default=DEFAULT_ENCODER, help="local model directory or hub id (dense only)")
    ap.add_argument("--batch-size", type=positive_int, default=64, help="documents encoded together (dense)")
    ap.add_argument("--device", default="cpu", help="where the document encoder runs: cpu, cuda or cuda:N")
    ap.add_argument("--threads", type=positive_int, default=1, help="Lucene indexing threads (BM25 only)")
    ap.add_argument("--overwrite", action="store_true", help="rebuild even if --output exists (the old index "
                    "stays until the new one is complete)")  # fmt: skip
    ap.add_argument("--no-prebuilt", action="store_true", help="encode even if prebuilt/ holds this corpus's vectors")
    add_encoder_flags(ap, "document")
    fx = ap.add_argument_group("Faiss index type (dense only; flags as in pyserini.index.faiss)")
    fx.add_argument("--faiss-index", choices=INDEX_TYPES, default="flat", help="exact, HNSW graph, or IVF-PQ")
    fx.add_argument("--M", type=positive_int, default=32, help="HNSW: neighbours per node")
    fx.add_argument("--efC", type=positive_int, default=100, help="HNSW: candidate list size while building")
    fx.add_argument("--ef-search", type=positive_int, default=128,
                    help="HNSW: default candidate list size when searching")  # fmt: skip
    fx.add_argument("--nlist", type=positive_int, help="IVF-PQ: inverted lists (default 4*sqrt(n), at most n/39)")
    fx.add_argument("--nprobe", type=positive_int,
                    help="IVF-PQ: lists visited per query (default nlist/16, at least 32)")  # fmt: skip
    fx.add_argument("--pq-m", type=positive_int,
                    help="IVF-PQ: sub-quantisers, must divide the dimension (default dim/8)")  # fmt: skip
    fx.add_argument("--pq-nbits", type=positive_int, default=8, help="IVF-PQ: bits per sub-quantiser code")
    return ap


def faiss_spec(args: argparse.Namespace) -> FaissIndexSpec:
    spec = FaissIndexSpec(type=args.faiss_index, M=args.M, ef_construction=args.efC, ef_search=args.ef_search,
                          nlist=args.nlist, nprobe=args.nprobe, pq_m=args.pq_m, pq_nbits=args.pq_nbits)  # fmt: skip
    return spec.check()


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    reused = Path(args.output).exists() and not args.overwrite
    spec = faiss_spec(args)
    if args.from_index:
        if args.bm25:
            raise UserError("--from-index re-indexes dense vectors; it cannot build a BM25 index")
        from tour_pyserini.index.dense import copy_dense_index

        request = IndexRequest("dense", faiss_index=spec, from_index=args.from_index)
        meta = build_index(args.output, partial(copy_dense_index, args.from_index, faiss_spec=spec), args.overwrite,
                           request)  # fmt: skip
        print(("reusing " if reused else "") + describe(args.output, meta))
        return
    corpus = corpus_file(args.collection)  # fail on a missing or malformed corpus before loading models or the JVM
    if not reused:
        checked = check_corpus(corpus)
        if not args.bm25:
            spec.check_size(checked.num_docs)  # IVF-PQ's training needs: refused before anything is encoded
    if args.bm25:
        from tour_pyserini.index.bm25 import write_bm25_index

        request = IndexRequest("bm25", collection=args.collection)
        write = partial(write_bm25_index, args.collection, threads=args.threads)
    else:
        from tour_pyserini.index.dense import write_dense_index

        encoder = EncoderSpec.resolve(args.encoder, settings=encoder_settings(args), side="document")
        request = IndexRequest("dense", collection=args.collection, encoder=encoder_identity(encoder),
                               faiss_index=spec, prebuilt=not args.no_prebuilt)  # fmt: skip
        write = partial(write_dense_index, args.collection, encoder=encoder, batch_size=args.batch_size,
                        faiss_spec=spec, device=check_device(args.device),
                        **({"prebuilt": None} if args.no_prebuilt else {}))  # fmt: skip
    meta = build_index(args.output, lambda tmp: write(out_dir=tmp), overwrite=args.overwrite, request=request)
    if not reused and meta.extra.get("prebuilt"):
        print(f"using prebuilt {meta.extra['prebuilt']}: vectors of {meta.num_docs} documents, encoder checked")
    print(("reusing " if reused else "") + describe(args.output, meta))


def describe(output: str, meta) -> str:
    kind = meta.kind if meta.kind != "dense" else f"dense ({meta.faiss_index['type']})"
    return (
        f"{kind} index {output}: {meta.num_docs} docs"
        + (f", {meta.dimension}-d {meta.encoder['name']}" if meta.encoder else "")
        + f"; built in {meta.build_seconds:.1f} s, peak memory {meta.peak_rss_mb:.0f} MB"
    )
