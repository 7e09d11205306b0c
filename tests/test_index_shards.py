"""Sharded dense builds: each shard holds the documents pyserini.encode gives it, and the merged shards are the
index one process builds (the same bytes, metadata and runs), flat and IVF-PQ; mixed shards are refused."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from tour_pyserini.commands.index import main as index_main
from tour_pyserini.commands.search import main as search_main
from tour_pyserini.errors import UserError
from tour_pyserini.index import faiss_index
from tour_pyserini.index.layout import META_FILE, IndexMeta, index_fingerprint
from tour_pyserini.index.shards import Shard

N_DOCS = 80  # enough for IVF-PQ with 4-bit codes (16 centroids) and 2 lists
IVFPQ = ["--faiss-index", "ivfpq", "--pq-nbits", "4"]
BATCH = ["--batch-size", "20"]  # divides each shard: the same batches as one process


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """The first SciFact abstracts cut to their first words (quick to encode), and three of its queries."""
    from conftest import SCIFACT

    out = tmp_path_factory.mktemp("shard-corpus")
    lines = (SCIFACT / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:N_DOCS]
    docs = [{**d, "text": " ".join(d["text"].split()[:12])} for d in map(json.loads, lines)]
    (out / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    topics = (SCIFACT / "topics.test.tsv").read_text(encoding="utf-8").splitlines()[:3]
    (out / "topics.tsv").write_text("".join(t + "\n" for t in topics), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def built(corpus, tmp_path_factory):
    """Per index type: the one-process index, its two shards, and the shards merged (given in reverse)."""
    root = tmp_path_factory.mktemp("shard-builds")
    out = {}
    for kind, flags in (("flat", []), ("hnsw", ["--faiss-index", "hnsw", "--M", "8"]), ("ivfpq", IVFPQ)):
        dirs = {name: root / f"{kind}.{name}" for name in ("one", "s0", "s1", "merged")}
        index_main(["--collection", str(corpus), "--output", str(dirs["one"]), *BATCH, *flags])
        for i in (0, 1):
            index_main(
                [
                    "--collection",
                    str(corpus),
                    "--output",
                    str(dirs[f"s{i}"]),
                    *BATCH,
                    *flags,
                    "--shard",
                    str(i),
                    "--shards",
                    "2",
                ]
            )
        index_main(["--merge", str(dirs["s1"]), str(dirs["s0"]), "--output", str(dirs["merged"])])
        out[kind] = dirs
    return out


@pytest.mark.slow
def test_a_shard_holds_the_documents_pyserini_encode_gives_it(corpus, built):
    from tour_pyserini._java import import_pyserini

    iterator = import_pyserini("pyserini.encode").JsonlCollectionIterator(str(corpus / "corpus.jsonl"))
    docids = iterator.all_info["id"]
    for n_docs, shards in ((N_DOCS, 2), (N_DOCS, 3), (N_DOCS, 7), (N_DOCS, N_DOCS)):
        for i in range(shards):
            theirs = [d for batch in iterator(16, i, shards) for d in batch["id"]]
            start, end = Shard(i, shards).rows(n_docs)
            assert docids[start:end] == theirs
    for i in (0, 1):  # and the built shards hold them, in that order
        theirs = [d for batch in iterator(20, i, 2) for d in batch["id"]]
        assert faiss_index.read_docids(built["flat"][f"s{i}"]) == theirs


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivfpq"])
def test_merged_shards_are_the_index_one_process_builds(kind, built, corpus, tmp_path):
    dirs = built[kind]
    one, merged = dirs["one"], dirs["merged"]
    for name in ("index", "docid"):
        assert (one / name).read_bytes() == (merged / name).read_bytes()
    vectors, docids = faiss_index.read_vectors(merged)
    expected_vectors, expected_docids = faiss_index.read_vectors(one)
    assert docids == expected_docids and np.array_equal(vectors, expected_vectors)  # the exact store, for IVF-PQ
    assert faiss_index.index_type(faiss_index.read(merged / "index")) == kind
    times = ("build_seconds", "peak_rss_mb")
    meta, expected = ({k: v for k, v in vars(IndexMeta.read(d)).items() if k not in times} for d in (merged, one))
    assert meta == expected and index_fingerprint(merged) == index_fingerprint(one)
    runs = []
    for index in (one, merged):
        run = tmp_path / f"{index.name}.trec"
        search_main(
            [
                "--index",
                str(index),
                "--topics",
                str(corpus / "topics.tsv"),
                "--output",
                str(run),
                "--hits",
                "10",
                "--run-tag",
                "t",
            ]
        )
        runs.append(run.read_text())
    assert runs[0] == runs[1] and runs[0].count("\n") == 30


def test_a_built_shard_is_reused_and_never_taken_for_the_whole_index(built, corpus, capsys):
    shard = built["flat"]["s0"]
    index_main(["--collection", str(corpus), "--output", str(shard), *BATCH, "--shard", "0", "--shards", "2"])
    assert capsys.readouterr().out.startswith("reusing shard 0 of 2")
    with pytest.raises(
        UserError, match=r"built with shard 0 of 2 \(batch size 20, to merge as flat\), asked the whole"
    ):
        index_main(["--collection", str(corpus), "--output", str(shard), *BATCH])
    with pytest.raises(
        UserError,
        match=r"shard 0 of 2 \(batch size 20, to merge as flat\), asked shard 0 of 2 "
        r"\(batch size 20, to merge as ivfpq, pq_nbits 4\)",
    ):
        index_main(
            ["--collection", str(corpus), "--output", str(shard), *BATCH, *IVFPQ, "--shard", "0", "--shards", "2"]
        )


def altered(shard, tmp_path, name: str, change) -> str:
    """A copy of ``shard`` whose metadata records something else."""
    copy = tmp_path / name
    shutil.copytree(shard, copy)
    meta = json.loads((copy / META_FILE).read_text())
    change(meta)
    (copy / META_FILE).write_text(json.dumps(meta))
    return str(copy)


def test_shards_of_other_builds_overlapping_or_missing_are_refused(built, corpus, tmp_path):
    s0, s1 = (str(built["flat"][f"s{i}"]) for i in (0, 1))
    other_batch = altered(s1, tmp_path, "batch", lambda m: m["extra"].update(batch_size=40))
    other_batch = altered(other_batch, tmp_path, "batch2", lambda m: m["extra"]["shard"].update(batch_size=40))
    pooling = altered(s1, tmp_path, "pooling", lambda m: m["encoder"].update(pooling="cls"))
    other_corpus = altered(s1, tmp_path, "corpus", lambda m: m["corpus"].update(sha256="0" * 64))
    cases = {
        (s0, s0): r"^--merge: shard 0 of 2 is given twice \(",
        (s1,): r"^--merge: shard 0 of 2 missing \(build with index --collection \.\.\. --shard I --shards 2\)$",
        (
            s0,
            str(built["ivfpq"]["s1"]),
        ): r"^--merge: shards of different builds: --faiss-index ivfpq, pq_nbits 4 \(.*\) and --faiss-index flat \(",
        (s0, other_batch): r"^--merge: shards of different builds: --batch-size 40 \(.*batch2\) and --batch-size 20",
        (s0, pooling): r"^--merge: shards of different builds: encoder .*cls pooling.* and .*mean pooling",
        (s0, other_corpus): r"^--merge: shards of different builds: corpus SHA-256 000000000000",
        (s0, str(built["flat"]["one"])): r"^--merge .*flat\.one: not a shard \(build one with",
        (s0, str(tmp_path / "nothing")): r"^--merge .*nothing: no such directory$",
    }
    for shards, message in cases.items():
        with pytest.raises(UserError, match=message):
            index_main(["--merge", *shards, "--output", str(tmp_path / "merged")])
    from test_cli import run_module

    proc = run_module("tour_pyserini.index", "--merge", s1, "--output", str(tmp_path / "merged"))
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: --merge: shard 0 of 2 missing (build with index --collection ... --shard I --shards 2)"
    ]
    with pytest.raises(
        UserError,
        match="--merge takes the encoder, its settings and the index type from its "
        "shards; --batch-size, --faiss-index cannot be given with it",
    ):
        index_main(["--merge", s0, s1, "--output", str(tmp_path / "merged"), "--batch-size", "8", *IVFPQ[:2]])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("merged")]  # nothing half-written


def test_a_corpus_changed_since_its_shards_were_encoded_is_refused(built, corpus, tmp_path):
    moved = tmp_path / "corpus"
    shutil.copytree(corpus, moved)
    shards = [
        altered(
            built["flat"][f"s{i}"], tmp_path, f"s{i}", lambda m: m["corpus"].update(path=str(moved / "corpus.jsonl"))
        )
        for i in (0, 1)
    ]
    with (moved / "corpus.jsonl").open("a") as f:
        f.write(json.dumps({"id": "new", "title": "", "text": "a document added since"}) + "\n")
    with pytest.raises(UserError, match=r"^--merge: the shards were encoded from .*corpus\.jsonl as it was"):
        index_main(["--merge", *shards, "--output", str(tmp_path / "merged")])
    assert not (tmp_path / "merged").exists()


def test_bad_shard_flags_are_refused_before_any_model_loads(corpus, tmp_path, monkeypatch):
    from test_cli import run_module

    import tour_pyserini.index.dense as dense

    proc = run_module(
        "tour_pyserini.index",
        "--collection",
        str(corpus),
        "--output",
        str(tmp_path / "x"),
        "--shard",
        "0",
        "--shards",
        str(N_DOCS + 1),
    )
    assert proc.returncode == 2 and "Loading weights" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: --shards {N_DOCS + 1} is more than the collection's {N_DOCS} documents"
    ]
    monkeypatch.setattr(dense, "DocumentEncoder", None)  # loading the encoder would fail otherwise
    cases = {
        ("--shard", "0"): "--shard I and --shards N go together",
        ("--shards", "2"): "--shard I and --shards N go together",
        ("--shard", "2", "--shards", "2"): "--shard must be in [0, 1] for --shards 2, got 2",
        ("--shard", "0", "--shards", "2", "--bm25"): "--shard splits the encoding of a collection; it does not "
        "apply to --bm25",
        ("--workers", "2"): "--workers needs --ray (without it the index is built in this process)",
        ("--ray", "--shard", "0", "--shards", "2"): "--ray builds every shard: --shard I builds one, without --ray",
        ("--ray", "--bm25"): "--ray encodes a collection; it does not apply to --bm25",
        ("--ray", "--shards", str(N_DOCS + 1)): f"--shards {N_DOCS + 1} is more than the collection's {N_DOCS} "
        "documents",
        ("--shard", "0", "--shards", "2", "--faiss-index", "ivfpq"): "IVF-PQ with 2 lists and 8-bit codes needs at "
        f"least 256 documents to train; the collection has {N_DOCS}",
    }
    for flags, message in cases.items():
        with pytest.raises(UserError) as refused:
            index_main(["--collection", str(corpus), "--output", str(tmp_path / "x"), *flags])
        assert str(refused.value) == message
    assert not list(tmp_path.iterdir())


def test_a_resumed_ray_build_keeps_its_finished_shards_and_clears_half_written_ones(built, corpus, tmp_path):
    from tour_pyserini.encoders import EncoderSpec
    from tour_pyserini.index.distributed import ShardedBuild, kept_shards

    root = tmp_path / "out.shards"
    root.mkdir()
    shutil.copytree(built["flat"]["s0"], root / "shard-0-of-2")
    (root / "shard-1-of-2.tmp-99999").mkdir()  # what a killed worker leaves
    (root / "shard-1-of-2.partial").touch()
    build = ShardedBuild(str(corpus), EncoderSpec.resolve(), shards=2, batch_size=20)
    assert kept_shards(build, root, overwrite=False) == {0: N_DOCS // 2}
    assert [p.name for p in root.iterdir()] == ["shard-0-of-2"]
    other = ShardedBuild(str(corpus), EncoderSpec.resolve(), shards=2, batch_size=10)
    refused = r"shard-0-of-2, kept from an earlier run, was built with shard 0 of 2 \(batch size 20, .*batch size 10"
    with pytest.raises(UserError, match=refused + r".*; pass --overwrite to encode it again"):
        kept_shards(other, root, overwrite=False)
    assert kept_shards(other, root, overwrite=True) == {} and not list(root.iterdir())
