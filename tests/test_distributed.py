"""Distributed search on a real local Ray instance: the same run files as one process, and a worker killed
mid-run is replaced without changing the results.

Each case runs in its own process: ``ray.shutdown`` restores signal handlers that the JVM (already
running in the test process) depends on, so Ray is never started inside pytest's process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from openai_server import start_server, url

from tour_pyserini.errors import UserError
from tour_pyserini.pipeline import SearchSpec
from tour_pyserini.pipeline.distributed import worker_specs

# not importorskip: importing Ray here would fix how a local instance listens before the pool sets it
pytestmark = [pytest.mark.slow, pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray")]

TESTS = Path(__file__).resolve().parent


def env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def search_args(dense_index, mini_scifact, output, *extra: str) -> list[str]:
    return [
        "--index",
        str(dense_index),
        "--topics",
        str(mini_scifact["topics"]),
        "--output",
        str(output),
        "--hits",
        "50",
        "--batch-size",
        "4",
        "--threads",
        "1",
        *extra,
    ]


def search(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "tour_pyserini.search", *args], capture_output=True, text=True, env=env(), timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_ray_runs_are_identical_to_one_process(dense_index, bm25_index, mini_scifact, tmp_path):
    rewriters = {
        "dense": [],
        "rocchio": ["--rewriter", "rocchio"],
        "tour-soft": ["--rewriter", "tour-soft", "--teacher", "bm25", "--depth", "10"],
    }
    for name, flags in rewriters.items():
        alone, distributed = tmp_path / f"{name}.trec", tmp_path / f"{name}.ray.trec"
        search(*search_args(dense_index, mini_scifact, alone, *flags))
        printed = search(*search_args(dense_index, mini_scifact, distributed, *flags, "--ray", "--workers", "2"))
        assert "2 workers ready" in printed
        assert alone.read_text() == distributed.read_text(), name
        assert len({line.split()[0] for line in alone.read_text().splitlines()}) == 40


def killed_worker_case(argv: list[str]) -> None:
    """In a fresh process: one-process results, then Ray's with one worker's process killed mid-run."""
    from tour_pyserini.commands.search import parser, search_spec
    from tour_pyserini.files import read_topics
    from tour_pyserini.pipeline import build, plan
    from tour_pyserini.pipeline.distributed import RayPool

    args = parser().parse_args(argv)
    config = search_spec(args)
    topics = read_topics(args.topics)
    batches = [
        ([t.text for t in topics[i : i + 2]], [t.qid for t in topics[i : i + 2]], 50) for i in range(0, len(topics), 2)
    ]
    pipeline = build(plan(config))
    expected = [[(h.docid, h.score) for h in r.hits] for b in batches for r in pipeline.run(*b)]
    got = []
    with RayPool(config, workers=2) as pool:
        import ray  # after the pool: it sets how a local instance listens before Ray is first imported

        victim = pool.pids[0]
        for i, results in enumerate(pool.map(batches)):
            got += [[(h.docid, h.score) for h in r.hits] for r in results]
            if i == 0:  # both workers are busy with later batches now: one of them dies mid-batch
                os.kill(victim, signal.SIGKILL)
        pids = [pid for pid, _ in ray.get([a.open.remote() for a in pool.actors])]
        addresses = sorted({node["NodeManagerAddress"] for node in ray.nodes()})
    print(
        json.dumps(
            {"victim": victim, "pids": pids, "same": got == expected, "batches": len(got), "addresses": addresses}
        )
    )


def test_a_killed_worker_is_replaced_and_the_run_is_unchanged(dense_index, bm25_index, mini_scifact, tmp_path):
    argv = search_args(
        dense_index,
        mini_scifact,
        tmp_path / "run.trec",
        "--rewriter",
        "tour-soft",
        "--teacher",
        "bm25",
        "--depth",
        "10",
    )
    code = (
        f"import sys; sys.path.insert(0, {str(TESTS)!r}); import test_distributed as t; t.killed_worker_case({argv!r})"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["victim"] not in report["pids"] and len(set(report["pids"])) == 2  # Ray restarted the worker
    assert report["same"] and report["batches"] == 40
    assert report["addresses"] == ["127.0.0.1"]  # a local instance listens on the loopback address only


def test_a_user_error_inside_a_worker_is_one_line(dense_index, mini_scifact, tmp_path):
    """The teacher opens in the workers (the driver checks only what needs no model): its user error comes
    back to the driver as one line, without the actor's traceback."""
    out = tmp_path / "run.trec"
    argv = search_args(
        dense_index,
        mini_scifact,
        out,
        "--rewriter",
        "rerank",
        "--teacher",
        f"bm25:{tmp_path / 'no-index'}",
        "--ray",
        "--workers",
        "1",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "tour_pyserini.search", *argv], capture_output=True, text=True, env=env(), timeout=600
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower() and "WARNING" not in line]
    assert len(errors) == 1 and errors[0].startswith("error: ") and "no-index" in errors[0], proc.stderr[-3000:]
    assert not out.exists() and not out.with_name("run.trec.partial").exists()


