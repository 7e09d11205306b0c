"""tour-pyserini serve over real HTTP: the search command's rankings, Pyserini's response shape, one-line
refusals, batching across clients, a full queue, and a graceful stop."""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import pytest
from serve_server import Server, get_url, http_run

from tour_pyserini.files.runs import read_run
from tour_pyserini.files.sameness import diff_runs
from tour_pyserini.files.topics import read_topics

pytestmark = pytest.mark.slow

HITS = 20
# the search command's flags, and the same search as request parameters
CONFIGS = {
    "dense": ([], {}),
    "rocchio": (["--rewriter", "rocchio"], {"rewriter": "rocchio"}),
    "tour-soft-bm25": (
        ["--rewriter", "tour-soft", "--teacher", "bm25", "--depth", "20"],
        {"rewriter": "tour-soft", "teacher": "bm25", "depth": "20"},
    ),
    "ttt-embed": (["--rewriter", "ttt-embed", "--state", "{state}"], {"rewriter": "ttt-embed"}),
    "refit-bm25": (
        ["--rewriter", "refit", "--teacher", "bm25", "--depth", "20"],
        {"rewriter": "refit", "teacher": "bm25", "depth": "20"},
    ),
    # every request starts from W = I, as a run does without its buffer (queries of a server's batch share none)
    "dart": (["--rewriter", "dart", "--depth", "30", "--dart-momentum", "0"], {"rewriter": "dart", "depth": "30"}),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_http_search_is_the_search_commands_run(name, server, dense_index, mini_scifact, state_file, tmp_path):
    from tour_pyserini.commands import search

    flags, params = CONFIGS[name]
    flags = [f.format(state=state_file) for f in flags]
    search.main(
        [
            "--index",
            str(dense_index),
            "--topics",
            str(mini_scifact["topics"]),
            "--output",
            str(tmp_path / "cli.trec"),
            "--hits",
            str(HITS),
            "--threads",
            "1",
            *flags,
        ]
    )
    cli = read_run(tmp_path / "cli.trec")
    topics = read_topics(mini_scifact["topics"])
    diff = diff_runs(cli, http_run(server, dense_index.name, topics, params, HITS))
    assert diff.same, diff.summary()
    assert diff.queries == len(topics)


def test_pyserinis_response_shape_and_documents(server, dense_index, bm25_index):
    body = server.search(dense_index.name, "vitamin D and bone density", hits=5)
    assert set(body) >= {"api", "index", "query", "candidates"}
    assert (body["api"], body["index"]) == ("v1", dense_index.name)
    assert body["query"] == {"text": "vitamin D and bone density"}
    assert [c["rank"] for c in body["candidates"]] == [1, 2, 3, 4, 5]
    assert all(set(c) == {"docid", "score", "rank", "doc"} and c["doc"] for c in body["candidates"])
    first = body["candidates"][0]
    status, doc, _ = server.get(f"/v1/{dense_index.name}/doc/{urllib.parse.quote(first['docid'])}")
    assert status == 200 and doc["doc"] == first["doc"] and doc["docid"] == first["docid"]
    assert server.search(bm25_index.name, "vitamin D and bone density", hits=3)["candidates"][0]["score"] > 0
    status, listing, _ = server.get("/v1/indexes")
    assert {i["name"]: i["kind"] for i in listing["indexes"]} == {dense_index.name: "dense", bm25_index.name: "bm25"}
    status, spec, _ = server.get("/openapi.json")
    assert status == 200 and "/v1/{index}/search" in spec["paths"]


def test_the_trace_on_request(server, dense_index):
    plain = server.search(dense_index.name, "bone density", rewriter="tour-soft", teacher="bm25", depth=10)
    traced = server.search(
        dense_index.name, "bone density", rewriter="tour-soft", teacher="bm25", depth=10, trace="true"
    )
    assert "trace" not in plain and "warnings" not in plain
    assert traced["trace"]["teacher_calls"] >= 10 and len(traced["trace"]["judgments"]) >= 10


def test_k_is_the_old_name_of_depth(server, dense_index):
    """A request with the old name ranks as with the new one, and its answer says the name is old."""
    new = server.search(dense_index.name, "bone density", rewriter="rerank", teacher="bm25", depth=7)
    old = server.search(dense_index.name, "bone density", rewriter="rerank", teacher="bm25", k=7)
    assert old["candidates"] == new["candidates"] and new["teacher_calls"] == 7
    assert old["warnings"] == [
        "parameter 'k' is the old name of 'depth' (same meaning); it will be removed in the next release"
    ]
    status, body, _ = server.get(f"/v1/{dense_index.name}/search?query=a&rewriter=rerank&teacher=bm25&k=5&depth=5")
    assert status == 400 and "'k' is the old name of 'depth': give one of them" in body["error"]


BAD = [
    ({"query": "a", "hits": "0"}, 400, "'hits' must be in [1,"),
    ({"query": "a", "hits": str(10**9)}, 400, "'hits' must be in [1,"),
    ({"query": "a", "hits": "ten"}, 400, "'hits' must be an integer, got 'ten'"),
    ({"query": "a", "hits": " 5"}, 400, "'hits' must be an integer, got ' 5'"),  # a '+' in a URL is a space
    ({"query": "a", "hits": "\u0661\u0662"}, 400, "must be an integer"),  # Arabic-Indic digits, which int() reads
    ({"query": "a", "trace": "yes"}, 400, "'trace' must be true or false, got 'yes'"),
    ({"query": ""}, 400, "'query' is required"),
    ({"query": "   "}, 400, "'query' is required"),
    ({}, 400, "'query' is required"),
    ({"query": "a" * 1_000_000}, 413, "1000000 characters"),
    ({"query": "a", "rewriter": "nope"}, 400, "unknown rewriter 'nope'"),
    ({"query": "a", "rewriter": "tour-soft", "teacher": "nope"}, 400, "unknown teacher 'nope'"),
    ({"query": "a", "rewriter": "tour-soft"}, 400, "needs a teacher"),
    ({"query": "a", "teacher": "bm25"}, 400, "asks none"),
    (
        {"query": "a", "rewriter": "tour-soft", "teacher": "bm25", "depth": "0"},
        400,
        "parameter 'depth' must be positive",
    ),
    ({"query": "a", "rewriter": "tour-soft", "teacher": "bm25", "depth": "100000"}, 400, "larger than the index"),
    ({"query": "a", "rewriter": "tour-soft", "teacher": "bm25", "lr": "nan"}, 400, "'lr' must be a finite number"),
    ({"query": "a", "rewriter": "tour-soft", "teacher": "bm25", "lr": "1e9"}, 400, "is beyond 1000"),
    (
        {"query": "a", "rewriter": "tour-soft", "teacher": "bm25", "iterations": "20000", "no-early-stop": "true"},
        400,
        "'iterations' (20000) is above this server's maximum of 10",
    ),
    (
        {"query": "a", "rewriter": "tour-soft", "teacher": "bm25", "depth": "101"},
        400,
        "'depth' (101) is above this server's",
    ),
    ({"query": "a", "rewriter": "rocchio", "prf-depth": "500"}, 400, "'prf-depth' (500) is above this server's"),
    ({"query": "a", "rewriter": "tour-soft", "teacher": "bm25", "preset": "x"}, 400, "must be one of"),
    ({"query": "a", "rewriter": "rocchio", "lr": "1"}, 400, "not an option of rewriter 'rocchio'"),
    ({"query": "a", "qid": "two words"}, 400, "qid"),
    ({"query": "a", "rewriter": "online"}, 400, "started with --budget"),
    ({"query": "a", "rewriter": "ttt-embed", "task": "nope"}, 400, "no task 'nope'"),  # a state's task, by name
]


@pytest.mark.parametrize("params, status, message", BAD, ids=[str(i) for i in range(len(BAD))])
def test_a_bad_request_is_one_json_line(params, status, message, server, dense_index):
    got, body, headers = server.get(f"/v1/{dense_index.name}/search", **params)
    assert got == status and set(body) == {"error"} and message in body["error"], body
    assert "\n" not in body["error"] and "Traceback" not in body["error"]
    assert headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    "path, status, message",
    [
        ("/v1/nope/search?query=a", 404, "unknown index 'nope'"),
        ("/v1/{dense}/search?query=%FF%FE", 400, "not valid UTF-8"),
        ("/v1/{dense}/search?query=ok&qid=%C3%28", 400, "not valid UTF-8"),
        ("/v1/{dense}/doc/%FF", 400, "not valid UTF-8"),
        ("/v1/{dense}/doc/no-such-doc", 404, "not in index"),
        ("/v1/{dense}/doc/" + "x" * 100_000, 404, "x" * 100 + "...' is not in index"),  # cut, not echoed whole
        ("/static/" + "a" * 100_000 + ".js", 404, "no static file"),  # not an OSError (a name too long)
        ("/v1/" + "n" * 5_000 + "/search?query=a", 404, "unknown index 'nnnn"),
        ("/v1/{bm25}/search?query=a&rewriter=tour-soft&teacher=bm25", 400, "is BM25"),
        ("/v1/{dense}/search?query=a&rewriter=ttt-embed&state=/etc/passwd", 400, "not an option"),
        ("/no/such/route", 404, "Not Found"),
    ],
)
def test_bad_paths_and_bytes_are_one_json_line(path, status, message, server, dense_index, bm25_index):
    got, body, _ = get_url(server.url + path.format(dense=dense_index.name, bm25=bm25_index.name))
    assert got == status and set(body) == {"error"} and message in body["error"], body


