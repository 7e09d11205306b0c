"""HNSW and IVF-PQ indexes: built from a dense index's vectors, searched with exact candidate vectors, tuned
per search, and indexes written by Pyserini's own converter open too."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest

from tour_pyserini.commands.index import main as index_main
from tour_pyserini.commands.search import main as search_main
from tour_pyserini.errors import UserError
from tour_pyserini.index import faiss_index
from tour_pyserini.index.faiss_index import FaissIndexSpec
from tour_pyserini.search import TourSearcher

DEPTH = 50


@pytest.fixture(scope="module")
def queries(searcher, mini_scifact):
    from tour_pyserini.files import read_topics

    return searcher.encode([t.text for t in read_topics(mini_scifact["topics"])])


@pytest.fixture(scope="module", params=["hnsw", "ivfpq"])
def approximate(request, dense_index, tmp_path_factory):
    out = tmp_path_factory.mktemp("approx") / request.param
    index_main(["--from-index", str(dense_index), "--output", str(out), "--faiss-index", request.param])
    return request.param, TourSearcher.from_index(out)


def recall(approx: list, exact: list) -> float:
    return np.mean([len({h.docid for h in a} & {h.docid for h in e}) / len(e) for a, e in zip(approx, exact)])


def test_approximate_search_finds_the_exact_neighbours_with_exact_vectors(approximate, searcher, queries):
    kind, approx = approximate
    assert faiss_index.index_type(approx.faiss.index) == kind and faiss_index.exact_vectors(approx.faiss.index)
    exact = searcher.search_vectors(queries, DEPTH)
    found = approx.search_vectors(queries, DEPTH, return_vector=True)
    assert recall(found, exact) >= 0.9
    docids = approx.faiss.docids
    flat_vectors = searcher.faiss.index.reconstruct_n(0, searcher.num_docs)
    row = {d: i for i, d in enumerate(docids)}
    for q, hits in zip(queries, found):
        vectors = np.stack([h.vector for h in hits])
        np.testing.assert_array_equal(vectors, flat_vectors[[row[h.docid] for h in hits]])
        # IVF-PQ re-scores its candidates with the exact vectors, so scores are exact inner products
        np.testing.assert_allclose([h.score for h in hits], vectors @ q, atol=1e-5)


def test_hnsw_returns_every_hit_asked_for_beyond_its_ef_search(dense_index, queries, tmp_path):
    index_main(
        [
            "--from-index",
            str(dense_index),
            "--output",
            str(tmp_path / "hnsw"),
            "--faiss-index",
            "hnsw",
            "--ef-search",
            "16",
        ]
    )
    found = TourSearcher.from_index(tmp_path / "hnsw").search_vectors(queries, 200)
    assert {len(hits) for hits in found} == {200}  # a plain Faiss search with efSearch 16 returns fewer


def test_search_knobs_trade_recall_for_speed(dense_index, searcher, queries, tmp_path):
    index_main(
        ["--from-index", str(dense_index), "--output", str(tmp_path / "ivf"), "--faiss-index", "ivfpq", "--nlist", "16"]
    )
    exact = searcher.search_vectors(queries, DEPTH)
    recalls = [
        recall(TourSearcher.from_index(tmp_path / "ivf", nprobe=n).search_vectors(queries, DEPTH), exact)
        for n in (1, 16)
    ]
    assert recalls[0] < recalls[1] and recalls[1] >= 0.95  # all 16 lists: only PQ ranking errors remain


def test_knobs_of_another_index_type_are_errors(dense_index, mini_scifact, tmp_path):
    with pytest.raises(UserError, match="--nprobe applies to IVF indexes; .* is flat"):
        search_main(
            [
                "--index",
                str(dense_index),
                "--topics",
                str(mini_scifact["topics"]),
                "--output",
                str(tmp_path / "run.trec"),
                "--nprobe",
                "4",
            ]
        )
    assert not list(tmp_path.iterdir())
    with pytest.raises(UserError, match="needs at least 256 documents"):
        FaissIndexSpec(type="ivfpq").resolved(num_docs=100, dimension=384)
    with pytest.raises(UserError, match="--pq-m 5 must divide"):
        FaissIndexSpec(type="ivfpq", pq_m=5).resolved(num_docs=1000, dimension=384)


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags,exact", [(["--hnsw", "--M", "16", "--efC", "64"], True), (["--pq", "--pq-m", "48"], False)]
)
def test_indexes_built_by_pyserini_open_too(flags, exact, dense_index, searcher, queries, tmp_path, caplog):
    # Pyserini's own tool, through run-pyserini: its Java, and (Pyserini 2.x) its catalogue fetched offline
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tour_pyserini",
            "run-pyserini",
            "pyserini.index.faiss",
            "--input",
            str(dense_index),
            "--output",
            str(tmp_path),
            "--dim",
            "384",
            "--threads",
            "1",
            *flags,
        ],
        check=True,
        env=os.environ,
        capture_output=True,
    )
    with caplog.at_level(logging.WARNING, logger="tour_pyserini"):
        theirs = TourSearcher.from_index(tmp_path)
    assert ("keeps no exact vectors" in caplog.text) is not exact
    assert recall(theirs.search_vectors(queries, DEPTH), searcher.search_vectors(queries, DEPTH)) >= 0.8
    if exact:  # and re-indexes into any other type, without the metadata our own indexes carry
        index_main(["--from-index", str(tmp_path), "--output", str(tmp_path / "flat"), "--faiss-index", "flat"])
        again = TourSearcher.from_index(tmp_path / "flat").search_vectors(queries, DEPTH)
        assert [h.docid for h in again[0]] == [h.docid for h in searcher.search_vectors(queries, DEPTH)[0]]
    else:
        with pytest.raises(UserError, match="does not keep exact vectors"):
            index_main(["--from-index", str(tmp_path), "--output", str(tmp_path / "flat")])


def test_ivfpq_on_too_small_a_collection_is_refused_before_anything_is_encoded(mini_scifact, tmp_path):
    from test_cli import run_module

    (tmp_path / "small").mkdir()
    lines = (mini_scifact["collection"] / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "small" / "corpus.jsonl").write_text("".join(lines[:50]), encoding="utf-8")
    out = tmp_path / "small.ivfpq"
    proc = run_module(
        "tour_pyserini.index", "--collection", str(tmp_path / "small"), "--output", str(out), "--faiss-index", "ivfpq"
    )
    assert proc.returncode == 2 and "Loading weights" not in proc.stderr  # no encoder was loaded
    assert proc.stderr.strip().splitlines() == [
        "error: IVF-PQ with 1 lists and 8-bit codes needs at least 256 documents to train; the collection has 50"
    ]
    assert not out.exists() and not list(tmp_path.glob("small.ivfpq*"))


@pytest.mark.parametrize("kind", ["flat", "ivfpq"])
def test_a_streamed_build_writes_the_file_an_in_memory_build_writes(kind, tmp_path):
    import faiss

    vectors = np.random.default_rng(0).standard_normal((3000, 16)).astype(np.float32)
    spec = FaissIndexSpec(type=kind, nlist=8, pq_m=2)
    faiss.write_index(faiss_index.build(vectors, spec, chunk=1000), str(tmp_path / "memory"))
    seconds = faiss_index.write_streamed(
        lambda: (vectors[i : i + 1000] for i in range(0, 3000, 1000)), 3000, 16, spec, tmp_path / "streamed"
    )
    assert (tmp_path / "streamed").read_bytes() == (tmp_path / "memory").read_bytes()
    assert "write_wall_s" in seconds and ("add_cpu_s" in seconds) == (kind == "ivfpq")
    with pytest.raises(ValueError, match="2000"):
        faiss_index.write_streamed(lambda: iter([vectors[:2000]]), 3000, 16, spec, tmp_path / "short")
    with pytest.raises(UserError, match="hnsw"):
        faiss_index.write_streamed(lambda: iter([vectors]), 3000, 16, FaissIndexSpec(type="hnsw"), tmp_path / "h")