def test_an_api_teachers_concurrency_is_split_between_the_workers():
    config = SearchSpec(index="i", teacher="openai:http://127.0.0.1:1/v1", teacher_options={"concurrency": 5})
    assert [c.teacher_options["concurrency"] for c in worker_specs(config, 2)] == [3, 2]
    default = SearchSpec(index="i", teacher="ensemble:e.json")  # its parts may be openai teachers
    assert [c.teacher_options["concurrency"] for c in worker_specs(default, 3)] == [2, 1, 1]  # of 4
    assert [c.teacher_options["concurrency"] for c in worker_specs(default, 6)] == [1] * 6  # the default, < W
    assert worker_specs(SearchSpec(index="i", teacher="bm25"), 2)[1].teacher_options == {}
    with pytest.raises(UserError, match="--teacher-concurrency 2 is below --workers 3"):
        worker_specs(SearchSpec(index="i", teacher="openai:u", teacher_options={"concurrency": 2}), 3)


def test_ray_workers_keep_an_api_teacher_within_its_concurrency(dense_index, mini_scifact, tmp_path):
    """Two workers re-rank through one server with --teacher-concurrency 3: the server never has more than 3
    requests of the search at once (3 per worker before the split), and the run is the one-process run."""
    server = start_server(delay=0.01)
    try:
        flags = [
            "--rewriter",
            "rerank",
            "--depth",
            "5",
            "--teacher",
            f"openai:{url(server)}",
            "--teacher-model",
            "judge-1",
            "--teacher-judge",
            "logprobs",
            "--teacher-concurrency",
            "3",
        ]
        alone, distributed = tmp_path / "alone.trec", tmp_path / "ray.trec"
        search(*search_args(dense_index, mini_scifact, alone, *flags))
        server.max_in_flight = 0
        search(*search_args(dense_index, mini_scifact, distributed, *flags, "--ray", "--workers", "2"))
        assert server.max_in_flight == 3
        assert alone.read_text() == distributed.read_text()
    finally:
        server.shutdown()
        server.server_close()


def test_a_worker_whose_runtime_extra_differs_from_the_drivers_is_refused(dense_index):
    """Auto resolves from whether the runtime extra is installed: a worker lacking what the driver lacks (here
    the driver said it lacks OpenVINO, this process has it) would run the other way, so it refuses in one line;
    with the runtimes named, auto is not read and it opens."""
    from tour_pyserini.pipeline.distributed import SearchWorker, raise_user_error

    with pytest.raises(UserError, match="the runtime extra is installed here, but not on the driver"):
        raise_user_error(SearchWorker(SearchSpec(index=str(dense_index)), ["openvino"]).open())
    named = SearchSpec(index=str(dense_index), encoder_runtime="torch")
    assert raise_user_error(SearchWorker(named, ["openvino"]).open())[0] == os.getpid()