def test_clients_requests_are_batched_together(server, dense_index, mini_scifact):
    topics = read_topics(mini_scifact["topics"])
    _, before, _ = server.get("/v1/status")
    barrier = threading.Barrier(16)

    def one(topic):
        barrier.wait()
        return server.search(dense_index.name, topic.text, rewriter="tour-soft", teacher="bm25", depth=10)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, topics[:16]))
    _, after, _ = server.get("/v1/status")
    batches = after["batches"] - before["batches"]
    assert after["batched_requests"] - before["batched_requests"] == 16
    assert batches < 16  # several clients' queries shared an encoder call and a teacher call


def test_a_full_queue_is_503_with_retry_after_and_sigterm_finishes_what_is_in_flight(dense_index, bm25_index, tmp_path):
    slow = {
        "rewriter": "tour-soft",
        "teacher": "bm25",
        "depth": "300",
        "iterations": "20",
        "no-early-stop": "true",
        "hits": "5",
    }
    with Server(
        "--index",
        str(dense_index),
        "--teacher",
        "bm25",
        "--threads",
        "1",
        "--data-dir",
        str(tmp_path),
        "--max-queue",
        "1",
        "--max-batch",
        "1",
        "--batch-window",
        "0",
        "--no-mcp",
        "--max-candidates",
        "300",
        "--max-iterations",
        "3000",
    ) as server:

        def one(i):
            return server.get(f"/v1/{dense_index.name}/search", query=f"protein folding {i}", **slow)

        with ThreadPoolExecutor(12) as pool:
            answers = list(pool.map(one, range(12)))
        statuses = [status for status, _, _ in answers]
        assert set(statuses) == {200, 503}, statuses
        refused = next(a for a in answers if a[0] == 503)
        assert refused[2]["retry-after"] == "1" and "requests are waiting" in refused[1]["error"]

        in_flight: list = []
        sender = threading.Thread(
            target=lambda: in_flight.append(
                server.get(f"/v1/{dense_index.name}/search", query="protein folding", **{**slow, "iterations": "3000"})
            )
        )
        sender.start()
        time.sleep(0.5)
        assert not in_flight  # still being searched when the signal comes
        assert server.stop(signal.SIGTERM) == 143
        sender.join(30)
        assert in_flight and in_flight[0][0] == 200 and len(in_flight[0][1]["candidates"]) == 5


