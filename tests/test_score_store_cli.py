"""--score-store: searches that share a store score each (query, document) pair once and rank as without it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest
from conftest import SCIFACT

from tour_pyserini.commands.search import main as search_main
from tour_pyserini.errors import UserError
from tour_pyserini.teachers import ScoreStore
from tour_pyserini.teachers.cross_encoder import CrossEncoderTeacher

pytestmark = pytest.mark.slow


def stored_pairs(path) -> int:
    return sqlite3.connect(path).execute("SELECT COUNT(*) FROM scores").fetchone()[0]


def test_tour_reuses_the_pairs_reranking_stored_and_ranks_the_same(dense_index, bm25_index, mini_scifact, tmp_path):
    store = tmp_path / "bm25.sqlite"
    base = ["--index", str(dense_index), "--topics", str(mini_scifact["topics"]), "--hits", "50", "--teacher", "bm25"]
    tour = ["--rewriter", "tour-soft", "--depth", "10"]
    search_main(
        [
            *base,
            "--rewriter",
            "rerank",
            "--depth",
            "10",
            "--score-store",
            str(store),
            "--output",
            str(tmp_path / "rerank.trec"),
        ]
    )
    assert stored_pairs(store) == 10 * 40  # the fixture's 40 queries, 10 candidates each
    search_main([*base, *tour, "--output", str(tmp_path / "alone.trec"), "--trace", str(tmp_path / "alone.jsonl")])
    search_main(
        [
            *base,
            *tour,
            "--score-store",
            str(store),
            "--output",
            str(tmp_path / "shared.trec"),
            "--trace",
            str(tmp_path / "shared.jsonl"),
        ]
    )
    assert (tmp_path / "shared.trec").read_text() == (tmp_path / "alone.trec").read_text()
    # the budget counts stored pairs too; only the pairs re-ranking never saw were added
    calls = sum(json.loads(line)["teacher_calls"] for line in (tmp_path / "shared.jsonl").read_text().splitlines())
    assert 10 * 40 < stored_pairs(store) == calls


def test_a_store_of_another_teacher_or_without_a_teacher_is_refused(dense_index, bm25_index, mini_scifact, tmp_path):
    store = tmp_path / "other.sqlite"
    ScoreStore(store, "cross-encoder:old max_length 128 weights 0123456789abcdef").close()
    base = ["--index", str(dense_index), "--topics", str(mini_scifact["topics"]), "--output", str(tmp_path / "r.trec")]
    with pytest.raises(UserError, match="holds scores of teacher"):
        search_main([*base, "--teacher", "bm25", "--rewriter", "rerank", "--depth", "5", "--score-store", str(store)])
    with pytest.raises(UserError, match="--score-store keeps the scores of a --teacher"):
        search_main([*base, "--rewriter", "rocchio", "--score-store", str(tmp_path / "none.sqlite")])
    assert not (tmp_path / "r.trec").exists()


def test_a_cross_encoders_fingerprint_names_its_weights_and_length(cross_encoder_dir):
    short, full = CrossEncoderTeacher(cross_encoder_dir, max_length=128), CrossEncoderTeacher(cross_encoder_dir)
    assert short.fingerprint.startswith(short.label) and "max_length 128" in short.fingerprint
    assert short.fingerprint != full.fingerprint
    assert short.fingerprint.split("weights ")[1] == full.fingerprint.split("weights ")[1]  # the same weights' hash


def test_a_store_filled_through_another_runtime_is_refused_naming_the_flag_that_reads_it(cross_encoder_dir, tmp_path):
    """A store filled through torch (the default before auto) and asked for by the default teacher (OpenVINO)
    says which --teacher-runtime reads it; a store of another teacher altogether gets no such hint."""
    torch_teacher, default = (CrossEncoderTeacher(cross_encoder_dir, runtime=r) for r in ("torch", "auto"))
    ScoreStore(tmp_path / "s.sqlite", torch_teacher.fingerprint).db.close()
    with pytest.raises(UserError, match=r"name another file \(only the runtime differs: --teacher-runtime torch "):
        ScoreStore(tmp_path / "s.sqlite", default.fingerprint)
    ScoreStore(tmp_path / "o.sqlite", default.fingerprint).db.close()
    with pytest.raises(UserError, match=r"--teacher-runtime openvino reads it\)$"):
        ScoreStore(tmp_path / "o.sqlite", torch_teacher.fingerprint)
    short = CrossEncoderTeacher(cross_encoder_dir, max_length=128, runtime="torch")
    with pytest.raises(UserError, match="name another file$"):
        ScoreStore(tmp_path / "o.sqlite", short.fingerprint)


def search_cli(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "tour_pyserini.search", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)


def refused(done: subprocess.CompletedProcess, start: str) -> bool:
    """Exit status 2 and one line on stderr, beginning with ``start``: no traceback."""
    return done.returncode == 2 and done.stderr.startswith(f"error: {start}") and done.stderr.count("\n") == 1


@pytest.fixture(scope="module")
def other_bm25_index(mini_scifact, tmp_path_factory):
    """A BM25 index of the fixture's documents and 300 more SciFact abstracts: the same docids, other statistics."""
    from tour_pyserini.index.bm25 import write_bm25_index
    from tour_pyserini.index.build import build_index

    out = tmp_path_factory.mktemp("other-bm25")
    docs = mini_scifact["collection"].joinpath("corpus.jsonl").read_text(encoding="utf-8")
    ids = {json.loads(line)["id"] for line in docs.splitlines()}
    extra = [line for line in (SCIFACT / "corpus.jsonl").open(encoding="utf-8") if json.loads(line)["id"] not in ids]
    (out / "corpus.jsonl").write_text(docs + "".join(extra[:300]), encoding="utf-8")
    build_index(out / "bm25", lambda tmp: write_bm25_index(out, tmp))
    return out / "bm25"


