"""A server others can reach: API keys (Pyserini's headers and YAML config), the Host and Origin checks, CORS,
the request log, per-client rates and daily judged queries, one server per data directory, and bounded work
(server-side maxima, a 504'd search stopped, idle and half-sent connections closed)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from openai_server import start_server, url
from serve_server import Server, get_url, wait_until

from tour_pyserini.errors import UserError
from tour_pyserini.serve.access import HostRule, Keys, RateLimit, host_name, read_api_keys, read_server_config

KEYS = ["k" * 16 + "-alice-0123456789", "k" * 16 + "-bob-0123456789ab"]


def test_host_names_and_the_host_rule():
    assert [host_name(h) for h in ("Example.org:8000", "[::1]:80", "127.0.0.1", "name.", "")] == [
        "example.org",
        "[::1]",
        "127.0.0.1",
        "name",
        "",
    ]
    assert [host_name(h) for h in ("localhost:evil", "[::1]evil.com")] == ["localhost:evil", "[::1]evil.com"]
    loopback, everywhere = HostRule("127.0.0.1"), HostRule("0.0.0.0", frozenset({"search.lab.org"}))
    assert loopback.allows("127.0.0.1") and loopback.allows("localhost") and loopback.allows("[::1]")
    assert not loopback.allows("evil.example.com") and not loopback.allows("")  # a rebinding page's name
    assert everywhere.allows("search.lab.org") and everywhere.allows("10.1.2.3") and everywhere.allows("localhost")
    assert not HostRule("10.1.2.3").allows("localhost")
    assert not loopback.allows("localhost:evil")  # no port: not a name the rule knows
    # a page may call from the server's own origin, an --allowed-host name or a --cors origin; not from another
    # address or port, though an address is a fine Host
    assert loopback.allows_origin("http://127.0.0.1:8000", "127.0.0.1:8000", ())
    assert not loopback.allows_origin("http://127.0.0.1:1", "127.0.0.1:8000", ())
    assert not loopback.allows_origin("http://203.0.113.7", "127.0.0.1:8000", ())
    assert not loopback.allows_origin("null", "127.0.0.1:8000", ())
    assert everywhere.allows_origin("https://search.lab.org", "10.1.2.3:8000", ())
    assert loopback.allows_origin("https://course.example.org", "127.0.0.1", ("https://course.example.org",))


def test_keys_rates_and_key_files(tmp_path):
    keys = Keys(KEYS)
    assert keys.match(KEYS[0]) == hashlib.sha256(KEYS[0].encode()).hexdigest()[:12]
    assert keys.match(KEYS[0][:-1]) is None and keys.match("") is None
    rate = RateLimit(2)
    assert [rate.retry_after("a", now=t) for t in (0.0, 1.0, 2.0)] == [None, None, 58]
    assert rate.retry_after("b", now=2.0) is None and rate.retry_after("a", now=60.5) is None
    day = RateLimit(1, 86_400)  # judged queries a day
    assert day.retry_after("a", now=0.0) is None and day.retry_after("a", now=10.0) == 86_390
    day.give_back("a")  # the teacher did not judge it after all
    assert day.retry_after("a", now=10.0) is None
    (tmp_path / "keys").write_text(f"# course keys\n{KEYS[0]}\n\n{KEYS[1]}\n")
    assert read_api_keys(tmp_path / "keys") == KEYS
    (tmp_path / "short").write_text("secret\n")
    with pytest.raises(UserError, match="short:1: a key must be at least 16 printable ASCII characters"):
        read_api_keys(tmp_path / "short")
    (tmp_path / "index").mkdir()
    (tmp_path / "server.yaml").write_text(f"indexes:\n  lab: index\napi_keys:\n  - {KEYS[1]}\n")
    assert read_server_config(tmp_path / "server.yaml") == ({"lab": str(tmp_path / "index")}, [KEYS[1]])
    (tmp_path / "bad.yaml").write_text("api_keys: one-key\n")
    with pytest.raises(UserError, match="'api_keys' must be a list"):
        read_server_config(tmp_path / "bad.yaml")


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "holds no key"),
        ("# the course's keys\n\n   \n# none yet\n", "holds no key"),
        ("\ufeff" + KEYS[0] + "\n", "byte-order mark"),
        ("k" * 15 + "é" + "\n", "printable ASCII"),
    ],
)
def test_a_key_file_that_would_leave_the_server_open_or_misread_is_refused(tmp_path, text, why):
    (tmp_path / "keys").write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=why):
        read_api_keys(tmp_path / "keys")


def test_a_server_config_with_no_key_or_a_name_no_route_can_hold_is_refused(tmp_path):
    (tmp_path / "index").mkdir()
    for text, why in [
        ("api_keys: []\n", "'api_keys' holds no key"),
        ("api_keys:\n", "'api_keys' holds no key"),
        ("indexes:\n  ../up: index\n", "cannot name a route"),
        ("indexes:\n  a/b: index\n", "cannot name a route"),
        ("indexes:\n  a..b: index\n", "cannot name a route"),
    ]:
        (tmp_path / "server.yaml").write_text(text)
        with pytest.raises(UserError, match=why):
            read_server_config(tmp_path / "server.yaml")
    (tmp_path / "server.yaml").write_text("indexes:\n  lab.minilm-v2: index\n")  # no api_keys: no keys, allowed
    assert read_server_config(tmp_path / "server.yaml") == ({"lab.minilm-v2": str(tmp_path / "index")}, [])


def test_the_log_masks_keys_and_their_parts_before_cutting_and_answers_show_only_whole_keys():
    from tour_pyserini.serve.access import LOGGED_CHARS, fingerprint

    keys = Keys(KEYS)
    name = fingerprint(KEYS[0])
    # a key that starts before the 200th character would have been cut there, its start kept
    cut = "x" * (LOGGED_CHARS - 10) + KEYS[0]
    assert keys.logged(cut) == "x" * (LOGGED_CHARS - 10) + f"<key {name}>"[:10]
    assert keys.logged("y" * (LOGGED_CHARS - 5) + KEYS[0][:9]) == "y" * (LOGGED_CHARS - 5) + "*" * 5
    assert keys.logged(f"a {KEYS[0][3:15]} b") == "a " + "*" * 12 + " b"  # a part of a key, in the middle
    assert keys.logged(f"a {KEYS[0][3:10]} b") == f"a {KEYS[0][3:10]} b"  # 7 characters: not masked
    assert keys.logged("z" * 100_000) == "z" * LOGGED_CHARS
    # what a client sees names only a whole key, never a part (that would tell a client what keys are made of)
    assert keys.shown(f"host {KEYS[1]}", 20) == f"host <key {fingerprint(KEYS[1])}"[:20]
    assert keys.shown(f"host {KEYS[1][:20]}", 100) == f"host {KEYS[1][:20]}"
    assert keys.found_in(f"?q={KEYS[1]}") == fingerprint(KEYS[1]) and keys.found_in(KEYS[1][:-1]) is None
    quoted = Keys(['quote"and\\backslash-0123'])
    body = json.dumps({"error": "origin 'quote\"and\\backslash-0123' is not allowed"}).encode()
    assert b"backslash-0123" not in quoted.stripped(body)


def test_one_request_one_line_of_the_log_whatever_its_text(tmp_path):
    from tour_pyserini.serve.access import RequestLog

    log = RequestLog(tmp_path / "requests.jsonl")
    breaks = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"  # every separator str.splitlines() knows
    for c in breaks:
        log.write({"parameters": {"query": f"before{c}after"}})
    log.file.close()
    lines = (tmp_path / "requests.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["parameters"]["query"] for line in lines] == [f"before{c}after" for c in breaks]


def test_only_the_page_its_scripts_and_the_api_description_are_public():
    from tour_pyserini.serve.access import is_public

    assert all(map(is_public, ["/", "/explore", "/docs", "/openapi.json", "/static/explorer.js"]))
    assert not any(map(is_public, ["/static/../v1/status", "/static/a/b.js", "/explore/", "/v1/status", "/mcp"]))


@pytest.mark.slow
def test_flags_that_would_expose_the_server_are_one_line(dense_index, tmp_path, capsys):
    from tour_pyserini.commands import main

    (tmp_path / "keys").write_text("short\n")
    (tmp_path / "no-keys").write_text("# none yet\n")
    for argv, message in [
        (["--host", "0.0.0.0"], "reachable from other machines: give --api-keys FILE"),
        (["--host", "0.0.0.0", "--api-keys", str(tmp_path / "no-keys")], "no-keys: the file holds no key"),
        (["--api-keys", str(tmp_path / "no-keys")], "no-keys: the file holds no key"),
        (["--port", "70000"], "--port must be in [0, 65535]"),
        (["--api-keys", str(tmp_path / "keys")], "must be at least 16 printable ASCII characters"),
        (["--cors", "*"], "give a web origin"),
        (["--learn-from-anonymous"], "give --learn"),
        (["--max-key-share", "0"], "--max-key-share must be in (0, 1]"),
        (["--data-dir", str(dense_index / "tour_pyserini.json")], "cannot use it as a directory"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            main(["serve", "--index", str(dense_index), "--data-dir", str(tmp_path / "data"), "--port", "0", *argv])
        assert exit_.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and message in err and "\n" not in err, err


@pytest.fixture(scope="module")
def judge():
    server = start_server()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def keyed(dense_index, judge, tmp_path_factory):
    """A server with two keys, the fake OpenAI judge as its teacher, a request log, CORS for one origin and 40
    requests a minute per client."""
    data = tmp_path_factory.mktemp("keyed")
    (data / "keys").write_text("\n".join(KEYS) + "\n")
    with Server(
        "--index",
        str(dense_index),
        "--api-keys",
        str(data / "keys"),
        "--teacher",
        f"openai:{url(judge)}",
        "--teacher-model",
        "judge-1",
        "--teacher-judge",
        "logprobs",
        "--threads",
        "1",
        "--data-dir",
        str(data / "serve"),
        "--request-log",
        str(data / "requests.jsonl"),
        "--cors",
        "https://course.example.org",
        "--requests-per-minute",
        "40",
    ) as server:
        server.log = data / "requests.jsonl"
        server.data = data / "serve"
        yield server


def key(i: int = 0) -> dict:
    return {"X-API-Key": KEYS[i]}


@pytest.mark.slow
def test_keys_are_required_on_rest_mcp_and_status_but_not_on_the_page(keyed, dense_index):
    path = f"/v1/{dense_index.name}/search"
    for route in (path + "?query=bone", "/v1/status", "/v1/indexes", f"/v1/{dense_index.name}/doc/x"):
        status, body, headers = get_url(keyed.url + route)
        assert status == 401 and "API key is required" in body["error"] and headers["www-authenticate"] == "Bearer"
    assert keyed.get(path, headers={"X-API-Key": "not-a-key-at-all"}, query="bone")[:2] == (
        401,
        {"error": "the API key is not valid"},
    )
    by_header = keyed.search(dense_index.name, "bone density", headers=key(0), hits=3)
    by_bearer = keyed.search(dense_index.name, "bone density", headers={"Authorization": f"Bearer {KEYS[1]}"}, hits=3)
    assert by_header["candidates"] == by_bearer["candidates"]
    with urllib.request.urlopen(keyed.url + "/explore") as page:  # the page itself: it asks for the key
        assert page.status == 200 and b"API key" in page.read()


@pytest.mark.slow
def test_mcp_needs_a_key_and_a_trusted_origin(keyed, dense_index):
    from fastmcp import Client
    from fastmcp.client.transports import StreamableHttpTransport

    async def call(headers):
        async with Client(StreamableHttpTransport(f"{keyed.url}/mcp/", headers=headers)) as client:
            found = await client.call_tool("search", {"query": "bone density", "index": dense_index.name, "hits": 3})
            return found.structured_content

    rest = keyed.search(dense_index.name, "bone density", headers=key(0), hits=3)
    assert asyncio.run(call(key(0)))["candidates"] == rest["candidates"]
    listing = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    for headers, status in [
        ({}, 401),
        ({"X-API-Key": "wrong-key-0123456789"}, 401),
        ({**key(0), "Origin": "http://evil.example.com"}, 403),
    ]:
        request = urllib.request.Request(
            f"{keyed.url}/mcp/",
            data=listing,
            method="POST",
            headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **headers},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == status and set(json.loads(refused.value.read())) == {"error"}


def raw_request(server: Server, request: bytes) -> bytes:
    host, port = urllib.parse.urlsplit(server.url).netloc.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(request)
        return b"".join(iter(lambda: s.recv(65536), b""))


@pytest.mark.slow
def test_a_foreign_host_or_origin_is_refused_and_cors_is_only_for_the_given_origin(keyed, dense_index):
    for path in (f"/v1/{dense_index.name}/search?query=a", "/mcp/"):
        answer = raw_request(
            keyed,
            f"GET {path} HTTP/1.1\r\nHost: rebind.evil.example:80\r\nX-API-Key: {KEYS[0]}\r\n"
            "Connection: close\r\n\r\n".encode(),
        )
        assert answer.startswith(b"HTTP/1.1 421") and b"does not answer for host 'rebind.evil.example'" in answer
    status, body, headers = keyed.get("/v1/indexes", headers={**key(0), "Origin": "http://evil.example.com"})
    assert status == 403 and "origin 'http://evil.example.com' is not allowed" in body["error"]
    assert "access-control-allow-origin" not in headers
    origin = "https://course.example.org"
    status, _, headers = keyed.get("/v1/indexes", headers={**key(0), "Origin": origin})
    assert status == 200 and headers["access-control-allow-origin"] == origin
    assert keyed.get("/v1/indexes", headers={**key(0), "Origin": "http://127.0.0.1:1"})[0] == 403  # another port
    assert keyed.get("/v1/indexes", headers={**key(0), "Origin": keyed.url})[0] == 200  # the server's own pages
    preflight = raw_request(
        keyed,
        f"OPTIONS /v1/indexes HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: {origin}\r\n"
        "Access-Control-Request-Method: GET\r\nAccess-Control-Request-Headers: x-api-key\r\n"
        "Connection: close\r\n\r\n".encode(),
    )
    assert preflight.startswith(b"HTTP/1.1 200") and origin.encode() in preflight
    foreign = raw_request(
        keyed,
        f"OPTIONS /v1/indexes HTTP/1.1\r\nHost: rebind.evil.example\r\nOrigin: {origin}\r\n"
        "Access-Control-Request-Method: GET\r\nConnection: close\r\n\r\n".encode(),
    )
    assert foreign.startswith(b"HTTP/1.1 421")  # a preflight passes the Host check too


@pytest.mark.slow
def test_the_request_log_names_keys_by_fingerprint_only(keyed, dense_index):
    keyed.search(dense_index.name, "statins and muscle pain", headers=key(1), hits=2, rewriter="rocchio")
    assert keyed.get("/v1/status", headers={"X-API-Key": "a-guess-that-is-no-key"})[0] == 401
    assert keyed.get("/v1/status", api_key=KEYS[0])[0] == 401  # a key where none belongs: refused, and not logged
    assert keyed.get("/v1/status", note=f" {KEYS[1]}!")[0] == 401  # inside a value
    assert keyed.get(f"/v1/{KEYS[1]}/search", query="a")[0] == 401  # in the path
    assert keyed.get("/v1/status", headers={"X-API-Key": " ", "Authorization": f"Bearer {KEYS[1]}"})[0] == 200
    assert keyed.get("/v1/status", headers=key(0), **{f"p{i}": "" for i in range(70)})[0] == 400  # too many
    lines = [json.loads(line) for line in keyed.log.read_text().splitlines()]
    mine = [r for r in lines if r["parameters"].get("query") == "statins and muscle pain"]
    assert mine and mine[-1]["key"] == hashlib.sha256(KEYS[1].encode()).hexdigest()[:12]
    assert mine[-1]["status"] == 200 and mine[-1]["index"] == dense_index.name and mine[-1]["ms"] > 0
    assert mine[-1]["parameters"] == {"query": "statins and muscle pain", "hits": "2", "rewriter": "rocchio"}
    assert {r["status"] for r in lines} >= {200, 401}
    misplaced = next(r for r in lines if "api_key" in r["parameters"])
    assert misplaced["parameters"]["api_key"] == f"<key {hashlib.sha256(KEYS[0].encode()).hexdigest()[:12]}>"
    everything = keyed.log.read_text() + "".join(keyed.stderr)
    assert not any(k in everything for k in KEYS) and f"<key {hashlib.sha256(KEYS[1].encode()).hexdigest()[:12]}>" in (
        keyed.log.read_text()
    )


@pytest.mark.slow
def test_no_key_or_part_of_one_reaches_the_log_an_error_body_or_stderr(keyed, dense_index):
    from tour_pyserini.serve.access import LOGGED_CHARS, fingerprint

    search = f"/v1/{dense_index.name}/search"
    mine, other = fingerprint(KEYS[0]), fingerprint(KEYS[1])
    padded = "x" * (LOGGED_CHARS - 5) + KEYS[1]  # cut at 200 characters, it kept the key's first five
    for params in ({"query": KEYS[1]}, {"query": padded}, {"query": "a", "note": f"\u2028{KEYS[1]}"}):
        status, body, _ = keyed.get(search, headers=key(0), **params)
        assert status == 400 and "holds an API key outside its X-API-Key" in body["error"]
    status, body, _ = keyed.get(f"/v1/{KEYS[1]}/search", headers=key(0), query="a")  # in the path
    assert status == 400 and KEYS[1] not in json.dumps(body)
    part = "y" * (LOGGED_CHARS - 5) + KEYS[1][:12]  # a part of a key is searched (a client sees no difference)
    assert keyed.search(dense_index.name, part, headers=key(0), hits=1)["query"]["text"] == part
    for separator in "\u2028\x85\u2029\r":
        assert keyed.search(dense_index.name, f"bone{separator}density", headers=key(0), hits=1)
    mcp = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "search", "arguments": {"query": KEYS[1], "index": dense_index.name}},
        }
    )
    request = urllib.request.Request(
        f"{keyed.url}/mcp/",
        data=mcp.encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream", **key(0)},
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 400
    # refusals name the key they carried (its fingerprint, valid or not) or anonymous; their bodies hold no key
    answer = raw_request(
        keyed,
        f"GET /v1/indexes HTTP/1.1\r\nHost: {KEYS[1]}.example\r\nX-API-Key: {KEYS[0]}\r\n"
        "Connection: close\r\n\r\n".encode(),
    )
    assert answer.startswith(b"HTTP/1.1 421") and f"<key {other}>".encode() in answer and KEYS[1].encode() not in answer
    assert keyed.get("/v1/indexes", headers={"X-API-Key": "wrong-key-0123456789"})[0] == 401
    assert keyed.get("/v1/indexes")[0] == 401
    records = [json.loads(line) for line in keyed.log.read_text(encoding="utf-8").splitlines()]
    by_status = {}
    for record in records:
        by_status.setdefault(record["status"], []).append(record)
    assert any(r["key"] == mine for r in by_status[421])
    assert {r["key"] for r in by_status[401]} >= {fingerprint("wrong-key-0123456789"), "anonymous"}
    assert any(r["parameters"].get("query") == "y" * (LOGGED_CHARS - 5) + "*" * 5 for r in by_status[200])
    assert any(r["parameters"].get("query") == "x" * (LOGGED_CHARS - 5) + f"<key {other}>"[:5] for r in by_status[400])
    assert [r["parameters"].get("query") for r in records if "density" in str(r["parameters"].get("query"))][-4:] == [
        f"bone{c}density" for c in "\u2028\x85\u2029\r"
    ]  # one record a line, whatever the query holds
    everything = keyed.log.read_text(encoding="utf-8") + "".join(keyed.stderr)
    for k in KEYS:
        assert not any(k[i : i + 8] in everything for i in range(len(k) - 7)), "a part of a key was written"


@pytest.mark.slow
def test_a_teacher_that_scores_nothing_is_a_502_not_the_retrievers_order(keyed, judge, dense_index):
    params = {"rewriter": "rerank", "teacher": f"openai:{url(judge)}", "depth": "5", "hits": "5"}
    judge.body = "{}"  # the judge now answers nothing usable
    try:
        status, body, _ = keyed.get(f"/v1/{dense_index.name}/search", headers=key(0), query="a fresh query", **params)
    finally:
        judge.body = None
    assert status == 502 and "scored none of the candidates" in body["error"]
    assert keyed.search(dense_index.name, "a fresh query", headers=key(0), **params)["teacher_calls"] == 5


@pytest.mark.slow
def test_teachers_are_named_without_their_paths_or_urls(keyed, judge, dense_index):
    listed = keyed.get("/v1/indexes", headers=key(0))[1]["indexes"][0]["teachers"]
    assert listed == ["openai:judge-1"]  # its label: the model, not the server's address
    by_name = keyed.search(
        dense_index.name, "bone density", headers=key(0), rewriter="rerank", depth="5", hits=5, teacher="openai:judge-1"
    )
    by_spec = keyed.search(
        dense_index.name,
        "bone density",
        headers=key(0),
        rewriter="rerank",
        depth="5",
        hits=5,
        teacher=f"openai:{url(judge)}",
    )  # the operator's own name works too
    assert by_name["candidates"] == by_spec["candidates"] and by_name["teacher"] == by_spec["teacher"] == listed[0]
    status, body, _ = keyed.get(
        f"/v1/{dense_index.name}/search", headers=key(0), query="a", rewriter="rerank", teacher="nope"
    )
    assert status == 400 and "127.0.0.1" not in body["error"]


@pytest.mark.slow
def test_a_client_past_its_rate_gets_429_with_retry_after_and_others_do_not(keyed, dense_index):
    def one(_):
        return keyed.get("/v1/indexes", headers=key(0))[::2]

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(45)))
    refused = [headers for status, headers in answers if status == 429]
    assert refused and all(1 <= int(h["retry-after"]) <= 60 for h in refused)
    assert keyed.get("/v1/indexes", headers=key(1))[0] == 200  # the other key has its own minute


@pytest.mark.slow
def test_one_server_per_data_directory(keyed, dense_index, capsys):
    from tour_pyserini.commands import main

    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--index", str(dense_index), "--data-dir", str(keyed.data), "--port", "0"])
    assert exit_.value.code == 2
    assert "another server uses this data directory" in capsys.readouterr().err


@pytest.fixture(scope="module")
def slash_index(tmp_path_factory):
    """A three-document dense index whose docids hold '/' (as a URL or a path would)."""
    from tour_pyserini.encoders import EncoderSpec
    from tour_pyserini.index.build import build_index
    from tour_pyserini.index.dense import write_dense_index

    root = tmp_path_factory.mktemp("slash")
    docs = [
        ("papers/2023/tour", "Test-time optimisation of query representations"),
        ("a/b", "bone density"),
        ("plain", "statins and muscle pain"),
    ]
    (root / "corpus.jsonl").write_text("".join(json.dumps({"id": d, "title": "", "text": t}) + "\n" for d, t in docs))
    build_index(root / "slashes", lambda tmp: write_dense_index(root, tmp, EncoderSpec.resolve()))
    return root / "slashes"


@pytest.mark.slow
def test_bounded_work_a_504_stops_its_search_and_idle_connections_close(dense_index, slash_index, tmp_path):
    slow = {"rewriter": "tour-soft", "teacher": "dense", "depth": "40", "iterations": "100000", "no-early-stop": "true"}
    with Server(
        "--index",
        str(dense_index),
        "--index",
        str(slash_index),
        "--teacher",
        "dense",
        "--threads",
        "1",
        "--data-dir",
        str(tmp_path),
        "--timeout",
        "6",
        "--max-iterations",
        "100000",
        "--batch-window",
        "0",
        "--request-log",
        str(tmp_path / "requests.jsonl"),
    ) as server:
        idle, half = (socket.create_connection(urllib.parse.urlsplit(server.url).netloc.split(":")) for _ in "ab")
        half.sendall(b"GET /v1/indexes HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the rest
        status, body, _ = server.get(f"/v1/{dense_index.name}/search", query="protein folding", **slow)
        assert status == 504
        start = time.monotonic()
        assert server.search(dense_index.name, "protein folding", hits=3)["candidates"]  # the thread is free again
        assert time.monotonic() - start < 5  # 100,000 iterations would take minutes
        with socket.create_connection(urllib.parse.urlsplit(server.url).netloc.split(":")) as gone:  # leaves early
            query = urllib.parse.urlencode({"query": "protein folding again", **slow})
            gone.sendall(f"GET /v1/{dense_index.name}/search?{query} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            time.sleep(0.3)
        # before its 6 s were up, the server saw the client go (499 in the log) and stopped its search
        logged = wait_until(
            lambda: [
                r for r in map(json.loads, (tmp_path / "requests.jsonl").read_text().splitlines()) if r["status"] == 499
            ],
            timeout=5.0,
        )
        assert logged[0]["parameters"]["query"] == "protein folding again"
        start = time.monotonic()
        assert server.search(dense_index.name, "protein folding", hits=3)["candidates"]
        assert time.monotonic() - start < 5
        with socket.create_connection(urllib.parse.urlsplit(server.url).netloc.split(":")) as gone:  # the explorer's
            query = urllib.parse.urlencode({"query": "protein folding once more", **slow, "rewriter": "tour-hard"})
            gone.sendall(f"GET /v1/{dense_index.name}/explain?{query} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            time.sleep(0.3)
        wait_until(
            lambda: [
                r
                for r in map(json.loads, (tmp_path / "requests.jsonl").read_text().splitlines())
                if r["status"] == 499 and r["route"].endswith("/explain")
            ],
            timeout=5.0,
        )
        start = time.monotonic()
        assert server.search(dense_index.name, "protein folding", hits=3)["candidates"]
        assert time.monotonic() - start < 5
        with socket.create_connection(urllib.parse.urlsplit(server.url).netloc.split(":")) as gone:  # an MCP client's
            options = {"iterations": 100000, "no-early-stop": True}
            call = json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {
                        "name": "search",
                        "arguments": {
                            "query": "protein folding over mcp",
                            "index": dense_index.name,
                            "rewriter": "tour-soft",
                            "teacher": "dense",
                            "depth": 40,
                            "options": options,
                        },
                    },
                }
            ).encode()
            gone.sendall(
                b"POST /mcp/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                b"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n%s" % (len(call), call)
            )
            time.sleep(0.3)
        start = time.monotonic()
        assert server.search(dense_index.name, "protein folding", hits=3)["candidates"]
        assert time.monotonic() - start < 3  # the MCP search stopped when its client left, not at its 6 s
        # hits beyond the index: what there is, as Pyserini answers; docids with '/' are fetched as Pyserini's are
        assert len(server.search(slash_index.name, "bone", hits=50)["candidates"]) == 3
        status, doc, _ = server.get(f"/v1/{slash_index.name}/doc/{urllib.parse.quote('a/b', safe='')}")
        assert status == 200 and doc["docid"] == "a/b" and doc["doc"] == "bone density"
        for connection in (idle, half):
            connection.settimeout(30)
            assert connection.recv(100) == b""  # closed by the server within its 10 s
            connection.close()


@pytest.mark.slow
def test_anonymous_clients_teach_nothing_unless_allowed(dense_index, judge, tmp_path, mini_scifact):
    from tour_pyserini.files.topics import read_topics

    topics = read_topics(mini_scifact["topics"])[:4]
    args = (
        "--index",
        str(dense_index),
        "--teacher",
        f"openai:{url(judge)}",
        "--teacher-model",
        "judge-1",
        "--teacher-judge",
        "logprobs",
        "--threads",
        "1",
        "--budget",
        "10",
        "--learn",
        "task",
        "--no-mcp",
    )
    for extra, kept in [((), 0), (("--learn-from-anonymous", "--max-key-share", "1"), 4)]:
        data = tmp_path / str(kept)
        with Server(*args, "--data-dir", str(data), *extra) as server:
            answers = [server.search(dense_index.name, t.text, qid=t.qid, hits=5) for t in topics]
            assert all(a["teacher_calls"] == 10 for a in answers)  # judged either way: the budget pays for it
            learning = server.get("/v1/status")[1]["learning"]
            assert learning["rewards_received"] == kept
            judge.body = "not json"  # the teacher fails: the policy serves the state's order, unjudged
            try:
                failed = server.search(dense_index.name, "a query the teacher cannot judge", hits=5)
            finally:
                judge.body = None
            assert failed["teacher"] is None and failed["candidates"]
            assert server.get("/v1/status")[1]["learning"]["rewards_received"] == kept
        log = data / "learn" / "rewards.jsonl"
        assert (log.read_text().count("\n") if log.exists() else 0) == kept


@pytest.mark.slow
def test_a_judgment_granted_but_refused_on_the_way_is_not_counted(dense_index, judge, tmp_path):
    """The policy judges every query (--budget 10) of the one anonymous client, five a day: a query its failing
    teacher did not judge, and a request naming that teacher which failed, cost neither the budget nor the day."""
    with Server(
        "--index",
        str(dense_index),
        "--teacher",
        f"openai:{url(judge)}",
        "--teacher-model",
        "judge-1",
        "--teacher-judge",
        "logprobs",
        "--threads",
        "1",
        "--budget",
        "10",
        "--judged-per-day",
        "5",
        "--data-dir",
        str(tmp_path),
        "--no-mcp",
    ) as server:

        def ask(text, **params):
            return server.get(f"/v1/{dense_index.name}/search", query=text, hits=5, **params)

        def spent():
            return server.get("/v1/status")[1]["budget"]["judgments"][dense_index.name]

        assert [ask(f"query {i}")[1]["teacher_calls"] for i in range(4)] == [10] * 4 and spent() == 40
        judge.body = "not json"
        try:
            failed = ask("the teacher fails on this one")[1]
            refused = ask("and on this one", rewriter="rerank", teacher="openai:judge-1", depth="5")
        finally:
            judge.body = None
        assert failed["teacher"] is None and spent() == 40
        # the teacher's failure is the server's: a 502 naming the teacher by its label, not its address
        assert refused[0] == 502 and "openai:judge-1" in refused[1]["error"] and "127.0.0.1" not in refused[1]["error"]
        # the fifth judged query of the day, which also takes the 10 judgments the failed query left unspent
        assert ask("the fifth judged query")[1]["teacher_calls"] == 20 and spent() == 60
        assert ask("a sixth: past the day's five")[1]["teacher"] is None and spent() == 60


@pytest.mark.slow
def test_a_full_data_directory_judges_nothing_more(dense_index, judge, tmp_path):
    with Server(
        "--index",
        str(dense_index),
        "--teacher",
        f"openai:{url(judge)}",
        "--teacher-model",
        "judge-1",
        "--teacher-judge",
        "logprobs",
        "--threads",
        "1",
        "--data-dir",
        str(tmp_path),
        "--max-data-mb",
        "0.001",
        "--no-mcp",
    ) as server:  # its score store alone is more than 1 KB
        status, body, _ = server.get(
            f"/v1/{dense_index.name}/search",
            query="bone density",
            rewriter="rerank",
            teacher="openai:judge-1",
            depth="5",
        )
        assert status == 507 and "data directory is full" in body["error"]
        assert server.search(dense_index.name, "bone density", hits=3)["candidates"]  # searching goes on
    burst = tmp_path / "burst"
    with Server(
        "--index",
        str(dense_index),
        "--teacher",
        f"openai:{url(judge)}",
        "--teacher-model",
        "judge-1",
        "--teacher-judge",
        "logprobs",
        "--threads",
        "1",
        "--data-dir",
        str(burst),
        "--max-data-mb",
        "0.1",
        "--no-mcp",
    ) as server:

        def judged(i):
            return server.get(
                f"/v1/{dense_index.name}/search",
                query=f"burst query {i}",
                rewriter="rerank",
                teacher="openai:judge-1",
                depth="50",
            )[0]

        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(judged, range(40)))  # a burst of 40 distinct judged queries, 50 pairs each
        used = sum(f.stat().st_size for f in burst.rglob("*") if f.is_file())
        data = server.get("/v1/status")[1]["data"]
        assert judged(99) == 507  # a write did not fit: the directory is full
    assert used <= 0.1 * 2**20 and data["writes_refused"] > 0 and data["used_mb"] <= 0.1
    assert 200 in statuses and set(statuses) <= {200, 507}


def test_the_data_directory_is_checked_before_every_write(tmp_path):
    """Scores stored query after query, as a burst of judged requests stores them: every write is checked against
    the directory's size measured then, so it stays within its bound (it was measured once a second, and a burst
    overshot it fivefold)."""
    from tour_pyserini.serve.quotas import DataQuota
    from tour_pyserini.teachers import ScoreStore
    from tour_pyserini.ttt.online import Reward, RewardsLog

    quota = DataQuota(tmp_path, max_mb=0.1)
    store = ScoreStore(tmp_path / "scores.sqlite", "teacher 1", quota.writing)
    for q in range(200):
        store.put(f"query {q}", {f"doc-{q}-{d}": float(d) for d in range(20)})
    assert quota.used() <= 0.1 * 2**20 and quota.refused > 0  # without the check: about 0.39 MB
    stored = store.db.execute("SELECT COUNT(*) FROM scores").fetchone()[0]
    assert stored == 20 * (200 - quota.refused)  # a put is kept whole or not at all
    assert quota.full()  # a write did not fit: no query is judged until something is removed
    store.close()
    log = RewardsLog(tmp_path / "rewards.jsonl")
    big = {f"doc-{d}": 1.0 for d in range(300)}  # a line of about 5 KB
    kept = [log.append([Reward("t", f"q{i}", "a query", big)], quota.writing) for i in range(20)]
    written = kept.index(False)  # the appends stop once the next line would not fit, and none is half written
    assert written < 20 and not any(kept[written:]) and [r.qid for r in log.read()] == [f"q{i}" for i in range(written)]
    assert quota.used() <= 0.1 * 2**20
    assert DataQuota(tmp_path, None).full() is False


async def answers_200(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})


def asgi_get(access, path: str, headers: dict, query: str = "", body: bytes = b"", method: str = "GET"):
    """(status, body) of one request through ``access`` (in front of :func:`answers_200`)."""
    import asyncio

    sent = []

    async def call():
        scope = {
            "type": "http",
            "method": method,
            "path": path,
            "query_string": query.encode(),
            "headers": [(k.lower().encode(), v.encode("latin-1")) for k, v in headers.items()],
            "client": ("127.0.0.9", 1),
        }

        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message):
            sent.append(message)

        await access(scope, receive, send)

    asyncio.run(call())
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_what_the_probe_found_at_the_access_check(tmp_path):
    """A key in a Host header of capitals, in a cookie, its digits in an MCP number, a lone surrogate, and refusals
    for a misplaced key: each as the rules say (an attacker's probe of the server found each one open)."""
    from tour_pyserini.serve.access import Access, AccessConfig, fingerprint

    mixed = "Prba-7FQX2lmZ9vkt4WNR8syd-99887766"
    config = AccessConfig(keys=(mixed, KEYS[0]), requests_per_minute=3, request_log=str(tmp_path / "l"))
    access = Access(answers_200, config)
    ok = {"Host": "127.0.0.1", "X-API-Key": KEYS[0]}
    status, body = asgi_get(access, "/v1/indexes", {"Host": f"{mixed}.example", "X-API-Key": KEYS[0]})
    assert status == 421 and f"<key {fingerprint(mixed)}>".encode() in body and mixed.lower().encode() not in body
    assert asgi_get(access, "/v1/indexes", {**ok, "Cookie": f"session={mixed}"})[0] == 400
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "search", "arguments": {}}}
    for arguments, status in [({"hits": 99887766}, 200), ({"query": "bone \ud800 density"}, 400)]:
        call["params"]["arguments"] = arguments
        sent = json.dumps(call).encode()  # the surrogate as JSON's escape, which no UTF-8 text can carry
        assert asgi_get(access, "/mcp/", ok, body=sent, method="POST")[0] == status
    records = [json.loads(line) for line in (tmp_path / "l").read_text(encoding="utf-8").splitlines()]
    assert records[-2]["parameters"]["hits"] == "********"  # a run of eight of a key's characters, masked
    last = (tmp_path / "l").read_text(encoding="utf-8").splitlines()[-1]
    assert "\\ud800" in last and json.loads(last)["status"] == 400  # logged, its surrogate escaped
    # refused for a key outside its header, a client still spends its minute (one request a minute here)
    strict = Access(answers_200, AccessConfig(keys=(mixed, KEYS[0]), requests_per_minute=1))
    assert [asgi_get(strict, "/v1/indexes", {**ok, "Cookie": mixed})[0] for _ in range(2)] == [400, 429]
    access.log.file.close()