def test_a_request_past_the_timeout_is_504(dense_index, bm25_index, tmp_path):
    with Server(
        "--index",
        str(dense_index),
        "--teacher",
        "bm25",
        "--threads",
        "1",
        "--data-dir",
        str(tmp_path),
        "--timeout",
        "0.001",
        "--no-mcp",
        "--max-candidates",
        "300",
    ) as server:
        status, body, _ = server.get(
            f"/v1/{dense_index.name}/search",
            query="protein folding",
            rewriter="tour-soft",
            teacher="bm25",
            depth="300",
            iterations="10",
        )
        assert status == 504 and "timeout" in body["error"]


def test_bad_flags_are_one_line_before_anything_loads(dense_index, tmp_path, capsys):
    from tour_pyserini.commands import main

    for argv, message in [
        (["--index", str(tmp_path / "none")], "no such directory"),
        (["--index", str(dense_index), "--learn", "task"], "give --budget"),
        (["--index", str(dense_index), "--budget", "2"], "give --teacher"),
        (["--index", str(dense_index), "--teacher", "nope"], "unknown teacher"),
        (["--index", str(dense_index), "--state", str(tmp_path / "none.safetensors")], "does not exist"),
        (["--index", str(dense_index), "--encoder-precision", "int8"], "runs through ONNX Runtime only"),
        (["--index", str(dense_index), "--encoder-runtime", "onnx", "--encoder-precision", "bf16"], "no bfloat16"),
        (["--index", str(dense_index), "--device", "tpu"], "--device must be cpu, cuda or cuda:N"),
        (
            ["--index", str(dense_index), "--teacher", "bm25", "--teacher", "dense", "--teacher-runtime", "openvino"],
            "--teacher-runtime: not an option of any of the teachers (bm25, dense)",
        ),
    ]:
        with pytest.raises(SystemExit) as exit_:
            main(["serve", *argv])
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and message in err and "\n" not in err