def test_a_store_filled_from_one_bm25_index_is_refused_with_another(
    dense_index, bm25_index, other_bm25_index, mini_scifact, tmp_path
):
    store = tmp_path / "bm25.sqlite"
    base = [
        "--index",
        dense_index,
        "--topics",
        mini_scifact["topics"],
        "--hits",
        "20",
        "--rewriter",
        "rerank",
        "--depth",
        "10",
    ]
    done = search_cli(*base, "--teacher", "bm25", "--score-store", store, "--output", tmp_path / "first.trec")
    assert done.returncode == 0, done.stderr
    before = store.read_bytes()
    done = search_cli(
        *base, "--teacher", f"bm25:{other_bm25_index}", "--score-store", store, "--output", tmp_path / "other.trec"
    )
    assert refused(done, f"score store {store} holds scores of teacher 'bm25 k1 0.9 b 0.4 index "), done.stderr
    assert store.read_bytes() == before and not (tmp_path / "other.trec").exists()
    # what the store would have served: the first index's scores, not the ones this index gives
    done = search_cli(*base, "--teacher", f"bm25:{other_bm25_index}", "--output", tmp_path / "alone.trec")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "alone.trec").read_text() != (tmp_path / "first.trec").read_text()
    # the index is known by its content, not its path: a copy reads the same scores from the store
    copy = tmp_path / "copy.bm25"
    shutil.copytree(bm25_index, copy)
    done = search_cli(*base, "--teacher", f"bm25:{copy}", "--score-store", store, "--output", tmp_path / "copy.trec")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "copy.trec").read_text() == (tmp_path / "first.trec").read_text()


def _not_a_store(tmp_path, dense_index, case):
    """(the --score-store path, the file whose bytes must not change) for each kind of place a store cannot be."""
    if case == "docstore":  # an SQLite file of something else: an index's document store
        path = tmp_path / "docstore.sqlite"
        shutil.copyfile(dense_index / "docstore.sqlite", path)
        return path, path
    garbage = tmp_path / "notes.txt"
    garbage.write_bytes(b"not a database\n" * 20)
    if case == "garbage":
        return garbage, garbage
    if case == "under-a-file":
        return garbage / "store.sqlite", garbage
    if case == "read-only-file":
        path = tmp_path / "store.sqlite"
        ScoreStore(path, "bm25").close()
        path.chmod(0o444)
        return path, path
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    return locked / "store.sqlite", garbage


@pytest.mark.parametrize("case", ["docstore", "garbage", "under-a-file", "read-only-file", "read-only-directory"])
def test_a_place_that_is_not_a_store_is_refused_in_one_line_and_left_untouched(
    case, dense_index, mini_scifact, tmp_path
):
    if case.startswith("read-only") and os.geteuid() == 0:
        pytest.skip("root writes to read-only files and directories")
    path, kept = _not_a_store(tmp_path, dense_index, case)
    before = kept.read_bytes()
    # a teacher that cannot load: the store is checked first, before any model
    done = search_cli(
        "--index",
        dense_index,
        "--topics",
        mini_scifact["topics"],
        "--rewriter",
        "rerank",
        "--teacher",
        "cross-encoder:/no/such/model",
        "--score-store",
        path,
        "--output",
        tmp_path / "r.trec",
    )
    expected = f"score store {path} "
    if case == "under-a-file":
        expected = f"cannot write --score-store {path}: {kept} is a file"
    assert refused(done, expected), done.stderr  # the place of every output is checked alike, the store's first
    assert kept.read_bytes() == before and not (tmp_path / "r.trec").exists()
    assert not path.exists() or path == kept


def test_a_store_written_before_stores_were_stamped_is_still_read(tmp_path):
    path = tmp_path / "old.sqlite"
    with sqlite3.connect(path) as db:  # the tables as every earlier version created them
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        db.execute("CREATE TABLE scores (query TEXT, docid TEXT, score REAL, PRIMARY KEY (query, docid))")
        db.execute("INSERT INTO meta VALUES ('teacher', 'cross-encoder:m max_length 256 weights 0123')")
        db.execute("INSERT INTO scores VALUES ('q', 'd1', 1.5)")
    store = ScoreStore(path, "cross-encoder:m max_length 256 weights 0123")
    assert store.get("q", ["d1", "d2"]) == {"d1": 1.5}
    store.close()
    assert ScoreStore(path, "cross-encoder:m max_length 256 weights 0123").get("q", ["d1"]) == {"d1": 1.5}


def test_a_store_names_a_query_by_its_hash_not_its_text(tmp_path):
    path = tmp_path / "new.sqlite"
    query = "vitamin D and bone density " * 400  # 10,800 characters, as a hostile client may send
    store = ScoreStore(path, "bm25")
    store.put(query, {f"d{i}": float(i) for i in range(10)})
    assert store.get(query, ["d3", "d11"]) == {"d3": 3.0} and store.get(query[:-1], ["d3"]) == {}
    store.close()
    with sqlite3.connect(path) as db:
        keys = {q for (q,) in db.execute("SELECT DISTINCT query FROM scores")}
    assert keys == {hashlib.sha256(query.encode()).hexdigest()}
    assert b"vitamin D" not in path.read_bytes() and path.stat().st_size < 64 * 1024
