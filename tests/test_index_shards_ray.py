"""Sharded builds on a real local Ray instance: the index one process builds, finished shards kept across runs,
and a worker killed mid-shard whose shard alone is encoded again.

Ray runs in processes of their own (never in pytest's, where the JVM runs: see test_distributed).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tour_pyserini.commands.index import main as index_main
from tour_pyserini.index import faiss_index
from tour_pyserini.index.layout import IndexMeta

pytestmark = [pytest.mark.slow, pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray")]

TESTS = Path(__file__).resolve().parent
N_DOCS = 80
FLAGS = ["--batch-size", "10", "--faiss-index", "ivfpq", "--pq-nbits", "4"]


def env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    from conftest import SCIFACT

    out = tmp_path_factory.mktemp("ray-corpus")
    lines = (SCIFACT / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:N_DOCS]
    docs = [{**d, "text": " ".join(d["text"].split()[:12])} for d in map(json.loads, lines)]
    (out / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    return out


def assert_same_index(got: Path, expected: Path) -> None:
    for name in ("index", "docid"):
        assert (got / name).read_bytes() == (expected / name).read_bytes(), name
    times = ("build_seconds", "peak_rss_mb")
    assert {k: v for k, v in vars(IndexMeta.read(got)).items() if k not in times} == {
        k: v for k, v in vars(IndexMeta.read(expected)).items() if k not in times
    }


def test_a_ray_build_is_one_process_build_and_resumes_from_finished_shards(corpus, tmp_path):
    one, out = tmp_path / "one", tmp_path / "ray"
    index_main(["--collection", str(corpus), "--output", str(one), *FLAGS])
    # an earlier run finished shard 0 and was stopped in shard 1, which left a staging directory behind
    kept = out.with_name("ray.shards") / "shard-0-of-2"
    index_main(["--collection", str(corpus), "--output", str(kept), *FLAGS, "--shard", "0", "--shards", "2"])
    (out.with_name("ray.shards") / "shard-1-of-2.tmp-99999").mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "tour_pyserini.index",
            "--collection",
            str(corpus),
            "--output",
            str(out),
            *FLAGS,
            "--ray",
            "--workers",
            "2",
        ],
        capture_output=True,
        text=True,
        env=env(),
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    kept_line, done_line = proc.stdout.splitlines()
    assert kept_line == "ray: 1 of 2 shards kept from an earlier run"
    assert done_line.startswith("ray: encoded and merged in ") and "dense (ivfpq) index" in done_line
    assert_same_index(out, one)
    assert faiss_index.index_type(faiss_index.read(out / "index")) == "ivfpq"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "ray"]  # the shards are gone once merged


def killed_worker_case(collection: str, output: str) -> None:
    """In a fresh process: two shards on two workers, the worker of shard 1 killed once it has started."""
    import signal

    from tour_pyserini.encoders import EncoderSpec
    from tour_pyserini.index.distributed import ShardedBuild, encode_shards_on_ray

    killed = []

    def kill_shard_1(progress) -> None:
        if not killed and progress.starts.get(1) == 1 and 1 not in progress.kept and progress.done.get(1, 0) < 40:
            killed.append(progress.pids[1])
            os.kill(progress.pids[1], signal.SIGKILL)

    seen = {}

    def watch(progress) -> None:
        kill_shard_1(progress)
        seen.update(starts=dict(progress.starts), documents=progress.documents)

    build = ShardedBuild(collection, EncoderSpec.resolve(), shards=2, batch_size=10)
    directories = encode_shards_on_ray(build, output, total=N_DOCS, workers=2, on_progress=watch)
    print(json.dumps({"killed": killed, **seen, "directories": [str(d) for d in directories]}))


def test_a_worker_killed_mid_shard_encodes_that_shard_again_and_no_other(corpus, tmp_path):
    from tour_pyserini.index.shards import check_shards, merge_shards

    out = tmp_path / "ray"
    code = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r}); import test_index_shards_ray as t; "
        f"t.killed_worker_case({str(corpus)!r}, {str(out)!r})"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(report["killed"]) == 1
    assert report["starts"] == {"0": 1, "1": 2} and report["documents"] == N_DOCS  # shard 0 encoded once
    merged, one = tmp_path / "merged", tmp_path / "one"
    merged.mkdir()
    merge_shards(check_shards(report["directories"]), merged).write(merged)
    index_main(["--collection", str(corpus), "--output", str(one), "--batch-size", "10"])
    for name in ("index", "docid"):
        assert (merged / name).read_bytes() == (one / name).read_bytes()