def test_a_restart_pays_for_no_pair_twice(dense_index, tmp_path):
    from openai_server import start_server, url

    judge = start_server()
    spec = f"openai:{url(judge)}"
    args = (
        "--index",
        str(dense_index),
        "--teacher",
        spec,
        "--teacher-model",
        "judge-1",
        "--teacher-judge",
        "logprobs",
        "--threads",
        "1",
        "--data-dir",
        str(tmp_path),
        "--no-mcp",
    )
    queries = ["vitamin D and bone density", "statins and muscle pain"]
    try:
        with Server(*args) as server:
            first = [server.search(dense_index.name, q, rewriter="rerank", teacher=spec, depth=10) for q in queries]
            assert server.stop() == 143
        paid = len(judge.requests)
        assert paid == 20 and all(a["teacher_calls"] == 10 for a in first)
        with Server(*args) as server:
            again = [server.search(dense_index.name, q, rewriter="rerank", teacher=spec, depth=10) for q in queries]
        assert len(judge.requests) == paid  # every judgment came from the score store
        assert [a["candidates"] for a in again] == [a["candidates"] for a in first]
    finally:
        judge.shutdown()
        judge.server_close()


def test_pyserinis_parse_k1_b_and_max_doc_length(server, dense_index, bm25_index, mini_scifact):
    from tour_pyserini.search.bm25 import Bm25Searcher

    query = "vitamin D and bone density"
    tuned = server.search(bm25_index.name, query, hits=5, k1="1.2", b="0.75")
    plain = server.search(bm25_index.name, query, hits=5)
    lucene = Bm25Searcher.from_index(bm25_index, k1=1.2, b=0.75).retrieve([query], ["q"], 5)[0]
    assert [c["docid"] for c in tuned["candidates"]] == [h.docid for h in lucene.hits]
    assert [c["score"] for c in tuned["candidates"]] == pytest.approx([h.score for h in lucene.hits], abs=1e-4)
    assert [c["score"] for c in plain["candidates"]] != [c["score"] for c in tuned["candidates"]]
    assert server.search(bm25_index.name, query, hits=5)["candidates"] == plain["candidates"]  # BM25's own again
    raw = server.search(dense_index.name, query, hits=1, parse="false", max_doc_length="40")["candidates"][0]
    stored = json.loads(raw["doc"])
    assert stored["id"] == raw["docid"] and len(stored["text"]) == 40
    parsed = server.search(dense_index.name, query, hits=1, max_doc_length="40")["candidates"][0]["doc"]
    assert parsed["text"] == stored["text"] and parsed["title"] == stored["title"]
    for params, message in [
        ({"k1": "1.2"}, "set BM25: index"),
        ({"parse": "yes"}, "'parse' must be true or false, got 'yes'"),
        ({"max_doc_length": "0"}, "must be positive"),
    ]:
        status, body, _ = server.get(f"/v1/{dense_index.name}/search", query=query, **params)
        assert status == 400 and message in body["error"], body
    status, body, _ = server.get(f"/v1/{bm25_index.name}/search", query=query, b="1.5")
    assert status == 400 and "'b' must be in [0, 1]" in body["error"]
