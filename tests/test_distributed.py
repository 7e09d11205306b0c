"""Distributed search on a real local Ray instance: the same run files as one process, and a worker killed
mid-run is replaced without changing the results."""

from __future__ import annotations

import os
import signal

import pytest

from tour_pyserini.search.__main__ import main as search_main
from tour_pyserini.search.__main__ import parser

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    yield
    ray.shutdown()


def search_args(dense_index, mini_scifact, output, *extra: str) -> list[str]:
    return ["--index", str(dense_index), "--topics", str(mini_scifact["topics"]), "--output", str(output),
            "--hits", "50", "--batch-size", "4", "--threads", "1", *extra]  # fmt: skip


@pytest.mark.slow
def test_ray_runs_are_identical_to_one_process(local_ray, dense_index, bm25_index, mini_scifact, tmp_path, capsys):
    rewriters = {
        "dense": [],
        "rocchio": ["--rewriter", "rocchio"],
        "tour-soft": ["--rewriter", "tour-soft", "--reranker", "bm25", "--k", "10"],
    }
    for name, flags in rewriters.items():
        alone, distributed = tmp_path / f"{name}.trec", tmp_path / f"{name}.ray.trec"
        search_main(search_args(dense_index, mini_scifact, alone, *flags))
        search_main(search_args(dense_index, mini_scifact, distributed, *flags, "--ray", "--workers", "2"))
        assert "2 workers ready" in capsys.readouterr().out
        assert alone.read_text() == distributed.read_text(), name
        assert len({line.split()[0] for line in alone.read_text().splitlines()}) == 40


@pytest.mark.slow
def test_a_killed_worker_is_replaced_and_the_run_is_unchanged(local_ray, dense_index, bm25_index, mini_scifact,
                                                              tmp_path):  # fmt: skip
    from tour_pyserini.data import read_topics
    from tour_pyserini.search.configure import open_searcher
    from tour_pyserini.search.distributed import RayPool

    args = parser().parse_args(search_args(dense_index, mini_scifact, tmp_path / "run.trec", "--rewriter",
                                           "tour-soft", "--reranker", "bm25", "--k", "10"))  # fmt: skip
    topics = read_topics(mini_scifact["topics"])
    batches = [([t.text for t in topics[i : i + 2]], [t.qid for t in topics[i : i + 2]], 50)
               for i in range(0, len(topics), 2)]  # fmt: skip
    searcher, _ = open_searcher(args)
    expected = [[(h.docid, h.score) for h in r.hits] for b in batches for r in searcher.retrieve(*b)]

    got = []
    with RayPool(args, workers=2) as pool:
        victim = pool.pids[0]
        for i, results in enumerate(pool.map(batches)):
            got += [[(h.docid, h.score) for h in r.hits] for r in results]
            if i == 0:  # both workers are busy with later batches now: one of them dies mid-batch
                os.kill(victim, signal.SIGKILL)
        pids = [pid for pid, _ in ray.get([a.open.remote() for a in pool.actors])]
    assert victim not in pids and len(set(pids)) == 2  # Ray restarted the worker in a new process
    assert got == expected
