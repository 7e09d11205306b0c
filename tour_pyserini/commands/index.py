"""python -m tour_pyserini.index: build a dense or a BM25 index of a JSONL collection.

Dense indexes are exact (``--faiss-index flat``, the default), HNSW graphs or IVF-PQ with exact refinement
vectors; ``--from-index`` builds one type from another dense index's vectors without encoding again.
``--shard I --shards N`` encodes one shard of the collection (as ``pyserini.encode --shard-id --shard-num``)
and ``--merge`` joins every shard into the index one process builds.
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from pathlib import Path

from tour_pyserini.commands.flags import ArgumentParser, CollectionName, add_encoder_flags, encoder_settings
from tour_pyserini.devices import check_device
from tour_pyserini.encoders import DEFAULT_ENCODER, EncoderSpec, encoder_identity
from tour_pyserini.errors import UserError
from tour_pyserini.files.staging import check_place
from tour_pyserini.index.build import IndexRequest, build_index
from tour_pyserini.index.corpus import check_corpus, corpus_file
from tour_pyserini.index.faiss_index import INDEX_TYPES, FaissIndexSpec
from tour_pyserini.index.layout import IndexMeta
from tour_pyserini.index.shards import Shard
from tour_pyserini.numbers import non_negative_int, positive_int


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="python -m tour_pyserini.index", description=__doc__)
    source = ap.add_mutually_exclusive_group(required=True)
    source.add_argument("--collection", action=CollectionName, help="a collection: its name, directory or .jsonl file")
    source.add_argument("--from-index", metavar="DIR", help="re-index the vectors of this dense index (no encoding)")
    source.add_argument(
        "--merge",
        nargs="+",
        metavar="SHARD_DIR",
        help="join all the shards of a build (any "
        "order) into the index one process builds, of the shards' encoder and index type",
    )
    ap.add_argument(
        "--output",
        required=True,
        help="index directory to create (reused when it exists and was built as asked, refused when built otherwise)",
    )
    ap.add_argument("--bm25", action="store_true", help="build a Lucene BM25 index instead of a dense one")
    ap.add_argument("--encoder", default=DEFAULT_ENCODER, help="local model directory or hub id (dense only)")
    ap.add_argument("--batch-size", type=positive_int, default=64, help="documents encoded together (dense)")
    ap.add_argument("--device", default="cpu", help="where the document encoder runs: cpu, cuda or cuda:N")
    ap.add_argument("--threads", type=positive_int, default=1, help="Lucene indexing threads (BM25 only)")
    ap.add_argument(
        "--overwrite",
        action="store_true",
        help="rebuild even if --output exists (the old index stays until the new one is complete)",
    )
    ap.add_argument("--no-prebuilt", action="store_true", help="encode even if prebuilt/ holds this corpus's vectors")
    add_encoder_flags(ap, "document")
    sh = ap.add_argument_group("sharded builds (dense only; the documents of pyserini.encode --shard-id --shard-num)")
    sh.add_argument(
        "--shard",
        type=non_negative_int,
        metavar="I",
        help="encode only shard I (0-based) into --output; the --faiss-index flags are recorded for --merge",
    )
    sh.add_argument(
        "--shards",
        type=positive_int,
        metavar="N",
        help="the number of shards; with --shard, or with --ray (default: one per worker)",
    )
    dist = ap.add_argument_group("sharded builds on Ray (dense only)")
    dist.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="encode the shards on Ray workers "
        "and merge them into --output; alone, a local Ray instance started for this build; 'auto' or "
        "ray://HOST:PORT, a running cluster. Finished shards are kept in OUTPUT.shards until the "
        "merge: run again to resume",
    )
    dist.add_argument(
        "--workers",
        type=positive_int,
        help=f"Ray workers, each encoding one shard at a time (one CPU, "
        f"or one GPU with --device cuda; default {DEFAULT_WORKERS}); needs --ray",
    )
    fx = ap.add_argument_group("Faiss index type (dense only; flags as in pyserini.index.faiss)")
    fx.add_argument("--faiss-index", choices=INDEX_TYPES, default="flat", help="exact, HNSW graph, or IVF-PQ")
    fx.add_argument("--M", type=positive_int, default=32, help="HNSW: neighbours per node")
    fx.add_argument("--efC", type=positive_int, default=100, help="HNSW: candidate list size while building")
    fx.add_argument(
        "--ef-search", type=positive_int, default=128, help="HNSW: default candidate list size when searching"
    )
    fx.add_argument("--nlist", type=positive_int, help="IVF-PQ: inverted lists (default 4*sqrt(n), at most n/39)")
    fx.add_argument(
        "--nprobe", type=positive_int, help="IVF-PQ: lists visited per query (default nlist/16, at least 32)"
    )
    fx.add_argument(
        "--pq-m", type=positive_int, help="IVF-PQ: sub-quantisers, must divide the dimension (default dim/8)"
    )
    fx.add_argument("--pq-nbits", type=positive_int, default=8, help="IVF-PQ: bits per sub-quantiser code")
    return ap


def faiss_spec(args: argparse.Namespace) -> FaissIndexSpec:
    spec = FaissIndexSpec(
        type=args.faiss_index,
        M=args.M,
        ef_construction=args.efC,
        ef_search=args.ef_search,
        nlist=args.nlist,
        nprobe=args.nprobe,
        pq_m=args.pq_m,
        pq_nbits=args.pq_nbits,
    )
    return spec.check()


MERGE_OPTIONS = ("merge", "output", "overwrite")  # the rest comes from the shards
DEFAULT_WORKERS = 2


def check_sharding(ap: argparse.ArgumentParser, args: argparse.Namespace) -> Shard | None:
    """The shard asked for (None: the whole collection), with the flags that do not go with sharding refused
    before anything is read."""
    if args.merge:
        if given := [
            f"--{k.replace('_', '-')}"
            for k, v in vars(args).items()
            if k not in MERGE_OPTIONS and v != ap.get_default(k)
        ]:
            raise UserError(
                f"--merge takes the encoder, its settings and the index type from its shards; "
                f"{', '.join(given)} cannot be given with it"
            )
        return None
    if args.workers is not None and args.ray is None:
        raise UserError("--workers needs --ray (without it the index is built in this process)")
    if args.ray is not None:
        if args.shard is not None:
            raise UserError("--ray builds every shard: --shard I builds one, without --ray")
        if args.bm25 or args.from_index:
            raise UserError(
                f"--ray encodes a collection; it does not apply to {'--bm25' if args.bm25 else '--from-index'}"
            )
        return None
    if (args.shard is None) != (args.shards is None):
        raise UserError("--shard I and --shards N go together")
    if args.shard is None:
        return None
    if args.bm25 or args.from_index:
        raise UserError(
            f"--shard splits the encoding of a collection; it does not apply to "
            f"{'--bm25' if args.bm25 else '--from-index'}"
        )
    return Shard(args.shard, args.shards).check()


def main(argv: list[str] | None = None) -> None:
    ap = parser()
    args = ap.parse_args(argv)
    shard = check_sharding(ap, args)
    reused = Path(args.output).exists() and not args.overwrite
    if args.merge:
        from tour_pyserini.index.shards import check_shards, merge_shards

        shards = check_shards(args.merge)
        meta = build_index(args.output, partial(merge_shards, shards), args.overwrite, shards.request())
        print(("reusing " if reused else "") + describe(args.output, meta))
        return
    spec = faiss_spec(args)
    if args.from_index:
        if args.bm25:
            raise UserError("--from-index re-indexes dense vectors; it cannot build a BM25 index")
        from tour_pyserini.index.dense import copy_dense_index

        request = IndexRequest("dense", faiss_index=spec, from_index=args.from_index)
        meta = build_index(
            args.output, partial(copy_dense_index, args.from_index, faiss_spec=spec), args.overwrite, request
        )
        print(("reusing " if reused else "") + describe(args.output, meta))
        return
    corpus = corpus_file(args.collection)  # fail on a missing or malformed corpus before loading models or the JVM
    if not reused:
        checked = check_corpus(corpus)
        if not args.bm25:
            spec.check_size(checked.num_docs)  # IVF-PQ's training needs: refused before anything is encoded
        if shard is not None:
            shard.check_size(checked.num_docs)
        if args.ray is not None:
            Shard(0, ray_shards(args)).check_size(checked.num_docs)
    if args.bm25:
        from tour_pyserini.index.bm25 import write_bm25_index

        request = IndexRequest("bm25", collection=args.collection)
        write = partial(write_bm25_index, args.collection, threads=args.threads)
    else:
        encoder = EncoderSpec.resolve(args.encoder, settings=encoder_settings(args), side="document")
        if shard is not None:
            meta = build_dense_shard(args, encoder, shard, spec)
            print(("reusing " if reused else "") + f"shard {shard.id} of {shard.of}: " + describe(args.output, meta))
            return
        if args.ray is not None and not reused:
            start = time.perf_counter()
            meta = build_on_ray(args, encoder, spec, checked.num_docs)
            print(f"ray: encoded and merged in {time.perf_counter() - start:.1f} s; " + describe(args.output, meta))
            return
        request, write = dense_build(args, encoder, spec)
    meta = build_index(args.output, lambda tmp: write(out_dir=tmp), overwrite=args.overwrite, request=request)
    if not reused and meta.extra.get("prebuilt"):
        print(f"using prebuilt {meta.extra['prebuilt']}: vectors of {meta.num_docs} documents, encoder checked")
    print(("reusing " if reused else "") + describe(args.output, meta))


def build_dense_shard(args: argparse.Namespace, encoder: EncoderSpec, shard: Shard, spec: FaissIndexSpec) -> IndexMeta:
    """One shard of a dense index, encoded here (``index --shard I/N``)."""
    from tour_pyserini.index.shards import shard_request, write_dense_shard

    request = shard_request(args.collection, encoder, shard, spec, args.batch_size)
    write = partial(
        write_dense_shard,
        args.collection,
        encoder=encoder,
        shard=shard,
        batch_size=args.batch_size,
        faiss_spec=spec,
        device=check_device(args.device),
    )
    return build_index(args.output, lambda tmp: write(out_dir=tmp), overwrite=args.overwrite, request=request)


def dense_build(args: argparse.Namespace, encoder: EncoderSpec, spec: FaissIndexSpec):
    """What a whole dense index is built from (its request, for reuse) and the function that writes it."""
    from tour_pyserini.index.dense import write_dense_index
    from tour_pyserini.index.prebuilt import PREBUILT_DIR

    request = IndexRequest(
        "dense",
        collection=args.collection,
        encoder=encoder_identity(encoder),
        faiss_index=spec,
        prebuilt=not args.no_prebuilt,
    )
    write = partial(
        write_dense_index,
        args.collection,
        encoder=encoder,
        batch_size=args.batch_size,
        faiss_spec=spec,
        device=check_device(args.device),
        prebuilt=None if args.no_prebuilt else PREBUILT_DIR,
    )
    return request, write


def ray_shards(args: argparse.Namespace) -> int:
    return args.shards or args.workers or DEFAULT_WORKERS


def build_on_ray(args: argparse.Namespace, encoder: EncoderSpec, spec: FaissIndexSpec, num_docs: int) -> IndexMeta:
    """The shards encoded on Ray workers (one bar for all), then merged into ``--output`` in this process."""
    import shutil

    from tqdm import tqdm

    from tour_pyserini.index.distributed import ShardedBuild, encode_shards_on_ray, shards_directory
    from tour_pyserini.index.shards import check_shards, merge_shards

    check_place(Path(args.output))  # before Ray starts
    build = ShardedBuild(args.collection, encoder, ray_shards(args), args.batch_size, spec, check_device(args.device))
    workers = args.workers or DEFAULT_WORKERS
    with tqdm(total=num_docs, unit="doc", desc=f"encoding {build.shards} shards on {workers} Ray workers") as bar:

        def show(progress) -> None:
            if progress.kept and bar.n == 0:
                bar.write(f"ray: {len(progress.kept)} of {build.shards} shards kept from an earlier run")
            if progress.documents != bar.n:
                bar.n = progress.documents
                bar.refresh()

        directories = encode_shards_on_ray(
            build,
            args.output,
            total=num_docs,
            workers=workers,
            address=None if args.ray == "local" else args.ray,
            overwrite=args.overwrite,
            on_progress=show,
        )
    shards = check_shards(directories)
    meta = build_index(args.output, partial(merge_shards, shards), args.overwrite, shards.request())
    shutil.rmtree(shards_directory(args.output))  # the index is whole: its shards are no longer needed
    return meta


def describe(output: str, meta: IndexMeta) -> str:
    kind = meta.kind if meta.kind != "dense" else f"dense ({meta.faiss_index['type']})"
    return (
        f"{kind} index {output}: {meta.num_docs} docs"
        + (f", {meta.dimension}-d {meta.encoder['name']}" if meta.encoder else "")
        + f"; built in {meta.build_seconds:.1f} s, peak memory {meta.peak_rss_mb:.0f} MB"
    )
