"""An attacker's probe of `tour-pyserini serve`: hostile requests over real HTTP to real servers, each case checked
against the rules of docs/serve.md ("Serving others: keys, hosts, limits" and its table "The rules, each where it
is enforced").

Every server is a subprocess (`python -m tour_pyserini serve --port 0 ...`, run from ``--tree``'s code with
``--threads 1``, one at a time) on 127.0.0.1, over SciFact indexes built by that tree; the teacher is the fake
OpenAI-compatible judge of tests/openai_server.py (or the dense teacher). Requests go over raw sockets, so that
headers can be malformed, duplicated or left out, and connections half-sent or dropped. For each case the probe
records its category, what was sent, what the documented rule expects, what happened (status, body, the request
log's new records, the data directory, /v1/status, the learned states on disk) and whether the two agree. Beside
the answer itself, every case on a server with a request log checks that the log gained one JSON record per
request, one a line, with no key or run of 8 of a key's characters, and that no answer holds a whole key; each
server's stderr and whole log are scanned for keys when it stops.

Categories: keys, host-origin, rates, quota, learning, bounded-work, data-dir, mcp, request-log, error-bodies,
config, own (attacks of our own on who may read, who teaches, what is written to disk).

A case that needs a feature the tree does not have (the MCP ``options`` argument, ``/v1/status``'s ``data``) is
recorded as not applicable.

It is a tool beside the serving tests (whose fake judge it uses), not a test pytest collects: it probes a whole
checkout, ``--tree``, in about 200 s, and records what each version did.

Usage (a checkout whose working tree is being edited is best probed through a worktree of its HEAD):
    python tests/serve_probe.py                                          # this checkout, as "current"
    git worktree add /tmp/serve-current HEAD
    python tests/serve_probe.py --tree /tmp/serve-current --name current
    git worktree add /tmp/serve-before f7c8db1
    python tests/serve_probe.py --tree /tmp/serve-before --name f7c8db1  # an earlier version
Each run is merged into runs/bench-serve-probe.json under its name; runs/bench-serve-probe.md summarises every run
the file holds.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from openai_server import start_server, url  # noqa: E402 - the fake judge of the serving tests

from tour_pyserini.files.collections import find_collection  # noqa: E402

OUT = ROOT / "runs" / "bench-serve-probe.json"
SUMMARY = ROOT / "runs" / "bench-serve-probe.md"
SCIFACT_TEST = find_collection(ROOT / "collections" / "scifact").split("test")
TOPICS, QRELS = SCIFACT_TEST.topics, SCIFACT_TEST.qrels
DENSE, LAB = "scifact.minilm", "lab.minilm-v2"  # the dense index's route name; the BM25 index's, from --config
COURSE, LABHOST = "https://course.example.org", "search.lab.example.org"  # --cors and --allowed-host
LOGGED_CHARS, FRAGMENT = 200, 8  # the request log's cut, and the run of a key's characters it masks

KEYS = {
    "A": "PrbA-7fQx2LmZ9vKt4WnR8sYd",
    "B": "PrbB-3hJk-99887766-GtUe5Xo",  # a run of eight digits, as an MCP number may hold
    "Q": 'PrbQ"quo\\te-Vb6Nm1Lp0Zr',  # a quote and a backslash: escaped in every JSON text
    "C": "PrbC-cfg-Hq2Wn8Zt5YxJ4k",  # given in --config's api_keys
    "D": "PrbD-9sLq3Ve7Tx1Mw5Rz0Kc",
}
FILE_KEYS = ("A", "B", "Q", "D")  # the key file of every keyed server but the learning ones


def fingerprint(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


FP = {name: fingerprint(key) for name, key in KEYS.items()}
RUNS = {key[i : i + FRAGMENT]: name for name, key in KEYS.items() for i in range(len(key) - FRAGMENT + 1)}


def key_runs(text: str) -> list[str]:
    """Names of the keys a run of 8 of whose characters ``text`` holds."""
    found = {RUNS[text[i : i + FRAGMENT]] for i in range(len(text) - FRAGMENT + 1) if text[i : i + FRAGMENT] in RUNS}
    return sorted(found)


def whole_keys(text: str) -> list[str]:
    """Names of the keys ``text`` holds whole: as they are, escaped as JSON escapes them, or in another case."""
    lower = text.lower()
    return sorted(n for n, k in KEYS.items() if k in text or json.dumps(k)[1:-1] in text or k.lower() in lower)


def redacted(text: str, limit: int = 400) -> str:
    """``text`` as the results show it: whole keys named, cut."""
    for name, key in KEYS.items():
        text = text.replace(key, f"<key {name}>").replace(json.dumps(key)[1:-1], f"<key {name}>")
        text = text.replace(key.lower(), f"<key {name} in lower case>")
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def strings(value) -> list[str]:
    out, stack = [], [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            stack += item
    return out


# ---------------------------------------------------------------------------------------------------------------
# HTTP over raw sockets


@dataclass
class Reply:
    status: int  # 0: no answer (the connection was closed or timed out first)
    headers: dict[str, str]
    body: bytes
    seconds: float

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def dechunk(body: bytes) -> bytes:
    out = b""
    while body:
        size, _, rest = body.partition(b"\r\n")
        n = int(size.split(b";")[0] or b"0", 16)
        if n == 0:
            break
        out, body = out + rest[:n], rest[n + 2 :]
    return out


def parse_reply(data: bytes, seconds: float) -> Reply:
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        return Reply(0, {}, data, seconds)
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", ""):
        body = dechunk(body)
    return Reply(status, headers, body, seconds)


def exchange(port: int, data: bytes, source: str | None = None, timeout: float = 120.0) -> Reply:
    """Send ``data`` on a fresh connection and read until the server closes it."""
    start = time.perf_counter()
    chunks = []
    try:
        with socket.create_connection(
            ("127.0.0.1", port), timeout=timeout, source_address=(source, 0) if source else None
        ) as s:
            try:
                s.sendall(data)
            except OSError:  # the server answered and closed before reading it all (a body too large)
                pass
            while chunk := s.recv(65536):
                chunks.append(chunk)
    except OSError:
        pass
    return parse_reply(b"".join(chunks), time.perf_counter() - start)


def request(
    method: str,
    target: str,
    headers=(),
    body: bytes | None = None,
    host: str | None = None,
    version: str = "HTTP/1.1",
    close: bool = True,
) -> bytes:
    lines = [f"{method} {target} {version}"]
    lines += [] if host is None else [f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers]
    if body is not None and not any(n.lower() in ("content-length", "transfer-encoding") for n, _ in headers):
        lines.append(f"Content-Length: {len(body)}")
    lines += ["Connection: close"] if close else []
    return "\r\n".join(lines).encode("utf-8") + b"\r\n\r\n" + (body or b"")


def closes_within(sock: socket.socket, limit: float) -> float | None:
    """Seconds until the server closes ``sock`` (None: still open after ``limit``)."""
    start = time.monotonic()
    sock.settimeout(limit)
    try:
        while sock.recv(65536):
            pass
        return time.monotonic() - start
    except TimeoutError:
        return None
    except OSError:
        return time.monotonic() - start
    finally:
        sock.close()


# ---------------------------------------------------------------------------------------------------------------
# servers


class Server:
    """``python -m tour_pyserini serve --port 0 ARGS`` from ``tree``, its stderr in a file, its request log read as
    it grows."""

    def __init__(
        self,
        probe: Probe,
        name: str,
        args: list[str],
        log: bool = True,
        keys: tuple = FILE_KEYS,
        data: Path | None = None,
    ):
        self.probe, self.name = probe, name
        self.dir = probe.work / re.sub(r"[^A-Za-z0-9.-]+", "-", name)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.data = data or self.dir / "data"
        self.log = self.dir / "requests.jsonl" if log else None
        self.stderr_path = self.dir / "stderr.txt"
        self.keys = keys
        if keys:
            (self.dir / "keys").write_text("".join(KEYS[k] + "\n" for k in keys))
        self.args = [*args, "--data-dir", str(self.data), "--threads", "1"]
        self.args += ["--api-keys", str(self.dir / "keys")] if keys else []
        self.args += ["--request-log", str(self.log)] if log else []
        self.offset = 0
        self.process: subprocess.Popen | None = None

    def start(self) -> Server:
        env = {
            **os.environ,
            "PYTHONPATH": str(self.probe.tree),
            "HF_HUB_OFFLINE": "1",
            "OMP_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONUNBUFFERED": "1",
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tour_pyserini", "serve", "--port", "0", *self.args],
            cwd=self.probe.tree,
            env=env,
            stdout=subprocess.PIPE,
            stderr=open(self.stderr_path, "a"),
            text=True,
        )
        found: list[str] = []
        reader = threading.Thread(target=lambda: found.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(240)
        if not found or not found[0].startswith("serving on "):
            self.stop()
            raise RuntimeError(f"server {self.name} did not start: {found}; {self.stderr()[-2000:]}")
        self.port = int(found[0].split(":")[-1])
        self.host = f"127.0.0.1:{self.port}"
        return self

    def stop(self) -> int | None:
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(90)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(30)
        return self.process.returncode

    def stderr(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace") if self.stderr_path.exists() else ""

    def send(self, data: bytes, source: str | None = None, timeout: float = 120.0) -> Reply:
        return exchange(self.port, data, source, timeout)

    def get(self, target: str, key: str | None = "A", headers=(), **params) -> Reply:
        query = urllib.parse.urlencode(params)
        hdrs = [("X-API-Key", KEYS[key])] if key else []
        return self.send(request("GET", target + (f"?{query}" if query else ""), [*hdrs, *headers], host=self.host))

    def answer(self, target: str, key: str | None = "A", **params) -> dict:
        reply = self.get(target, key, **params)
        return reply.json() if reply.status == 200 else {"status": reply.status, "error": redacted(reply.text, 300)}

    def status(self, key: str | None = "A") -> dict:
        return self.answer("/v1/status", key)

    def new_log(self) -> list[bytes]:
        """The request log's whole lines written since the last call."""
        if self.log is None or not self.log.exists():
            return []
        with open(self.log, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        whole = data[: data.rfind(b"\n") + 1]
        self.offset += len(whole)
        return [line for line in whole.split(b"\n")[:-1]]


def mcp_body(tool: str, arguments, rid=1) -> bytes:
    if isinstance(arguments, str):  # raw JSON, for what json.dumps would not write (NaN, escapes)
        head = f'{{"jsonrpc": "2.0", "id": {json.dumps(rid)}, "method": "tools/call", "params": {{"name": '
        return f'{head}{json.dumps(tool)}, "arguments": {arguments}}}}}'.encode()
    message = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
    return json.dumps(message).encode()


MCP_HEADERS = [("Content-Type", "application/json"), ("Accept", "application/json, text/event-stream")]


def mcp_outcome(reply: Reply) -> tuple[str, str]:
    """("ok" | "error" | "http", the result's or the error's text) of an MCP answer."""
    body = reply.json()
    if reply.status == 200 and isinstance(body, dict) and isinstance(body.get("result"), dict):
        result = body["result"]
        text = " ".join(c.get("text", "") for c in result.get("content", []) if isinstance(c, dict))
        return ("error" if result.get("isError") else "ok"), text
    if isinstance(body, dict) and isinstance(body.get("error"), dict | str):
        error = body["error"]
        return "error", error.get("message", "") if isinstance(error, dict) else error
    return "http", reply.text


# ---------------------------------------------------------------------------------------------------------------
# placeholders: <<A>> a key, <<A:12>> its first 12 characters, <<fpA>> its fingerprint, <<HOST>>, <<PORT>>


def fill(text, server: Server | None):
    if isinstance(text, bytes):
        return fill(text.decode(), server).encode() if b"<<" in text else text
    if isinstance(text, dict):
        return {fill(k, server): fill(v, server) for k, v in text.items()}
    if isinstance(text, list | tuple):
        return type(text)(fill(v, server) for v in text)
    if not isinstance(text, str):
        return text

    def one(m: re.Match) -> str:
        name, _, cut = m.group(1).partition(":")
        if name.startswith("fp"):
            return FP[name[2:]]
        if name == "HOST":
            return server.host
        if name == "PORT":
            return str(server.port)
        if name.startswith("url"):  # percent-encoded, every character
            return "".join(f"%{b:02X}" for b in KEYS[name[3:]].encode())
        if name.startswith("quoted"):
            return urllib.parse.quote(KEYS[name[6:]], safe="")
        if name.startswith("u"):  # JSON's \\u escapes
            return "".join(f"\\u{ord(c):04x}" for c in KEYS[name[1:]])
        key = KEYS[name]
        return key[: int(cut)] if cut else key

    return re.sub(r"<<([A-Za-z0-9:\-]+)>>", one, text)


# ---------------------------------------------------------------------------------------------------------------
# cases


@dataclass
class Http:
    """One request to the keyed server and what the rules expect of its answer."""

    category: str
    name: str
    target: str = "/v1/status"
    method: str = "GET"
    key: str | None = "A"  # sent as X-API-Key (None: no key)
    headers: tuple = ()
    body: bytes | None = None
    host: str | None = "<<HOST>>"  # the Host header (None: none)
    raw: bytes | None = None  # the whole request, as it is
    status: int | tuple = 200
    has: tuple = ()  # the body holds each
    lacks: tuple = ()  # and none of these
    header: tuple = ()  # the answer has these headers
    no_header: tuple = ()
    log: int | None = 1  # records the request log gains (None: not checked)
    log_key: str | None = None  # the record's key: a key's name (its fingerprint) or "anonymous"
    logged: Callable | None = None  # a check on the record
    check: Callable | None = None  # a check on the reply
    expected: str = ""  # the rule, in words
    needs: str | None = None


@dataclass
class Mcp:
    """One MCP tools/call to the keyed server."""

    category: str
    name: str
    tool: str
    args: dict | str  # arguments (a str: raw JSON)
    expect: str | int = "error"  # "ok", "error" (a tool or JSON-RPC error of one line, never a 5xx), or a status
    has: str = ""  # the result or error text holds it
    key: str | None = "A"
    headers: tuple = ()
    log_key: str | None = None
    logged: Callable | None = None
    check: Callable | None = None
    expected: str = ""
    needs: str | None = None


def record_of(records: list[dict]) -> dict:
    return records[0] if records else {}


def param(record: dict, name: str):
    return (record.get("parameters") or {}).get(name)


SEPARATORS = {
    "LF": "\n",
    "CR": "\r",
    "VT": "\x0b",
    "FF": "\x0c",
    "FS": "\x1c",
    "GS": "\x1d",
    "RS": "\x1e",
    "NEL U+0085": "\x85",
    "U+2028": "\u2028",
    "U+2029": "\u2029",
}
SEARCH = f"/v1/{DENSE}/search"
TEACHER = "openai:judge-1"
NOT_KEY = "wrong-key-0123456789abcdef"


def q(**params) -> str:
    return urllib.parse.urlencode(params)


HTTP_CASES: list[Http] = [
    # --- keys: missing, wrong, in every header form
    *[
        Http(
            "keys",
            f"no key: {route}",
            route,
            key=None,
            status=401,
            has=("API key is required",),
            header=("www-authenticate",),
            log_key="anonymous",
            expected="401 without a valid key, on every route",
        )
        for route in (
            "/v1/status",
            "/v1/indexes",
            "/v1/topics",
            f"{SEARCH}?query=bone",
            f"/v1/{DENSE}/doc/4983",
            f"/v1/{DENSE}/explain?query=bone",
            "/mcp",
            "/v1/nowhere/search?query=a",
            "/nowhere",
        )
    ],
    Http(
        "keys",
        "no key: POST /mcp/ tools/list",
        "/mcp/",
        "POST",
        None,
        MCP_HEADERS,
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        status=401,
        log_key="anonymous",
        expected="MCP needs a key too",
    ),
    Http(
        "keys",
        "no key: HEAD /v1/status",
        method="HEAD",
        key=None,
        status=401,
        log_key="anonymous",
        expected="401 whatever the method",
    ),
    *[
        Http(
            "keys",
            f"public without a key: {route}",
            route,
            key=None,
            status=200,
            log_key="anonymous",
            lacks=(DENSE, LAB, "serve-probe", "openai:http"),
            expected="the page, its scripts and the API's description need no key, and name no index or teacher",
        )
        for route in ("/explore", "/docs", "/openapi.json", "/static/explorer.js")
    ],
    Http(
        "keys",
        "no key: / redirects to the page",
        "/",
        key=None,
        status=307,
        log_key="anonymous",
        expected="the root is the page's address",
    ),
    *[
        Http(
            "keys",
            f"no key: {target!r} is not public",
            target,
            key=None,
            status=401,
            log_key="anonymous",
            expected="only the page, its scripts and the API's description are public",
        )
        for target in (
            "/static/../v1/status",
            "/static/a/b.js",
            "/explore/",
            "//v1/status",
            "/docs/../v1/status",
            "/static/%2e%2e/v1/status",
        )
    ],
    Http(
        "keys",
        "wrong key",
        key=None,
        headers=(("X-API-Key", NOT_KEY),),
        status=401,
        has=("not valid",),
        log_key=fingerprint(NOT_KEY),
        expected="401; the log names the wrong key's fingerprint",
    ),
    *[
        Http(
            "keys",
            f"valid key as {label}",
            key=None,
            headers=((name, value),),
            status=200,
            log_key="A",
            expected="a key is sent as X-API-Key: KEY or Authorization: Bearer KEY",
        )
        for label, name, value in (
            ("X-API-Key", "X-API-Key", "<<A>>"),
            ("x-api-key (the name in lower case)", "x-api-key", "<<A>>"),
            ("X-API-Key with spaces around", "X-API-Key", "   <<A>>   "),
            ("Authorization: Bearer", "Authorization", "Bearer <<A>>"),
            ("Authorization: bearer (lower case)", "Authorization", "bearer <<A>>"),
            ("Authorization: BEARER", "Authorization", "BEARER <<A>>"),
            ("Authorization: Bearer with spaces", "Authorization", "Bearer    <<A>>  "),
        )
    ],
    Http(
        "keys",
        "empty X-API-Key and a valid Bearer",
        key=None,
        headers=(("X-API-Key", " "), ("Authorization", "Bearer <<B>>")),
        status=200,
        log_key="B",
        expected="the Bearer key serves",
    ),
    *[
        Http(
            "keys",
            f"not a key form: {label}",
            key=None,
            headers=(("Authorization", value),),
            status=401,
            expected="only X-API-Key: KEY or Authorization: Bearer KEY",
        )
        for label, value in (
            ("Authorization: KEY", "<<A>>"),
            ("Authorization: Token KEY", "Token <<A>>"),
            ("Authorization: Basic", "Basic " + base64.b64encode(KEYS["A"].encode()).decode()),
            ("Authorization: Bearer<TAB>KEY", "Bearer\t<<A>>"),
        )
    ],
    *[
        Http(
            "keys",
            f"not a key form: {label}",
            key=None,
            headers=((name, value),),
            status=401,
            expected="only X-API-Key: KEY or Authorization: Bearer KEY",
        )
        for label, name, value in (
            ("X-API-Key: Bearer KEY", "X-API-Key", "Bearer <<A>>"),
            ("Api-Key header", "Api-Key", "<<A>>"),
            ("Cookie alone", "Cookie", "api_key=<<A>>"),
        )
    ],
    *[
        Http(
            "keys",
            f"partial or altered key: {label}",
            key=None,
            headers=(("X-API-Key", value),),
            status=401,
            log=1,
            expected="401: only a whole key is valid",
        )
        for label, value in (
            ("all but the last character", KEYS["A"][:-1]),
            ("all but the first character", KEYS["A"][1:]),
            ("upper case", KEYS["A"].upper()),
            ("two keys joined", KEYS["A"] + KEYS["B"]),
        )
    ],
    Http(
        "keys",
        "very long key header (64 KB)",
        key=None,
        headers=(("X-API-Key", "k" * 65536),),
        status=401,
        log_key=fingerprint("k" * 65536),
        expected="401, named by its fingerprint",
    ),
    Http(
        "keys",
        "very long header of a key and more (1 MB)",
        key=None,
        headers=(("X-API-Key", KEYS["A"] + "z" * 2**20),),
        status=401,
        expected="401: not the key",
    ),
    # --- keys where no key belongs: refused with 400 (with a valid key) or 401 (without one), never logged
    Http(
        "keys",
        "key in a parameter, no header",
        f"/v1/status?{q(api_key=KEYS['A'])}",
        key=None,
        status=401,
        log_key="anonymous",
        logged=lambda r: param(r, "api_key") == f"<key {FP['A']}>",
        expected="401, and the log names the key by its fingerprint",
    ),
    Http(
        "keys",
        "key in a parameter, with another valid key",
        f"/v1/status?{q(api_key=KEYS['A'])}",
        key="B",
        status=400,
        has=("outside its X-API-Key",),
        log_key="B",
        expected="400: a key outside its header",
    ),
    Http(
        "keys",
        "key percent-encoded in a parameter",
        "/v1/status?note=<<urlA>>",
        key="B",
        status=400,
        expected="400, whatever the encoding",
    ),
    Http(
        "keys",
        "key as a parameter's name",
        "/v1/status?<<quotedA>>=1",
        key="B",
        status=400,
        expected="400: a key anywhere outside its header",
    ),
    Http(
        "keys",
        "key after a '#' in the request target",
        f"/v1/status?x=1#{KEYS['A']}",
        key="B",
        status=400,
        expected="400: the request's text holds the key (a client may send a fragment)",
    ),
    Http(
        "keys",
        "key inside a value",
        f"/v1/status?{q(note='xx' + KEYS['A'] + 'yy')}",
        key="B",
        status=400,
        expected="400",
    ),
    Http(
        "keys",
        "key with a quote and a backslash in a parameter",
        "/v1/status?note=<<quotedQ>>",
        key="A",
        status=400,
        expected="400",
    ),
    Http(
        "keys",
        "key as hits",
        f"{SEARCH}?{q(query='bone', hits=KEYS['A'])}",
        key="B",
        status=400,
        expected="400: refused before the value is read",
    ),
    Http("keys", "key as qid", f"{SEARCH}?{q(query='bone', qid=KEYS['A'])}", key="B", status=400, expected="400"),
    Http("keys", "key as the query", f"{SEARCH}?{q(query=KEYS['A'])}", key="B", status=400, expected="400"),
    Http(
        "keys",
        "key percent-encoded twice (never decoded to the key)",
        "/v1/status?note=" + "".join(f"%25{b:02X}" for b in KEYS["A"].encode()),
        key="B",
        status=200,
        expected="served: the server decodes once, so no key reaches it; the log holds no run of the key",
    ),
    Http("keys", "key in the path", f"/v1/{KEYS['A']}/search?query=a", key="B", status=400, expected="400"),
    Http("keys", "key percent-encoded in the path", "/v1/<<urlA>>/search?query=a", key="B", status=400, expected="400"),
    Http("keys", "key as a docid", f"/v1/{DENSE}/doc/{KEYS['A']}", key="B", status=400, expected="400"),
    Http(
        "keys",
        "key in the path, no header",
        f"/v1/{KEYS['A']}/search?query=a",
        key=None,
        status=401,
        logged=lambda r: f"<key {FP['A']}>" in r.get("route", ""),
        expected="401; the log names it",
    ),
    Http(
        "keys",
        "key in a public path (/static/KEY.js), no header",
        f"/static/{KEYS['A']}.js",
        key=None,
        status=400,
        expected="400: a public path holding a key is refused too",
    ),
    Http(
        "keys",
        "key in the page's parameters (/explore?k=KEY), no header",
        f"/explore?{q(k=KEYS['A'])}",
        key=None,
        status=400,
        expected="400",
    ),
    Http(
        "keys",
        "key in a Cookie beside a valid key",
        key="B",
        headers=(("Cookie", "api_key=<<A>>"),),
        status=400,
        expected="400 by the doc's wording: a key anywhere but its X-API-Key or Authorization header",
    ),
    Http(
        "keys",
        "key in a Referer beside a valid key",
        key="B",
        headers=(("Referer", f"http://x.example/?api_key={KEYS['A']}"),),
        status=400,
        expected="400 by the doc's wording: a key anywhere but its X-API-Key or Authorization header",
    ),
    # --- the log's 200-character cut: no cut leaves the start of a key, no run of 8 of a key is logged
    Http(
        "keys",
        "key at character 195 of a value (cut at 200)",
        f"{SEARCH}?{q(query='x' * 195 + KEYS['B'])}",
        status=400,
        logged=lambda r: param(r, "query") == "x" * 195 + f"<key {FP['B']}>"[:5],
        expected="400; logged as the fingerprint's start, never the key's",
    ),
    Http(
        "keys",
        "12 characters of a key at character 195",
        f"{SEARCH}?{q(query='y' * 195 + KEYS['B'][:12], hits=1)}",
        logged=lambda r: param(r, "query") == "y" * 195 + "*" * 5,
        expected="served (a part of a key changes nothing a client sees); logged masked",
    ),
    Http(
        "keys",
        "8 characters of a key at character 193",
        f"{SEARCH}?{q(query='y' * 193 + KEYS['B'][:8], hits=1)}",
        logged=lambda r: param(r, "query") == "y" * 193 + "*" * 7,
        expected="masked before the cut",
    ),
    Http(
        "keys",
        "8 characters of a key at character 199",
        f"{SEARCH}?{q(query='y' * 199 + KEYS['B'][:20], hits=1)}",
        logged=lambda r: param(r, "query") == "y" * 199 + "*",
        expected="masked before the cut",
    ),
    Http(
        "keys",
        "7 characters of a key (too few to mask)",
        f"{SEARCH}?{q(query='z ' + KEYS['B'][:7], hits=1)}",
        logged=lambda r: param(r, "query") == "z " + KEYS["B"][:7],
        expected="served and logged as sent",
    ),
    Http(
        "keys",
        "12 characters of a key in a parameter's name",
        f"/v1/status?{KEYS['A'][:12]}=1",
        status=200,
        logged=lambda r: "*" * 12 in r.get("parameters", {}),
        expected="served; the name logged masked",
    ),
    Http(
        "keys",
        "12 characters of a key as an index name",
        f"/v1/{KEYS['A'][:12]}/search?query=a",
        status=404,
        logged=lambda r: r.get("index") == "*" * 12,
        expected="404; the log masks the route and the index",
    ),
    # --- Host: the server's address, localhost, or --allowed-host; else 421
    *[
        Http(
            "host-origin",
            f"Host: {value!r}",
            host=value,
            status=421,
            has=("does not answer for host",),
            log_key="A",
            expected="421: not an address, localhost or an allowed name (DNS rebinding)",
        )
        for value in (
            "evil.example.com",
            "127.0.0.1.nip.io",
            "localhost.evil.com",
            "evil.search.lab.example.org",
            "search.lab.example.org.evil.com",
            "localhost:evil",
            "[::1]evil.com",
            "user@127.0.0.1",
            "127.0.0.1:80:80",
            "0x7f.0.0.1",
        )
    ],
    *[
        Http(
            "host-origin",
            f"Host: {value!r}",
            host=value,
            status=200,
            expected="an IP address, localhost on loopback, or an --allowed-host name (any case, port, final dot)",
        )
        for value in (
            "localhost",
            "LOCALHOST",
            "localhost.",
            "[::1]:<<PORT>>",
            "10.1.2.3",
            "search.lab.example.org",
            "SEARCH.LAB.EXAMPLE.ORG.:8000",
        )
    ],
    Http(
        "host-origin",
        "an empty Host header",
        host="",
        status=(400, 421),
        log=None,
        expected="refused: no name is no allowed name",
    ),
    Http(
        "host-origin",
        "HTTP/1.0 without a Host header",
        raw=b"GET /v1/status HTTP/1.0\r\nX-API-Key: <<A>>\r\n\r\n",
        status=421,
        expected="421: no Host is no allowed name",
    ),
    Http(
        "host-origin",
        "two Host headers, the foreign one first",
        raw=b"GET /v1/status HTTP/1.1\r\nHost: evil.example.com\r\nHost: 127.0.0.1\r\nX-API-Key: <<A>>\r\n"
        b"Connection: close\r\n\r\n",
        status=(400, 421),
        log=None,
        expected="refused (400 or 421): a foreign Host is never answered",
    ),
    Http(
        "host-origin",
        "two Host headers, the foreign one second",
        raw=b"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example.com\r\nX-API-Key: <<A>>\r\n"
        b"Connection: close\r\n\r\n",
        status=(400, 421),
        log=None,
        expected="refused (400 or 421): a foreign Host is never answered",
    ),
    Http(
        "host-origin",
        "foreign Host on MCP",
        "/mcp/",
        "POST",
        headers=tuple(MCP_HEADERS),
        body=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        host="rebind.evil.example",
        status=421,
        expected="421 on MCP too",
    ),
    Http(
        "host-origin",
        "DNS rebinding: foreign Host and its own Origin",
        host="evil.example.com:<<PORT>>",
        headers=(("Origin", "http://evil.example.com:<<PORT>>"),),
        status=421,
        expected="421",
    ),
    # --- Origin: the server's own, an --allowed-host page, or a --cors origin; else 403, and no CORS headers
    *[
        Http(
            "host-origin",
            f"Origin: {value!r}",
            headers=(("Origin", value),),
            status=403,
            has=("is not allowed",),
            no_header=("access-control-allow-origin",),
            expected="403 and no CORS headers: not the server's origin, an allowed host's page or a --cors origin",
        )
        for value in (
            "http://evil.example.com",
            "null",
            "",
            "http://127.0.0.1:1",
            "http://localhost:<<PORT>>",
            "https://course.example.org.evil.com",
            "http://evil.search.lab.example.org",
            "http://user@127.0.0.1:<<PORT>>",
        )
    ],
    *[
        Http(
            "host-origin",
            f"Origin: {value!r}",
            headers=(("Origin", value),),
            status=200,
            expected="the server's own origin, an --allowed-host page, or a --cors origin",
        )
        for value in (
            "http://127.0.0.1:<<PORT>>",
            "https://search.lab.example.org",
            "https://search.lab.example.org:444",
        )
    ],
    Http(
        "host-origin",
        "Origin: localhost with Host: localhost (its own)",
        host="localhost:<<PORT>>",
        headers=(("Origin", "http://localhost:<<PORT>>"),),
        status=200,
        expected="the server's own origin",
    ),
    Http(
        "host-origin",
        "Origin: the --cors origin",
        headers=(("Origin", COURSE),),
        status=200,
        header=("access-control-allow-origin",),
        expected="served with CORS headers for it",
    ),
    Http(
        "host-origin",
        "CORS preflight from the --cors origin",
        method="OPTIONS",
        key=None,
        headers=(
            ("Origin", COURSE),
            ("Access-Control-Request-Method", "GET"),
            ("Access-Control-Request-Headers", "x-api-key"),
        ),
        status=200,
        header=("access-control-allow-origin",),
        expected="preflight answered for --cors origins, and logged as every request",
    ),
    Http(
        "host-origin",
        "CORS preflight from a foreign origin",
        method="OPTIONS",
        key=None,
        headers=(("Origin", "http://evil.example.com"), ("Access-Control-Request-Method", "GET")),
        status=(400, 403),
        no_header=("access-control-allow-origin",),
        expected="refused (the doc: 403), no CORS headers, logged",
    ),
    Http(
        "host-origin",
        "CORS preflight under a foreign Host",
        method="OPTIONS",
        key=None,
        host="evil.example.com",
        headers=(("Origin", COURSE), ("Access-Control-Request-Method", "GET")),
        status=421,
        expected="421: the Host rule holds for every request",
    ),
    Http(
        "host-origin",
        "foreign Origin on MCP",
        "/mcp/",
        "POST",
        headers=(*MCP_HEADERS, ("Origin", "http://evil.example.com")),
        body=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        status=403,
        expected="403 on MCP too",
    ),
    # --- error bodies: a key a header holds is shown by its fingerprint, never itself
    Http(
        "error-bodies",
        "key in the Host header",
        host="<<A>>.example",
        key="B",
        status=421,
        has=("<key <<fpA>>>",),
        log_key="B",
        expected="421; the body shows the key's fingerprint",
    ),
    Http(
        "error-bodies",
        "the whole Host header a key",
        host="<<A>>",
        key="B",
        status=421,
        has=("<key <<fpA>>>",),
        expected="421 with the fingerprint",
    ),
    Http(
        "error-bodies",
        "a key with a quote and a backslash in the Host header",
        host="<<Q>>.example",
        key="B",
        status=421,
        has=("<key <<fpQ>>>",),
        expected="421; neither the key nor its JSON-escaped form",
    ),
    Http(
        "error-bodies",
        "key in the Origin header",
        headers=(("Origin", "http://<<A>>.example"),),
        key="B",
        status=403,
        has=("<key <<fpA>>>",),
        expected="403 with the fingerprint",
    ),
    Http(
        "error-bodies",
        "a key with a quote and a backslash in the Origin header",
        key="B",
        headers=(("Origin", "http://<<Q>>.example"),),
        status=403,
        has=("<key <<fpQ>>>",),
        expected="403",
    ),
    Http(
        "error-bodies",
        "a part of a key in the Host header",
        host="<<A:12>>.example",
        key="B",
        status=421,
        expected="421 (a part of a key may be echoed: what a client sees depends on whole keys alone)",
    ),
    Http(
        "error-bodies",
        "a key in the Host header of a request without a valid key",
        host="<<A>>.example",
        key=None,
        headers=(("X-API-Key", NOT_KEY),),
        status=421,
        log_key=fingerprint(NOT_KEY),
        has=("<key <<fpA>>>",),
        expected="421 before the key is checked; the body shows the fingerprint",
    ),
    Http(
        "error-bodies",
        "key as MCP-Protocol-Version",
        "/mcp/",
        "POST",
        headers=(*MCP_HEADERS, ("MCP-Protocol-Version", "<<A>>")),
        key="B",
        body=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        status=(400, 401, 403),
        expected="refused, and the key in no body (the doc: a key anywhere but its header is 400)",
    ),
    Http(
        "error-bodies",
        "key as the MCP Accept header",
        "/mcp/",
        "POST",
        key="B",
        headers=(("Content-Type", "application/json"), ("Accept", "<<A>>")),
        body=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        status=(400, 406),
        expected="refused; the key in no body",
    ),
    # --- bounded work
    *[
        Http("bounded-work", f"{label}", f"{SEARCH}?{query}", status=code, expected=rule)
        for label, query, code, rule in (
            ("hits=0", q(query="bone", hits=0), 400, "hits in [1, --max-hits]"),
            ("hits=1001", q(query="bone", hits=1001), 400, "hits at most --max-hits (1000)"),
            ("hits=1000", q(query="bone", hits=1000), 200, "hits up to --max-hits"),
            ("hits=-1", q(query="bone", hits=-1), 400, "positive"),
            ("hits=1e3", q(query="bone", hits="1e3"), 400, "an integer in ASCII digits"),
            ("hits in Arabic-Indic digits", q(query="bone", hits="١٢"), 400, "ASCII digits only"),
            ("hits=10^23", q(query="bone", hits="9" * 23), 400, "at most --max-hits"),
            ("hits=' 5'", q(query="bone", hits=" 5"), 400, "an integer as written"),
            ("hits=5 then hits=2000", "query=bone&hits=5&hits=2000", 400, "the value read is the value checked"),
            (
                "depth=101 (tour-soft)",
                q(query="bone", rewriter="tour-soft", teacher=TEACHER, depth=101),
                400,
                "depth at most --max-candidates (100)",
            ),
            (
                "k=101 (depth's old name)",
                q(query="bone", rewriter="tour-soft", teacher=TEACHER, k=101),
                400,
                "the old name held to the same maximum",
            ),
            (
                "prf-depth=101 (rocchio)",
                q(query="bone", rewriter="rocchio", **{"prf-depth": 101}),
                400,
                "prf-depth at most --max-candidates",
            ),
            (
                "iterations=11",
                q(query="bone", rewriter="tour-soft", teacher=TEACHER, iterations=11),
                400,
                "iterations at most --max-iterations (10)",
            ),
            ("lr=1001", q(query="bone", rewriter="tour-soft", teacher=TEACHER, lr=1001), 400, "floats within 1000"),
            ("lr=1e308", q(query="bone", rewriter="tour-soft", teacher=TEACHER, lr="1e308"), 400, "floats within 1000"),
            ("lr=inf", q(query="bone", rewriter="tour-soft", teacher=TEACHER, lr="inf"), 400, "a finite number"),
            ("lr=nan", q(query="bone", rewriter="tour-soft", teacher=TEACHER, lr="nan"), 400, "a finite number"),
            ("k1 on a dense index", q(query="bone", k1=1.2), 400, "k1 and b only on a BM25 index"),
            ("query of 10,001 characters", q(query="a" * 10_001), 413, "at most 10,000 characters: 413"),
            ("query of 10,000 characters", q(query="a " * 5000, hits=1), 200, "up to 10,000 characters"),
            ("query of ideographic spaces", q(query="\u3000" * 5), 400, "blank is refused"),
            ("query of zero-width spaces", q(query="\u200b" * 5), 400, "a query that shows nothing is blank"),
            ("qid with a space", q(query="bone", qid="a b"), 400, "qid without whitespace"),
            ("qid of 201 characters", q(query="bone", qid="q" * 201), 400, "qid at most 200 characters"),
            ("trace=maybe", q(query="bone", trace="maybe"), 400, "booleans are true or false"),
            ("max_doc_length=0", q(query="bone", max_doc_length=0), 400, "positive"),
            ("an unknown option", q(query="bone", rewriter="rocchio", nonsense=1), 400, "options the rewriter takes"),
            ("percent-encoded bytes that are not UTF-8", "query=%ff%fe", 400, "not valid UTF-8: 400"),
        )
    ],
    *[
        Http("bounded-work", f"{label}", f"/v1/{LAB}/search?{query}", status=code, expected=rule)
        for label, query, code, rule in (
            ("k1=1001 (BM25)", q(query="bone", k1=1001), 400, "k1 in [0, 1000]"),
            ("b=1.5 (BM25)", q(query="bone", b=1.5), 400, "b in [0, 1]"),
            ("k1=nan (BM25)", q(query="bone", k1="nan"), 400, "a finite number"),
            ("a rewriter on a BM25 index", q(query="bone", rewriter="rocchio"), 400, "no rewriter on BM25"),
        )
    ],
    Http(
        "bounded-work",
        "64 parameters",
        "/v1/status?" + "&".join(f"p{i}=" for i in range(64)),
        status=200,
        expected="at most 64 parameters",
    ),
    Http(
        "bounded-work",
        "65 parameters",
        "/v1/status?" + "&".join(f"p{i}=" for i in range(65)),
        status=400,
        has=("more than 64",),
        log_key="A",
        expected="400, counted before anything is parsed",
    ),
    Http(
        "bounded-work",
        "10,000 empty parameters",
        "/v1/status?" + "&" * 10_000,
        status=400,
        expected="400 before parsing",
    ),
    Http(
        "bounded-work",
        "a 1 MB query",
        f"{SEARCH}?query=" + "a" * 2**20,
        status=413,
        has=("at most 10000",),
        expected="a 1 MB query is read and refused in one line (413)",
    ),
    Http(
        "bounded-work",
        "an MCP body over 1 MB",
        "/mcp/",
        "POST",
        headers=tuple(MCP_HEADERS),
        body=mcp_body("search", {"query": "a" * (2**20 + 10), "index": DENSE}),
        status=413,
        expected="413 past 1 MB",
    ),
    Http(
        "bounded-work",
        "an MCP body of 2 MB, chunked",
        "/mcp/",
        "POST",
        headers=(*MCP_HEADERS, ("Transfer-Encoding", "chunked")),
        body=b"".join(b"%x\r\n%s\r\n" % (65536, b"[" * 65536) for _ in range(32)) + b"0\r\n\r\n",
        status=413,
        expected="413 past 1 MB, however it is sent",
    ),
    Http(
        "bounded-work",
        "an MCP body nested 100,000 deep",
        "/mcp/",
        "POST",
        headers=tuple(MCP_HEADERS),
        body=b"[" * 100_000 + b"]" * 100_000,
        status=400,
        expected="400: nests too deeply",
    ),
    Http(
        "bounded-work",
        "an MCP body nested 600 deep",
        "/mcp/",
        "POST",
        headers=tuple(MCP_HEADERS),
        body=b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"query":'
        + b"[" * 600
        + b"]" * 600
        + b',"index":"scifact.minilm"}}}',
        status=(200, 400, 422),
        expected="refused or a tool error, never a 5xx",
    ),
    # --- the request log: one record a line, whatever the text
    *[
        Http(
            "request-log",
            f"{label} in a query",
            f"{SEARCH}?{q(query=f'bone{c}density', hits=1)}",
            logged=lambda r, c=c: param(r, "query") == f"bone{c}density",
            expected="one record, one line; the text kept",
        )
        for label, c in SEPARATORS.items()
    ],
    Http(
        "request-log",
        "U+2028 in a parameter's name",
        "/v1/status?" + q(**{"a\u2028b": 1}),
        logged=lambda r: "a\u2028b" in (r.get("parameters") or {}),
        expected="one record, one line",
    ),
    Http(
        "request-log",
        "U+2029 and NEL in the path",
        "/v1/a%E2%80%A9b%C2%85c/search?query=x",
        status=404,
        logged=lambda r: r.get("index") == "a\u2029b\x85c",
        expected="404, one record, one line",
    ),
    Http(
        "request-log",
        "CR LF in a value",
        f"/v1/status?{q(note='a' + chr(13) + chr(10) + 'b')}",
        logged=lambda r: param(r, "note") == "a\r\nb",
        expected="one record, one line",
    ),
    Http(
        "request-log",
        "a 403 names the key it carried",
        headers=(("Origin", "http://evil.example.com"),),
        status=403,
        log_key="A",
        expected="refused requests name the key fingerprint they carried",
    ),
    Http(
        "request-log",
        "a 421 with a wrong key names that key",
        host="evil.example.com",
        key=None,
        headers=(("X-API-Key", NOT_KEY),),
        status=421,
        log_key=fingerprint(NOT_KEY),
        expected="the fingerprint of the key carried, valid or not",
    ),
    Http(
        "request-log",
        "a 404 names the key",
        "/v1/nowhere/search?query=a",
        status=404,
        log_key="A",
        expected="the key's fingerprint",
    ),
    Http(
        "request-log",
        "a 413 over MCP names the key",
        "/mcp/",
        "POST",
        headers=tuple(MCP_HEADERS),
        key="D",
        body=b" " * (2**20 + 1),
        status=413,
        log_key="D",
        expected="the key's fingerprint",
    ),
    Http(
        "request-log",
        "an invalid HTTP request is no request",
        raw=b"GET /v1/status HTTP/1.1\r\nHost: a\x00b\r\n\r\n",
        status=(0, 400),
        log=0,
        expected="refused by the HTTP layer; nothing logged",
    ),
    # --- own attacks: who may read
    Http(
        "own",
        "OPTIONS without a key reads nothing",
        "/v1/status",
        "OPTIONS",
        key=None,
        status=(401, 405),
        lacks=("queued", "batches"),
        expected="no data without a key, whatever the method",
    ),
    Http(
        "own",
        "OPTIONS /mcp/ without a key",
        "/mcp/",
        "OPTIONS",
        key=None,
        status=(401, 405),
        expected="no data without a key",
    ),
    Http(
        "own",
        "no key: an unknown index is not told apart from a known one",
        "/v1/nowhere/search?query=a",
        key=None,
        status=401,
        lacks=("unknown index", DENSE),
        expected="401 alike: no index names leak",
    ),
    Http(
        "own",
        "unknown teacher: the answer names no URL",
        f"{SEARCH}?{q(query='a', rewriter='rerank', teacher='x')}",
        status=400,
        lacks=("127.0.0.1", "http://"),
        expected="teachers named by label, not URL",
    ),
    Http(
        "own",
        "/v1/indexes names teachers without URLs",
        "/v1/indexes",
        status=200,
        lacks=("http://", "127.0.0.1"),
        expected="listings name teachers by label",
    ),
    Http("own", "/v1/status holds no key", "/v1/status", status=200, expected="the status holds no key"),
]

MCP_ARGS = {"query": "bone density", "index": DENSE, "hits": 2}
MCP_CASES: list[Mcp] = [
    # --- keys in MCP arguments: 400 at the door
    Mcp(
        "keys",
        "key as an MCP argument",
        "search",
        {"query": "<<A>>", "index": DENSE},
        400,
        key="B",
        log_key="B",
        logged=lambda r: param(r, "query") == f"<key {FP['A']}>",
        expected="400; logged by fingerprint",
    ),
    Mcp(
        "keys",
        "key JSON-escaped in an MCP argument",
        "search",
        '{"query": "<<uA>>", "index": "scifact.minilm"}',
        400,
        key="B",
        expected="400, whatever the encoding",
    ),
    Mcp(
        "keys",
        "key in a nested MCP argument",
        "search",
        {**MCP_ARGS, "options": {"note": "<<A>>"}},
        400,
        key="B",
        expected="400",
    ),
    Mcp("keys", "key as an argument's name", "search", {**MCP_ARGS, "<<A>>": 1}, 400, key="B", expected="400"),
    Mcp("keys", "key as the tool's name", "<<A>>", MCP_ARGS, 400, key="B", expected="400"),
    Mcp(
        "keys",
        "key at character 195 of an MCP argument",
        "search",
        {"query": "x" * 195 + "<<B>>", "index": DENSE},
        400,
        key="A",
        expected="400",
    ),
    Mcp(
        "keys",
        "12 characters of a key in an MCP argument",
        "search",
        {**MCP_ARGS, "query": "<<A:12>> bone"},
        "ok",
        key="B",
        logged=lambda r: param(r, "query") == "*" * 12 + " bone",
        expected="served; the log masks the part",
    ),
    Mcp(
        "keys",
        "an 8-digit run of a key as an MCP number",
        "search",
        {**MCP_ARGS, "hits": 99887766},
        "error",
        key="A",
        expected="a tool error; the log masks any run of 8 of a key's characters, numbers too",
    ),
    # --- every tool, bad types, non-finite scores, non-string docids
    Mcp("mcp", "search", "search", MCP_ARGS, "ok", expected="answered"),
    Mcp(
        "mcp",
        "search, rerank with the teacher",
        "search",
        {**MCP_ARGS, "rewriter": "rerank", "teacher": TEACHER, "depth": 5},
        "ok",
        expected="answered",
    ),
    Mcp(
        "mcp",
        "search with options",
        "search",
        {**MCP_ARGS, "rewriter": "rocchio", "options": {"prf-depth": 5}},
        "ok",
        expected="rewriter options by their REST names",
        needs="mcp-options",
    ),
    Mcp(
        "mcp",
        "options: iterations beyond the maximum",
        "search",
        {**MCP_ARGS, "rewriter": "tour-soft", "teacher": TEACHER, "options": {"iterations": 1000}},
        "error",
        "iterations",
        expected="held to --max-iterations",
        needs="mcp-options",
    ),
    Mcp(
        "mcp",
        "options: a float beyond 1000",
        "search",
        {**MCP_ARGS, "rewriter": "tour-soft", "teacher": TEACHER, "options": {"lr": 1e300}},
        "error",
        expected="floats within 1000",
        needs="mcp-options",
    ),
    Mcp(
        "mcp",
        "options: an argument of its own",
        "search",
        {**MCP_ARGS, "options": {"query": "other"}},
        "error",
        expected="refused in one line",
        needs="mcp-options",
    ),
    Mcp("mcp", "hits as text", "search", {**MCP_ARGS, "hits": "abc"}, "error", "hits", expected="one line naming it"),
    Mcp("mcp", "hits 10.5", "search", {**MCP_ARGS, "hits": 10.5}, "error", "hits", expected="an integer"),
    Mcp("mcp", "hits 10^9", "search", {**MCP_ARGS, "hits": 10**9}, "error", "hits", expected="at most --max-hits"),
    Mcp(
        "mcp",
        "depth 1000",
        "search",
        {**MCP_ARGS, "rewriter": "rerank", "teacher": TEACHER, "depth": 1000},
        "error",
        "depth",
        expected="at most --max-candidates",
    ),
    Mcp(
        "mcp",
        "k1 NaN on the BM25 index",
        "search",
        '{"query": "bone", "index": "lab.minilm-v2", "k1": NaN}',
        "error",
        "k1",
        expected="a finite number",
    ),
    Mcp(
        "mcp",
        "k1 Infinity on the BM25 index",
        "search",
        '{"query": "bone", "index": "lab.minilm-v2", "k1": Infinity}',
        "error",
        "k1",
        expected="a finite number",
    ),
    Mcp("mcp", "empty query", "search", {**MCP_ARGS, "query": ""}, "error", "query", expected="not blank"),
    Mcp("mcp", "query as a list", "search", {**MCP_ARGS, "query": ["a"]}, "error", "query", expected="a string"),
    Mcp(
        "mcp",
        "unknown index",
        "search",
        {**MCP_ARGS, "index": "nowhere"},
        "error",
        "unknown index",
        expected="one line",
    ),
    Mcp(
        "mcp",
        "a 20,000-character query",
        "search",
        {**MCP_ARGS, "query": "a " * 10_000},
        "error",
        "10000",
        expected="at most 10,000 characters",
    ),
    Mcp("mcp", "list_indexes", "list_indexes", {}, "ok", expected="answered"),
    Mcp("mcp", "list_indexes faiss", "list_indexes", {"index_type": "faiss"}, "ok", expected="Pyserini's kinds"),
    Mcp(
        "mcp", "list_indexes of an unknown kind", "list_indexes", {"index_type": "bogus"}, "error", expected="one line"
    ),
    Mcp(
        "mcp",
        "list_indexes with a number",
        "list_indexes",
        {"index_type": 5},
        "error",
        "index_type",
        expected="one line naming the argument",
    ),
    Mcp("mcp", "get_index", "get_index", {"index_name": DENSE}, "ok", expected="answered"),
    Mcp("mcp", "get_index of an unknown index", "get_index", {"index_name": "nowhere"}, "error", expected="one line"),
    Mcp("mcp", "get_document", "get_document", {"docid": "4983", "index": DENSE}, "ok", expected="answered"),
    Mcp(
        "mcp",
        "get_document with a number docid",
        "get_document",
        {"docid": 4983, "index": DENSE},
        "error",
        "docid",
        expected="a docid is a string",
    ),
    Mcp(
        "mcp",
        "get_document of a 100,000-character docid",
        "get_document",
        {"docid": "d" * 100_000, "index": DENSE},
        "error",
        check=lambda text: len(text) < 1000,
        expected="one short line",
    ),
    Mcp(
        "mcp",
        "get_document with null",
        "get_document",
        {"docid": None, "index": DENSE},
        "error",
        "docid",
        expected="one line naming it",
    ),
    Mcp(
        "mcp",
        "fuse_search_results",
        "fuse_search_results",
        {"hits1": [{"docid": "a", "score": 2}, {"docid": "b", "score": 1}], "hits2": [{"docid": "b", "score": 3}]},
        "ok",
        expected="answered",
    ),
    *[
        Mcp(
            "mcp",
            f"fuse: {label}",
            "fuse_search_results",
            arguments,
            "error",
            where,
            expected="a docid is a string and a score a finite number; one line naming the argument",
        )
        for label, arguments, where in (
            ("a NaN score", '{"hits1": [{"docid": "a", "score": NaN}], "hits2": []}', "hits1"),
            ("an Infinity score", '{"hits1": [{"docid": "a", "score": Infinity}], "hits2": []}', "hits1"),
            ("a -Infinity score", '{"hits1": [], "hits2": [{"docid": "a", "score": -Infinity}]}', "hits2"),
            ("a score of 1e400", '{"hits1": [{"docid": "a", "score": 1e400}], "hits2": []}', "hits1"),
            ("a null score", '{"hits1": [{"docid": "a", "score": null}], "hits2": []}', "hits1"),
            ("a score as text", '{"hits1": [{"docid": "a", "score": "1.0"}], "hits2": []}', "hits1"),
            ("a boolean score", '{"hits1": [{"docid": "a", "score": true}], "hits2": []}', "hits1"),
            ("a number docid", '{"hits1": [{"docid": 5, "score": 1}], "hits2": []}', "hits1"),
            ("a null docid", '{"hits1": [{"docid": null, "score": 1}], "hits2": []}', "hits1"),
            ("a hit without a score", '{"hits1": [{"docid": "a"}], "hits2": []}', "hits1"),
            ("k=0", '{"hits1": [], "hits2": [], "k": 0}', "k"),
            ("k=-5", '{"hits1": [], "hits2": [], "k": -5}', "k"),
        )
    ],
    Mcp(
        "mcp",
        "fuse: 2 x 10,000 hits",
        "fuse_search_results",
        {
            "hits1": [{"docid": f"d{i}", "score": i} for i in range(10_000)],
            "hits2": [{"docid": f"d{i}", "score": -i} for i in range(10_000)],
            "k": 3,
        },
        "ok",
        expected="answered within 1 MB",
    ),
    Mcp("mcp", "get_qrels", "get_qrels", {"index_name": DENSE, "query_id": "1"}, "ok", expected="answered"),
    Mcp(
        "mcp",
        "get_qrels of an unknown query",
        "get_qrels",
        {"index_name": DENSE, "query_id": "nope"},
        "ok",
        expected="{}",
    ),
    Mcp(
        "mcp",
        "eval_hits",
        "eval_hits",
        {"index_name": DENSE, "metric": "ndcg", "query_id": "1", "hits": {"31715818": 2.0, "x": 1.0}},
        "ok",
        expected="answered",
    ),
    *[
        Mcp("mcp", f"eval_hits: {label}", "eval_hits", arguments, "error", where, expected="refused in one line")
        for label, arguments, where in (
            (
                "a NaN score",
                '{"index_name": "scifact.minilm", "metric": "ndcg", "query_id": "1", "hits": {"31715818": NaN}}',
                "hits",
            ),
            (
                "an Infinity score",
                '{"index_name": "scifact.minilm", "metric": "ndcg", "query_id": "1", "hits": {"31715818": Infinity}}',
                "hits",
            ),
            (
                "cutoff 0",
                '{"index_name": "scifact.minilm", "metric": "ndcg", "query_id": "1", "hits": {}, "cutoff": 0}',
                "cutoff",
            ),
            (
                "cutoff 10^6",
                '{"index_name": "scifact.minilm", "metric": "ndcg", "query_id": "1", "hits": {}, "cutoff": 1000000}',
                "cutoff",
            ),
            (
                "an unknown metric",
                '{"index_name": "scifact.minilm", "metric": "bleu", "query_id": "1", "hits": {}}',
                "metric",
            ),
            (
                "an unknown query",
                '{"index_name": "scifact.minilm", "metric": "ndcg", "query_id": "nope", "hits": {}}',
                "nope",
            ),
        )
    ],
    Mcp("mcp", "an unknown tool", "no_such_tool", {}, "error", expected="an error, not a 5xx"),
    Mcp("mcp", "arguments as a list", "search", "[1, 2]", "error", expected="an error, not a 5xx"),
    Mcp(
        "request-log",
        "a lone surrogate escape in an MCP argument",
        "search",
        '{"query": "bone \\ud800 density", "index": "scifact.minilm"}',
        (400, 200),
        expected="refused or answered, never a 5xx; one record in the log as for every request",
    ),
    *[
        Mcp(
            "request-log",
            f"{label} in an MCP argument",
            "search",
            {**MCP_ARGS, "query": f"bone{c}density"},
            "ok",
            logged=lambda r, c=c: param(r, "query") == f"bone{c}density",
            expected="one record, one line",
        )
        for label, c in SEPARATORS.items()
        if label in ("LF", "NEL U+0085", "U+2028")
    ],
]

RAW_MCP: list[Http] = [
    Http(
        "mcp",
        "body: null",
        "/mcp/",
        "POST",
        headers=tuple(MCP_HEADERS),
        body=b"null",
        status=(400, 422),
        expected="a JSON-RPC error, not a 5xx",
    ),
    Http(
        "mcp",
        "body: an empty batch",
        "/mcp/",
        "POST",
        headers=tuple(MCP_HEADERS),
        body=b"[]",
        status=(400, 422),
        expected="a JSON-RPC error, not a 5xx",
    ),
    Http(
        "mcp",
        "body: not JSON",
        "/mcp/",
        "POST",
        headers=tuple(MCP_HEADERS),
        body=b"{not json",
        status=400,
        expected="a parse error",
    ),
    Http(
        "mcp",
        "body: invalid UTF-8",
        "/mcp/",
        "POST",
        headers=tuple(MCP_HEADERS),
        body=b'{"a": "\xff"}',
        status=400,
        expected="a parse error",
    ),
    Http(
        "mcp",
        "body: UTF-16 holding a key",
        "/mcp/",
        "POST",
        headers=tuple(MCP_HEADERS),
        key="B",
        body=mcp_body("search", {"query": KEYS["A"], "index": DENSE}).decode().encode("utf-16"),
        status=400,
        expected="refused; no key echoed",
    ),
    Http(
        "mcp",
        "params as a list",
        "/mcp/",
        "POST",
        headers=tuple(MCP_HEADERS),
        body=b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":[1]}',
        status=(200, 400, 422),
        expected="an error, not a 5xx",
        check=lambda r: mcp_outcome(r)[0] != "ok",
    ),
    Http(
        "mcp",
        "Content-Type text/plain",
        "/mcp/",
        "POST",
        headers=(("Content-Type", "text/plain"), ("Accept", "application/json, text/event-stream")),
        body=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        status=(400, 415),
        expected="refused (400 or 415), no 5xx",
    ),
    Http(
        "mcp",
        "no Accept",
        "/mcp/",
        "POST",
        headers=(("Content-Type", "application/json"),),
        body=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        status=406,
        expected="406",
    ),
    Http("mcp", "GET /mcp/", "/mcp/", status=(400, 405, 406), expected="no stream for a stateless server; no 5xx"),
    Http("mcp", "DELETE /mcp/", "/mcp/", "DELETE", status=(400, 404, 405), expected="no session to end; no 5xx"),
    Http(
        "mcp",
        "tools/list",
        "/mcp/",
        "POST",
        headers=tuple(MCP_HEADERS),
        body=b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        status=200,
        check=lambda r: (
            {"search", "get_document", "list_indexes", "get_index", "fuse_search_results", "get_qrels", "eval_hits"}
            <= {t["name"] for t in (r.json() or {}).get("result", {}).get("tools", [])}
        ),
        expected="the seven tools Pyserini's MCP server names",
    ),
]


# ---------------------------------------------------------------------------------------------------------------
# the probe


def detect_features(tree: Path) -> set[str]:
    """What the tree's server has, where a case needs it."""
    serve = tree / "tour_pyserini" / "serve"
    found = set()
    if "options: dict" in (serve / "mcp_tools.py").read_text():
        found.add("mcp-options")
    if '"data": self.judged' in (serve / "service.py").read_text():
        found.add("status-data")
    return found


class Probe:
    def __init__(self, tree: Path, name: str, work: Path):
        self.tree, self.name, self.work = tree.resolve(), name, work
        self.features = detect_features(self.tree)
        self.cases: list[dict] = []
        self.judge = start_server()
        self.judge_url = url(self.judge)

    # --- recording

    def record(
        self,
        category: str,
        name: str,
        server: str,
        sent: str,
        expected: str,
        observed: dict,
        checks: list[tuple[str, bool]],
        needs: str | None = None,
    ) -> dict:
        if needs is not None and needs not in self.features:
            result, why = "n/a", f"the server at this tree has no {needs}"
        else:
            failed = [what for what, ok in checks if not ok]
            result, why = ("fail", "; ".join(failed)) if failed else ("pass", "")
        case = {
            "category": category,
            "name": name,
            "server": server,
            "sent": redacted(sent, 300),
            "expected": expected,
            "observed": observed,
            "result": result,
            "why": why,
        }
        self.cases.append(case)
        mark = {"pass": " ", "fail": "F", "n/a": "-"}[result]
        print(f"[{mark}] {category:13} {name[:80]}{'  <- ' + why[:150] if result == 'fail' else ''}", flush=True)
        return case

    def log_checks(self, server: Server, count: int | None, log_key: str | None, logged) -> tuple[list, dict]:
        """The request log's new records after a case: their number, one a line, no key, the key they name."""
        lines = server.new_log()
        if server.log is None or count is None:
            return [], {}
        text = b"\n".join(lines).decode("utf-8", "replace")
        records, parsed = [], True
        for line in lines:
            try:
                records.append(json.loads(line))
            except ValueError:
                parsed = False
        checks = [
            (f"the log gained {count} record(s) (it gained {len(lines)})", len(lines) == count),
            ("every record is one JSON line", parsed and len(text.splitlines()) == len(lines)),
        ]
        runs = key_runs(text) + [n for r in records for s in strings(r) for n in key_runs(s)]
        checks.append((f"the log holds no run of 8 of a key's characters (found: {sorted(set(runs))})", not runs))
        if log_key is not None and records:
            want = FP.get(log_key, log_key)
            checks.append((f"the record names {log_key!r} ({records[0].get('key')!r})", records[0].get("key") == want))
        if logged is not None and records:
            try:
                ok = bool(logged(records[0]))
            except Exception:  # noqa: BLE001 - a record of another shape fails the check
                ok = False
            checks.append(("the record's content is as the rule says", ok))
        shown = [redacted(json.dumps(r, ensure_ascii=True), 500) for r in records[:2]]
        return checks, {"log": shown or [redacted(line.decode("utf-8", "replace"), 300) for line in lines[:2]]}

    def reply_checks(self, reply: Reply) -> list:
        keys = whole_keys(reply.text) + whole_keys(json.dumps(reply.headers))
        return [(f"no whole key in the answer (found: {keys})", not keys)]

    # --- the keyed server's single-request cases

    def http_case(self, server: Server, case: Http) -> None:
        headers = [("X-API-Key", KEYS[case.key])] if case.key else []
        headers += [tuple(fill(list(h), server)) for h in case.headers]
        if case.raw is not None:
            data = fill(case.raw, server)
        else:
            host = None if case.host is None else fill(case.host, server)
            data = request(case.method, fill(case.target, server), headers, fill(case.body, server), host)
        reply = server.send(data)
        wanted = case.status if isinstance(case.status, tuple) else (case.status,)
        checks = [(f"status {reply.status} in {wanted}", reply.status in wanted)]
        checks += [(f"the body holds {fill(h, server)!r}", fill(h, server) in reply.text) for h in case.has]
        checks += [(f"the body does not hold {h!r}", fill(h, server) not in reply.text) for h in case.lacks]
        checks += [(f"header {h}", h in reply.headers) for h in case.header]
        checks += [(f"no header {h}", h not in reply.headers) for h in case.no_header]
        if case.check is not None:
            checks.append(("the answer is as the rule says", bool(case.check(reply))))
        checks += self.reply_checks(reply)
        log_checks, log_seen = self.log_checks(server, case.log, case.log_key, case.logged)
        observed = {"status": reply.status, "body": redacted(reply.text, 300), **log_seen}
        sent = data[:300].decode("utf-8", "replace") + (f" ... ({len(data)} bytes)" if len(data) > 300 else "")
        self.record(
            case.category, case.name, server.name, sent, case.expected, observed, checks + log_checks, case.needs
        )

    def mcp_case(self, server: Server, case: Mcp) -> None:
        args = case.args if isinstance(case.args, str) else fill(case.args, server)
        body = mcp_body(fill(case.tool, server), fill(args, server) if isinstance(args, str) else args)
        headers = [("X-API-Key", KEYS[case.key])] if case.key else []
        reply = server.send(request("POST", "/mcp/", [*MCP_HEADERS, *headers, *case.headers], body, server.host))
        outcome, text = mcp_outcome(reply)
        if isinstance(case.expect, str):
            checks = [
                (
                    f"a {case.expect} (got {outcome}, status {reply.status})",
                    outcome == case.expect or (case.expect == "error" and 400 <= reply.status < 500),
                )
            ]
            if case.expect == "error":
                checks.append(("one line", "\n" not in text.strip()))
        else:
            wanted = case.expect if isinstance(case.expect, tuple) else (case.expect,)
            checks = [(f"status {reply.status} in {wanted}", reply.status in wanted)]
        checks.append((f"no 5xx ({reply.status})", reply.status < 500))
        if case.has:
            checks.append((f"the answer names {case.has!r}", case.has in text))
        if case.check is not None:
            checks.append(("the answer is as the rule says", bool(case.check(text))))
        checks += self.reply_checks(reply)
        log_checks, log_seen = self.log_checks(server, 1, case.log_key, case.logged)
        observed = {"status": reply.status, "outcome": outcome, "text": redacted(text, 300), **log_seen}
        self.record(
            case.category,
            case.name,
            server.name,
            f"tools/call {case.tool} {redacted(str(case.args), 200)}",
            case.expected,
            observed,
            checks + log_checks,
            case.needs,
        )

    # --- flows

    def build_indexes(self) -> None:
        self.indexes = self.work / "indexes"
        self.dense, self.bm25 = self.indexes / DENSE, self.indexes / "scifact.bm25"
        env = {**os.environ, "PYTHONPATH": str(self.tree), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        for out, extra in ((self.dense, []), (self.bm25, ["--bm25"])):
            if not (out / "tour_pyserini.json").exists():
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "tour_pyserini.index",
                        "--collection",
                        str(ROOT / "collections" / "scifact"),
                        "--output",
                        str(out),
                        *extra,
                    ],
                    cwd=self.tree,
                    env=env,
                    check=True,
                    capture_output=True,
                )

    def teacher_args(self, judge_url: str | None = None) -> list[str]:
        return [
            "--teacher",
            f"openai:{judge_url or self.judge_url}",
            "--teacher-model",
            "judge-1",
            "--teacher-judge",
            "logprobs",
        ]

    def finish(self, server: Server) -> None:
        """Stop ``server``: its stderr holds no key nor a run of 8 of one, and its whole request log is one JSON
        record a line, with none either."""
        code = server.stop()
        err = server.stderr()
        runs = key_runs(err)
        where = [redacted(err[max(0, err.find(KEYS[n][:8]) - 120) : err.find(KEYS[n][:8]) + 60], 300) for n in runs]
        observed = {"exit": code, "stderr_bytes": len(err), "stderr_runs": runs, "stderr_where": where}
        checks = [(f"no run of a key in stderr (found: {runs})", not runs)]
        if server.log is not None and server.log.exists():
            text = server.log.read_text(encoding="utf-8", errors="replace")
            lines = text.split("\n")[:-1]
            parsed = sum(1 for line in lines if is_json(line))
            log_runs = key_runs(text)
            observed |= {"log_records": len(lines), "parsed": parsed, "log_runs": log_runs}
            checks += [
                (f"every log line parses ({parsed} of {len(lines)})", parsed == len(lines)),
                ("str.splitlines() finds as many log lines", len(text.splitlines()) == len(lines)),
                (f"no run of a key in the log (found: {log_runs})", not log_runs),
            ]
        self.record(
            "request-log",
            "stderr and the whole request log hold no key; one record a line",
            server.name,
            "(every request to this server)",
            "no key, whole or in part, reaches the request log or the server's log; one JSON line per request",
            observed,
            checks,
        )

    def keyed(self) -> None:
        """The keyed server: two indexes (one named in --config, with a key of its own), the fake judge, a
        request log, --cors and --allowed-host, topics and qrels for the MCP tools."""
        config = self.work / "keyed" / "server.yaml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text(f"indexes:\n  {LAB}: {self.bm25}\napi_keys:\n  - {KEYS['C']}\n")
        server = Server(
            self,
            "keyed",
            [
                "--index",
                str(self.dense),
                "--config",
                str(config),
                *self.teacher_args(),
                "--cors",
                COURSE,
                "--allowed-host",
                LABHOST,
                "--topics",
                str(TOPICS),
                "--qrels",
                str(QRELS),
            ],
        ).start()
        try:
            for case in HTTP_CASES:
                self.http_case(server, case)
            for case in MCP_CASES:
                self.mcp_case(server, case)
            for case in RAW_MCP:
                self.http_case(server, case)
            self.http_case(
                server,
                Http(
                    "keys",
                    "the key given in --config serves",
                    "/v1/status",
                    key="C",
                    expected="api_keys in Pyserini's YAML config are accepted keys",
                ),
            )
            self.http_case(
                server,
                Http(
                    "config",
                    "an index named in --config is served by its name",
                    f"/v1/{LAB}/search?query=bone",
                    expected="lab.minilm-v2 names a route",
                ),
            )
            self.key_parts_everywhere(server)
            self.big_mcp_body(server)
            self.stray_files(server, {"serve.lock", "scores"})
        finally:
            self.finish(server)

    def key_parts_everywhere(self, server: Server) -> None:
        """Parts of a key (12 characters) in every argument of every tool: each answered or refused as any
        text would be; stderr, checked when the server stops, must hold none of them."""
        part = KEYS["A"][2:14]
        calls = [
            ("search", {"query": f"q {part}", "index": part}),
            ("search", {**MCP_ARGS, "rewriter": part}),
            ("search", {**MCP_ARGS, "teacher": part, "rewriter": "rerank"}),
            ("search", {**MCP_ARGS, "hits": part}),
            ("get_document", {"docid": part, "index": DENSE}),
            ("get_index", {"index_name": part}),
            ("list_indexes", {"index_type": part}),
            ("get_qrels", {"index_name": DENSE, "query_id": part}),
            ("eval_hits", {"index_name": DENSE, "metric": part, "query_id": "1", "hits": {part: 1.0}}),
            ("fuse_search_results", {"hits1": [{"docid": part, "score": "x"}], "hits2": []}),
            (part, {}),
        ]
        if "mcp-options" in self.features:
            calls.append(("search", {**MCP_ARGS, "options": {part: part}}))
        statuses = []
        for tool, args in calls:
            reply = server.send(
                request("POST", "/mcp/", [*MCP_HEADERS, ("X-API-Key", KEYS["B"])], mcp_body(tool, args), server.host)
            )
            statuses.append(reply.status)
        for target in (
            f"{SEARCH}?{q(query='a', rewriter=part)}",
            f"/v1/{part}/doc/{part}",
            f"{SEARCH}?{q(query='a', hits=part)}",
            f"/v1/status?{part}={part}",
        ):
            statuses.append(server.get(target, "B").status)
        log_checks, seen = self.log_checks(server, len(statuses), "B", None)
        self.record(
            "keys",
            "12 characters of a key in every MCP argument and REST parameter",
            server.name,
            f"{len(statuses)} requests holding {part!r}-like parts",
            "refused or answered as any text; no 5xx; the log masks every part (stderr checked at the end)",
            {"statuses": statuses, **seen},
            [(f"no 5xx ({statuses})", all(0 < s < 500 for s in statuses)), *log_checks],
        )

    def big_mcp_body(self, server: Server) -> None:
        """A body near 1 MB of 60,000 small arguments: answered, and another client is not held up meanwhile."""
        arguments = {f"a{i}": i for i in range(60_000)} | {"query": "bone", "index": DENSE}
        body = mcp_body("search", arguments)
        data = request("POST", "/mcp/", [*MCP_HEADERS, ("X-API-Key", KEYS["A"])], body, server.host)
        big: list[Reply] = []
        thread = threading.Thread(target=lambda: big.append(server.send(data)))
        thread.start()
        time.sleep(0.05)
        other = server.get("/v1/status", "B")
        thread.join()
        lines = server.new_log()
        longest = max((len(line) for line in lines), default=0)
        self.record(
            "bounded-work",
            "an MCP body of 60,000 arguments (1 MB)",
            server.name,
            f"tools/call search with 60,000 arguments ({len(body)} bytes) and, meanwhile, /v1/status",
            "bounded by the 1 MB body: answered or refused without a 5xx; another client answered within 2 s",
            {
                "status": big[0].status,
                "seconds": round(big[0].seconds, 2),
                "other_seconds": round(other.seconds, 2),
                "log_records": len(lines),
                "longest_log_line": longest,
            },
            [
                (f"no 5xx ({big[0].status})", 0 < big[0].status < 500),
                (
                    f"another client answered within 2 s ({other.seconds:.2f})",
                    other.status == 200 and other.seconds < 2,
                ),
                (f"one record each ({len(lines)})", len(lines) == 2),
            ],
        )

    def stray_files(self, server: Server, allowed: set[str]) -> None:
        """What the requests wrote: nothing under the data directory but the server's own files."""
        found = sorted(str(p.relative_to(server.data)) for p in server.data.rglob("*"))
        top = {p.split("/")[0] for p in found}
        stray = sorted(top - allowed)
        outside = sorted(
            p.name
            for p in server.data.parent.iterdir()
            if p.name not in {"data", "keys", "requests.jsonl", "stderr.txt", "server.yaml"}
        )
        self.record(
            "own",
            "requests write nothing but the server's own files",
            server.name,
            "(every request to this server)",
            "index names, teachers, qids and docids from requests name no "
            "file; only score stores and the lock under the data directory",
            {"files": found[:20], "outside": outside},
            [(f"no stray file ({stray})", not stray), (f"nothing beside the data directory ({outside})", not outside)],
        )

    def rates(self) -> None:
        """--requests-per-minute 5: per key; without a valid key, per address (127.0.0.x, each its own)."""
        server = Server(self, "rate", ["--index", str(self.dense), "--requests-per-minute", "5", "--no-mcp"]).start()

        sent: list[str] = []

        def burst(n, source=None, **kw):
            out = []
            for i in range(n):
                headers = [(k, fill(v, server).replace("{i}", str(i))) for k, v in kw.get("headers", ())]
                data = request("GET", kw.get("target", "/v1/status"), headers, host=kw.get("host", server.host))
                sent.append(f"{n} x from {source or '127.0.0.1'}: " + data.decode("utf-8", "replace"))
                out.append(server.send(data, source))
            return out

        def case(name, replies, expected, want_last=429, extra=()):
            codes = [r.status for r in replies]
            retry = replies[-1].headers.get("retry-after")
            checks = [(f"the last is {want_last} ({codes})", codes[-1] == want_last)]
            if want_last == 429:
                checks.append((f"Retry-After in [1, 60] ({retry})", retry is not None and 1 <= int(retry) <= 60))
            log_checks, seen = self.log_checks(server, len(replies), None, None)
            self.record(
                "rates",
                name,
                server.name,
                " ... ".join(dict.fromkeys([sent[0], sent[-1]])) if sent else f"{len(replies)} requests",
                expected,
                {"statuses": codes, **seen},
                checks + list(extra) + log_checks,
            )
            sent.clear()

        try:  # the XFF case first, from 127.0.0.1, whose minute nothing else has spent
            case(
                "X-Forwarded-For does not make one address many",
                burst(6, headers=[("X-API-Key", "wrong-key-{i}-0123456789"), ("X-Forwarded-For", "10.9.8.{i}")]),
                "per client address: the sixth refused request from one address in a minute gets 429, whatever "
                "X-Forwarded-For claims",
            )
            case(
                "a key's sixth request in a minute",
                burst(6, headers=[("X-API-Key", "<<A>>")]),
                "429 with Retry-After past the key's rate",
            )
            case(
                "another key has its own minute",
                burst(1, headers=[("X-API-Key", "<<B>>")]),
                "served: the rate is per key",
                want_last=200,
            )
            case(
                "Bearer and X-API-Key are one key's minute",
                burst(1, headers=[("Authorization", "Bearer <<A>>")]),
                "429: the same key",
                want_last=429,
            )
            case(
                "wrong keys count against the address",
                burst(6, "127.0.0.2", headers=[("X-API-Key", NOT_KEY)]),
                "the sixth refused request from an address gets 429",
            )
            case(
                "foreign Hosts count against the address",
                burst(5, "127.0.0.3", host="evil.example.com")
                + burst(1, "127.0.0.3", headers=[("X-API-Key", NOT_KEY)]),
                "a 421 counts against its address's minute",
            )
            case(
                "foreign Origins count against the address",
                burst(5, "127.0.0.4", headers=[("X-API-Key", "<<D>>"), ("Origin", "http://evil.example.com")])
                + burst(1, "127.0.0.4", headers=[("X-API-Key", NOT_KEY)]),
                "a 403 counts against its address's minute",
            )
            case(
                "refusals for a key outside its header count too",
                burst(6, "127.0.0.5", target=f"/v1/status?{q(k=KEYS['A'])}", headers=[("X-API-Key", "<<Q>>")]),
                "a request refused for its key counts against the minute (its key's or its address's)",
            )
            case(
                "no key, a key in the URL: counts against the address",
                burst(6, "127.0.0.6", target=f"/v1/status?{q(k=KEYS['A'])}"),
                "401s count against the address",
            )
            other = server.send(request("GET", "/v1/status", [("X-API-Key", KEYS["B"])], host=server.host), "127.0.0.2")
            case("a valid key from a spent address is served", [other], "the key's own minute", want_last=200)
        finally:
            self.finish(server)

    def quota(self) -> None:
        """--judged-per-day 3 with --budget 10 (every policy query judged)."""
        server = Server(
            self,
            "quota",
            ["--index", str(self.dense), *self.teacher_args(), "--judged-per-day", "3", "--budget", "10"],
        ).start()
        judged = {"rewriter": "rerank", "teacher": TEACHER, "depth": 5, "hits": 5}

        def ask(key, text, **params):
            return server.get(SEARCH, key, query=text, **params)

        def case(name, reply: Reply, expected, status, extra=()):
            body = reply.json() or {}
            checks = [(f"status {reply.status} (want {status})", reply.status == status), *extra]
            log_checks, seen = self.log_checks(server, 1, None, None)
            self.record(
                "quota",
                name,
                server.name,
                name,
                expected,
                {
                    "status": reply.status,
                    "retry_after": reply.headers.get("retry-after"),
                    "teacher": body.get("teacher"),
                    "teacher_calls": body.get("teacher_calls"),
                    "body": redacted(reply.text, 200),
                    **seen,
                },
                checks + log_checks,
            )

        try:
            for i in range(3):
                case(f"A's judged query {i + 1} of 3", ask("A", f"judged query {i}", **judged), "within the day", 200)
            r = ask("A", "judged query 3", **judged)
            case(
                "A's fourth judged query",
                r,
                "429 with Retry-After past the day's quota",
                429,
                [
                    (
                        f"Retry-After about a day ({r.headers.get('retry-after')})",
                        int(r.headers.get("retry-after", 0)) > 80_000,
                    )
                ],
            )
            case(
                "A's fourth, the teacher named by its spec",
                ask("A", "judged query 4", **{**judged, "teacher": f"openai:{self.judge_url}"}),
                "the same teacher, the same day",
                429,
            )
            case(
                "A's fourth as Bearer",
                server.send(
                    request(
                        "GET",
                        f"{SEARCH}?{q(query='judged 5', **judged)}",
                        [("Authorization", f"Bearer {KEYS['A']}")],
                        host=server.host,
                    )
                ),
                "the same key",
                429,
            )
            case(
                "A's explorer query (names a teacher)",
                server.get(f"/v1/{DENSE}/explain", "A", query="explained"),
                "the explorer's judged query counts against the day",
                429,
            )
            reply = server.send(
                request(
                    "POST",
                    "/mcp/",
                    [*MCP_HEADERS, ("X-API-Key", KEYS["A"])],
                    mcp_body("search", {**MCP_ARGS, "rewriter": "rerank", "teacher": TEACHER, "depth": 5}),
                    server.host,
                )
            )
            outcome, text = mcp_outcome(reply)
            server.new_log()
            self.record(
                "quota",
                "A's judged MCP search past the day",
                server.name,
                "tools/call search, rerank with the teacher",
                "refused: the day's quota holds over MCP too",
                {"status": reply.status, "outcome": outcome, "text": redacted(text, 200)},
                [(f"a tool error naming the quota ({outcome})", outcome == "error" and "judged queries" in text)],
            )
            r = ask("A", "a policy query past the day")
            body = r.json() or {}
            case(
                "A's policy query past the day: served unjudged",
                r,
                "200, judged by nobody",
                200,
                [
                    (f"teacher None ({body.get('teacher')})", body.get("teacher") is None),
                    (f"no teacher calls ({body.get('teacher_calls')})", body.get("teacher_calls") == 0),
                ],
            )
            r = ask("B", "B's judged query", **judged)
            case("B's judged query: its own day", r, "served", 200)
            r = ask("B", "B's policy query")
            case(
                "B's policy query: judged",
                r,
                "the policy judges within B's day",
                200,
                [("judged", (r.json() or {}).get("teacher_calls", 0) > 0)],
            )
            self.judge.body = "not json"  # the teacher fails
            try:
                r = ask("B", "a query the teacher cannot judge", **judged)
            finally:
                self.judge.body = None
            case(
                "B's query the teacher failed on",
                r,
                "refused (the doc names 502 for a teacher that scores nothing; a failing teacher is not named)",
                r.status,
                [(f"refused ({r.status})", r.status >= 400)],
            )
            self.record(
                "own",
                "a failing teacher's refusal names no teacher URL",
                server.name,
                "a judged request while the teacher answers garbage",
                "teachers are named by their label, never their URL or path (as listings and the unknown-teacher "
                "refusal name them)",
                {"status": r.status, "body": redacted(r.text, 300)},
                [("no URL of the teacher in the answer", self.judge_url.split("/v1")[0] not in r.text)],
            )
            case(
                "B's third judged query (the failed one not counted)",
                ask("B", "B's third", **judged),
                "served: a query judged by nobody costs nothing",
                200,
            )
            case("B's fourth judged query", ask("B", "B's fourth", **judged), "429", 429)
        finally:
            self.finish(server)

    def slow(self) -> None:
        """Time and connections: a 504'd search stops, a client that leaves stops its search (REST, the explorer,
        MCP), idle, half-sent and slow connections are closed."""
        server = Server(
            self,
            "slow",
            [
                "--index",
                str(self.dense),
                "--teacher",
                "dense",
                "--timeout",
                "6",
                "--max-iterations",
                "100000",
                "--batch-window",
                "0",
            ],
            keys=(),
        )
        slow = {
            "rewriter": "tour-soft",
            "teacher": "dense",
            "depth": "40",
            "iterations": "100000",
            "no-early-stop": "true",
        }
        server.start()

        def connect():
            return socket.create_connection(("127.0.0.1", server.port), timeout=30)

        def quick(limit: float) -> tuple[bool, float]:
            reply = server.get(SEARCH, None, query="protein folding", hits=3)
            return reply.status == 200 and reply.seconds < limit, round(reply.seconds, 2)

        def log_status(status: int, route: str = "/search", wait: float = 5.0) -> list:
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                found = [json.loads(x) for x in server.log.read_text().splitlines() if is_json(x)]
                found = [r for r in found if r["status"] == status and r["route"].endswith(route)]
                if found:
                    return found
                time.sleep(0.1)
            return []

        watched: dict[str, list] = {}

        def watch(label: str, sock: socket.socket, limit: float, trickle: bytes | None = None) -> None:
            start = time.monotonic()
            if trickle:  # a byte a second, never the whole request

                def send_slowly():
                    for b in trickle:
                        try:
                            sock.sendall(bytes([b]))
                        except OSError:
                            return
                        time.sleep(1.0)

                threading.Thread(target=send_slowly, daemon=True).start()
            closed = closes_within(sock, limit)
            watched[label] = [None if closed is None else round(time.monotonic() - start, 1), limit]

        try:
            sockets = {
                "an idle connection (nothing sent)": (connect(), None, 12.5),
                "half a request line": (connect(), b"GET /v1/sta", 12.5),
                "headers never finished": (connect(), b"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n", 12.5),
                "a body never finished (MCP)": (
                    connect(),
                    b"POST /mcp/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    b"Content-Type: application/json\r\nContent-Length: 1000\r\n"
                    b'\r\n{"jsonrpc"',
                    12.5,
                ),
                "a GET announcing 100 MB of body": (
                    connect(),
                    b"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000000\r\n\r\n" + b"x" * 1000,
                    12.5,
                ),
            }
            threads = []
            for label, (sock, first, limit) in sockets.items():
                if first:
                    sock.sendall(first)
                threads.append(threading.Thread(target=watch, args=(label, sock, limit)))
            threads.append(
                threading.Thread(
                    target=watch,
                    args=(
                        "slowloris: a header byte a second",
                        connect(),
                        12.5,
                        b"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 60,
                    ),
                )
            )
            many = [connect() for _ in range(50)]
            threads += [threading.Thread(target=watch, args=(f"idle {i}", s, 12.5)) for i, s in enumerate(many)]
            keep = connect()
            keep.sendall(request("GET", "/v1/status", host=server.host, close=False))
            keep.recv(65536)  # the answer; then the connection idles
            threads.append(threading.Thread(target=watch, args=("an idle keep-alive connection", keep, 7.0)))
            for t in threads:
                t.start()
            # a 504: the search stops at its next step, and the searching thread is free at once
            reply = server.get(SEARCH, None, query="protein folding", **slow)
            ok, seconds = quick(5.0)
            self.record(
                "bounded-work",
                "a search past --timeout gets 504 and stops",
                server.name,
                "tour-soft, 100,000 iterations, --timeout 6; then a plain search",
                "504 at the timeout; the next search answered within 5 s",
                {"status": reply.status, "seconds": round(reply.seconds, 1), "next_search_seconds": seconds},
                [(f"504 ({reply.status})", reply.status == 504), ("the next search within 5 s", ok)],
            )
            during = quick(3.0)
            for label, route, params in (
                ("REST", "search", {**slow, "query": "protein folding again"}),
                ("the explorer", "explain", {**slow, "rewriter": "tour-hard", "query": "protein folding once more"}),
            ):
                with connect() as gone:
                    gone.sendall(request("GET", f"/v1/{DENSE}/{route}?{q(**params)}", host=server.host))
                    time.sleep(0.3)
                found = log_status(499, route)
                ok, seconds = quick(5.0)
                self.record(
                    "bounded-work",
                    f"a client that leaves stops its search ({label})",
                    server.name,
                    f"{route} of 100,000 iterations, the connection closed after 0.3 s",
                    "499 in the log before the timeout; the next search answered within 5 s",
                    {"log_499": len(found), "next_search_seconds": seconds},
                    [("499 logged", bool(found)), ("the next search within 5 s", ok)],
                )
            with connect() as gone:
                call = mcp_body(
                    "search",
                    {
                        "query": "protein folding over mcp",
                        "index": DENSE,
                        "rewriter": "tour-soft",
                        "teacher": "dense",
                        "depth": 40,
                        "options": {"iterations": 100000, "no-early-stop": True},
                    },
                )
                gone.sendall(request("POST", "/mcp/", MCP_HEADERS, call, server.host))
                time.sleep(0.3)
            ok, seconds = quick(3.0)
            self.record(
                "bounded-work",
                "a client that leaves stops its search (MCP)",
                server.name,
                "MCP search of 100,000 iterations (options), the connection closed after 0.3 s",
                "the next search answered within 3 s, not at the 6 s timeout",
                {"next_search_seconds": seconds},
                [("the next search within 3 s", ok)],
                needs="mcp-options",
            )
            reply = server.send(request("GET", f"{SEARCH}?query=" + "a" * 5 * 2**20, host=server.host))
            after = quick(5.0)
            self.record(
                "bounded-work",
                "a 5 MB request line",
                server.name,
                "GET with a 5 MB URL",
                "refused (4xx) or closed, never searched; the server answers after",
                {"status": reply.status, "next_search_seconds": after[1]},
                [
                    (f"not served ({reply.status})", reply.status != 200 and reply.status < 500),
                    ("the server answers after", after[0]),
                ],
            )
            for t in threads:
                t.join()
            self.record(
                "bounded-work",
                "a search while 50 idle connections are held",
                server.name,
                "50 idle connections, then searches",
                "answered (the idle connections hold no worker)",
                {"search_seconds": during[1]},
                [("answered within 3 s", during[0])],
            )
            for label, (closed, limit) in watched.items():
                if label.startswith("idle ") and label != "idle 0":
                    continue
                if label == "idle 0":
                    closed_all = [watched[f"idle {i}"][0] for i in range(50)]
                    label, closed = "50 idle connections at once", max((c or 99) for c in closed_all)
                rule = (
                    "an idle keep-alive connection is closed after 5 s"
                    if "keep-alive" in label
                    else ("a connection has 10 seconds to send a whole request")
                )
                self.record(
                    "bounded-work",
                    f"closed: {label}",
                    server.name,
                    label,
                    rule,
                    {"closed_after_s": closed, "limit_s": limit},
                    [(f"closed within {limit} s ({closed})", closed is not None and closed <= limit)],
                )
        finally:
            self.finish(server)

    def data_dir(self) -> None:
        """--max-data-mb: a burst of concurrent judged requests, and a learning server, stay within the bound."""
        bound = 0.2
        server = Server(
            self, "data", ["--index", str(self.dense), *self.teacher_args(), "--max-data-mb", str(bound)], keys=()
        ).start()
        try:
            peak, stop = [0, []], threading.Event()
            threading.Thread(target=sample_size, args=(server.data, peak, stop), daemon=True).start()

            def judged(i):
                return server.get(
                    SEARCH,
                    None,
                    query=f"burst query {i} on bone density",
                    rewriter="rerank",
                    teacher=TEACHER,
                    depth=50,
                    hits=5,
                ).status

            with ThreadPoolExecutor(8) as pool:
                statuses = list(pool.map(judged, range(40)))
            stop.set()
            final = dir_size(server.data)
            limit = bound * 2**20
            server.new_log()
            self.record(
                "data-dir",
                "a burst of 40 judged requests stays within --max-data-mb",
                server.name,
                "40 distinct rerank queries, depth 50, 8 at once, --max-data-mb 0.2",
                "the directory never past its bound (sampled every 2 ms, journals included), and at the end",
                {
                    "peak_bytes": peak[0],
                    "files_at_peak": peak[1],
                    "final_bytes": final,
                    "bound_bytes": int(limit),
                    "statuses": {s: statuses.count(s) for s in set(statuses)},
                },
                [
                    (f"peak {peak[0]} <= {int(limit)}", peak[0] <= limit),
                    (f"final {final} <= {int(limit)}", final <= limit),
                    ("every answer 200 or 507", set(statuses) <= {200, 507}),
                    ("some were judged", 200 in statuses),
                ],
            )
            store = next(server.data.glob("scores/*.sqlite"))
            db = sqlite3.connect(store)
            rows = [n for (n,) in db.execute("SELECT COUNT(*) FROM scores GROUP BY query")]
            integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
            db.close()
            self.record(
                "data-dir",
                "the score store is sound after the burst",
                server.name,
                "(the burst)",
                "skipped writes leave the store whole: it passes SQLite's integrity check (scores are stored as they "
                "arrive, so a query may keep part of its 50)",
                {"rows_per_query": sorted(set(rows)), "queries": len(rows), "integrity": integrity},
                [("integrity ok", integrity == "ok")],
            )
            for name, params, want, rule in (
                (
                    "a judged request once full",
                    {"rewriter": "rerank", "teacher": TEACHER, "depth": 5},
                    507,
                    "507: no query is judged",
                ),
                ("the explorer once full", None, 507, "507: the explorer's query is judged"),
                ("a plain search once full", {}, 200, "searching goes on"),
            ):
                if params is None:
                    reply = server.get(f"/v1/{DENSE}/explain", None, query="explained")
                else:
                    reply = server.get(SEARCH, None, query=f"{name} bone density", **params)
                log_checks, seen = self.log_checks(server, 1, "anonymous", None)
                self.record(
                    "data-dir",
                    name,
                    server.name,
                    name,
                    rule,
                    {"status": reply.status, "body": redacted(reply.text, 200), **seen},
                    [(f"status {reply.status} (want {want})", reply.status == want), *log_checks],
                )
            reply = server.send(
                request(
                    "POST",
                    "/mcp/",
                    MCP_HEADERS,
                    mcp_body("search", {**MCP_ARGS, "rewriter": "rerank", "teacher": TEACHER, "depth": 5}),
                    server.host,
                )
            )
            outcome, text = mcp_outcome(reply)
            self.record(
                "data-dir",
                "an MCP judged search once full",
                server.name,
                "tools/call search, rerank",
                "refused: the directory is full",
                {"outcome": outcome, "text": redacted(text, 200)},
                [("refused", outcome == "error" and "full" in text)],
            )
            status = server.status(None)
            data = status.get("data") or {}
            self.record(
                "data-dir",
                "/v1/status says the writes refused",
                server.name,
                "GET /v1/status",
                "data: used and writes refused",
                {"data": data},
                [
                    ("writes_refused > 0", (data.get("writes_refused") or 0) > 0),
                    ("used within the bound", (data.get("used_mb") or 99) <= bound),
                ],
                needs="status-data",
            )
        finally:
            self.finish(server)
        bound = 0.1
        server = Server(
            self,
            "data-learn",
            [
                "--index",
                str(self.dense),
                *self.teacher_args(),
                "--budget",
                "10",
                "--learn",
                "query",
                "--max-key-share",
                "1",
                "--max-data-mb",
                str(bound),
                "--no-mcp",
            ],
        ).start()
        try:
            peak, stop = [0, []], threading.Event()
            threading.Thread(target=sample_size, args=(server.data, peak, stop), daemon=True).start()
            topics = [line.split("\t")[1].strip() for line in TOPICS.read_text().splitlines()[:80]]

            def policy(i):
                reply = server.get(SEARCH, "AB"[i % 2], query=topics[i], hits=3)
                return reply.status, (reply.json() or {}).get("teacher")

            with ThreadPoolExecutor(8) as pool:
                answers = list(pool.map(policy, range(80)))
            time.sleep(2.0)  # the refits in flight
            stop.set()
            final, limit = dir_size(server.data), bound * 2**20
            learn = server.data / "learn"
            rewards = (learn / "rewards.jsonl").read_text().splitlines() if (learn / "rewards.jsonl").exists() else []
            loads = [is_state(p) for p in learn.glob("state-*.safetensors")]
            partial = list(learn.glob("*.partial"))
            after = server.get(SEARCH, "A", query="a policy query once the directory is full", hits=3).json() or {}
            server.new_log()
            self.record(
                "data-dir",
                "a learning server stays within --max-data-mb",
                server.name,
                "80 policy queries of two keys, 8 at once (--budget 10 --learn query), --max-data-mb 0.1",
                "score stores, rewards and states within the bound at every sample and at the end; what "
                "was written whole; once full, no query judged",
                {
                    "peak_bytes": peak[0],
                    "files_at_peak": peak[1],
                    "final_bytes": final,
                    "bound_bytes": int(limit),
                    "rewards_lines": len(rewards),
                    "states": len(loads),
                    "judged": sum(1 for _, t in answers if t),
                    "after_full_teacher": after.get("teacher"),
                },
                [
                    (f"peak {peak[0]} <= {int(limit)}", peak[0] <= limit),
                    (f"final {final} <= {int(limit)}", final <= limit),
                    ("every answer 200", all(s == 200 for s, _ in answers)),
                    ("every rewards line parses", all(is_json(x) for x in rewards)),
                    ("every state loads", all(loads)),
                    ("no .partial left", not partial),
                    ("once full, served unjudged", after.get("teacher") is None),
                ],
            )
        finally:
            self.finish(server)

    def learning(self) -> None:
        """Who teaches the learner, and what a restart serves: --budget 10 --learn query, the fake judge."""
        work = self.work / "learning"
        shutil.rmtree(work, ignore_errors=True)
        args = ["--index", str(self.dense), "--budget", "10", "--no-mcp"]
        texts = [line.split("\t")[1].strip() for line in TOPICS.read_text().splitlines()[:12]]

        def server(name, keys, extra, data, scope="query"):
            return Server(self, f"learn-{name}", [*args, "--learn", scope, *extra], keys=keys, data=data).start()

        def settle(s: Server, key) -> dict:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                learning = s.status(key).get("learning") or {}
                if learning.get("rewards_fitted", 0) >= learning.get("rewards_received", 0):
                    return learning
                time.sleep(0.3)
            return learning

        def states(data: Path) -> dict[int, dict]:
            out = {}
            for p in sorted((data / "learn").glob("state-*.safetensors")):
                meta = state_metadata(p)
                if meta is not None:
                    out[int(p.stem.split("-")[1])] = meta
            return out

        def clients_of(meta: dict):
            return meta.get("provenance", {}).get("online", {}).get("clients")

        def rewards(data: Path) -> list[dict]:
            path = data / "learn" / "rewards.jsonl"
            return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []

        keyed = work / "keyed"
        s = server("1-both-keys", ("A", "B"), [*self.teacher_args(), "--max-key-share", "1"], keyed)
        try:
            for i, text in enumerate(texts[:3]):  # both clients send the same qids: each query is its client's
                for key in ("A", "B"):
                    s.get(SEARCH, key, query=text, qid=f"q{i}", hits=3)
            learning = settle(s, "A")
        finally:
            self.finish(s)
        logged, saved = rewards(keyed), states(keyed)
        newest = saved[max(saved)] if saved else {}
        files = "".join(p.read_text(errors="replace") for p in (keyed / "learn").glob("*.jsonl"))
        files += "".join(json.dumps(m) for m in saved.values())
        self.record(
            "learning",
            "keyed clients teach; rewards and states name them by fingerprint",
            s.name,
            "keys A and B send 3 judged policy queries each (the same qids), --max-key-share 1",
            "each reward records its client (a fingerprint) and teacher; a state records every client it "
            "was learned from, its teacher and --max-key-share; no key on disk",
            {
                "rewards_received": learning.get("rewards_received"),
                "reward_clients": sorted({r.get("client") for r in logged}),
                "versions": sorted(saved),
                "newest_provenance": (newest.get("provenance") or {}).get("online"),
            },
            [
                (f"6 rewards ({learning.get('rewards_received')})", learning.get("rewards_received") == 6),
                ("rewards name A and B by fingerprint", {r.get("client") for r in logged} == {FP["A"], FP["B"]}),
                ("rewards name their teacher", all(r.get("teacher") for r in logged)),
                ("the state records both clients", clients_of(newest) == sorted([FP["A"], FP["B"]])),
                (
                    "the state records its share cap",
                    (newest.get("provenance") or {}).get("online", {}).get("max_key_share") == 1.0,
                ),
                (f"no run of a key on disk ({key_runs(files)})", not key_runs(files)),
            ],
        )
        owners = [k[1].split("/")[0] for m in saved.values() for k in m.get("keys", [])]
        self.record(
            "learning",
            "no client writes another's query state (same qids)",
            s.name,
            "A and B both send qids q0, q1, q2",
            "a query state is keyed by (index, client/qid)",
            {"key_owners": sorted(set(owners))},
            [("every state key is a sender's fingerprint", bool(owners) and set(owners) <= {FP["A"], FP["B"]})],
        )

        def restart(name, keys, extra, rule, *, allowed, sender="B"):
            """Restart on the same directory and check the state it serves, and the rewards it uses."""
            before = set(states(keyed))
            s = server(name, keys, extra, keyed)
            try:
                first = s.status(sender).get("learning") or {}
                answer = s.get(SEARCH, sender, query=texts[6], qid="after-restart", hits=3).json() or {}
                served = (answer.get("state") or {}).get("version", 0)
                settled = settle(s, sender)
            finally:
                self.finish(s)
            saved = states(keyed)
            meta = saved.get(served, {}) if served else {}
            learned_from = clients_of(meta)
            ok_state = served == 0 or (served not in before and allowed(meta))
            self.record(
                "learning",
                rule,
                s.name,
                f"restart with {name}; key {sender} sends a policy query",
                "a restart serves no state learned from others, another teacher, or a looser share cap",
                {
                    "versions_before": sorted(before),
                    "served_version": served,
                    "served_clients": learned_from,
                    "served_share": (meta.get("provenance") or {}).get("online", {}).get("max_key_share"),
                    "rewards_received_at_start": first.get("rewards_received"),
                    "after": {k: settled.get(k) for k in ("version", "rewards_received", "fits")},
                    "warnings": [x[-160:] for x in s.stderr().splitlines() if "serving" in x or "unused" in x],
                },
                [(f"the served state ({served}) may be served under the restarted server's rules", ok_state)],
            )
            return first, settled

        first, _ = restart(
            "key A removed from the key file",
            ("B",),
            [*self.teacher_args(), "--max-key-share", "1"],
            "restart without A's key: no state learned from A served",
            allowed=lambda m: clients_of(m) == [FP["B"]],
        )
        self.record(
            "learning",
            "restart without A's key: A's rewards unused",
            "learn-key A removed from the key file",
            "(the restart above)",
            "rewards of a client no longer trusted stay in the log, unused",
            {"rewards_received": first.get("rewards_received")},
            [(f"3 rewards used, B's ({first.get('rewards_received')})", first.get("rewards_received") == 3)],
        )
        first, _ = restart(
            "another first teacher (dense)",
            ("A", "B"),
            ["--teacher", "dense", "--max-key-share", "1"],
            "restart with another teacher: no state of the first served",
            allowed=lambda m: False,
        )
        self.record(
            "learning",
            "restart with another teacher: the first's rewards unused",
            "learn-another first teacher (dense)",
            "(the restart above)",
            "rewards of another teacher stay in the log, unused",
            {"rewards_received": first.get("rewards_received")},
            [(f"0 rewards used ({first.get('rewards_received')})", first.get("rewards_received") == 0)],
        )
        restart(
            "a smaller --max-key-share (0.5)",
            ("A", "B"),
            [*self.teacher_args(), "--max-key-share", "0.5"],
            "restart with a smaller share cap: no state fitted under a larger one served",
            allowed=lambda m: (m.get("provenance") or {}).get("online", {}).get("max_key_share", 1) <= 0.5,
        )
        # the cap itself: A sends many more than B; a refit takes at most half its queries from A
        s = server("share-0.5", ("A", "B"), [*self.teacher_args(), "--max-key-share", "0.5"], keyed)
        try:
            for i, text in enumerate(texts):
                s.get(SEARCH, "A", query=text, qid=f"a-more-{i}", hits=3)
            settle(s, "A")
        finally:
            self.finish(s)
        saved = states(keyed)
        newest = saved[max(saved)] if saved else {}
        owners = [k[1].split("/")[0] for k in newest.get("keys", [])]
        share = max((owners.count(o) / len(owners) for o in set(owners)), default=0.0)
        self.record(
            "learning",
            "--max-key-share 0.5: one client's share of a refit is capped",
            s.name,
            "A sends 12 more judged queries than B",
            "a refit takes at most 0.5 of its queries from any client",
            {
                "newest_version": max(saved) if saved else None,
                "fitted_keys": len(owners),
                "largest_share": round(share, 3),
            },
            [(f"largest share {share:.2f} <= 0.5", bool(owners) and share <= 0.5)],
        )
        # anonymous clients: taught only with --learn-from-anonymous, and a restart without it serves none of it
        for label, extra, kept in (
            ("default (no --learn-from-anonymous)", [], 0),
            ("--learn-from-anonymous", ["--learn-from-anonymous"], 3),
        ):
            data = work / ("anonymous" if kept else "open")
            s = server(f"anonymous {kept}", (), [*self.teacher_args(), "--max-key-share", "1", *extra], data)
            try:
                answers = [s.answer(SEARCH, None, query=t, qid=f"anon-{i}", hits=3) for i, t in enumerate(texts[:3])]
                learning = settle(s, None)
            finally:
                self.finish(s)
            logged = rewards(data)
            self.record(
                "learning",
                f"anonymous clients teach: {label}",
                s.name,
                "3 judged policy queries without a key",
                "anonymous clients teach only with --learn-from-anonymous (all of them one client)",
                {
                    "judged": [a.get("teacher_calls") for a in answers],
                    "rewards_received": learning.get("rewards_received"),
                    "rewards_lines": len(logged),
                },
                [
                    ("judged either way", all(a.get("teacher_calls") for a in answers)),
                    (
                        f"{kept} rewards kept ({learning.get('rewards_received')})",
                        learning.get("rewards_received") == kept and len(logged) == kept,
                    ),
                    ("kept as 'anonymous'", all(r.get("client") == "anonymous" for r in logged)),
                ],
            )
        data = work / "anonymous"
        before = set(states(data))
        s = server("anonymous restart without the flag", (), [*self.teacher_args(), "--max-key-share", "1"], data)
        try:
            start = s.status(None).get("learning") or {}
            answer = s.answer(SEARCH, None, query=texts[8], qid="anon-after", hits=3)
            settled = settle(s, None)
        finally:
            self.finish(s)
        served = (answer.get("state") or {}).get("version", 0)
        self.record(
            "learning",
            "restart without --learn-from-anonymous: nothing learned from them served",
            s.name,
            "restart of the anonymous-learning directory without the flag; an anonymous policy query",
            "no state learned from anonymous clients served, their rewards unused, the new one not kept",
            {
                "versions_on_disk": sorted(before),
                "served_version": served,
                "rewards_received_at_start": start.get("rewards_received"),
                "after": settled.get("rewards_received"),
                "rewards_lines": len(rewards(data)),
            },
            [
                (f"state version 0 served ({served})", served == 0),
                (f"no reward used ({start.get('rewards_received')})", start.get("rewards_received") == 0),
                ("the new judged query not kept", len(rewards(data)) == 3),
            ],
        )
        # the task scope (its states served only with a cross-validated alpha): the same rules on restart
        data = work / "task"
        s = server("task both keys", ("A", "B"), [*self.teacher_args(), "--max-key-share", "1"], data, "task")
        try:
            for i, text in enumerate(texts):
                s.get(SEARCH, "AB"[i % 2], query=text, qid=f"t{i}", hits=3)
            learning = settle(s, "A")
        finally:
            self.finish(s)
        before = states(data)
        self.record(
            "learning",
            "--learn task: keyed clients teach",
            s.name,
            "keys A and B send 6 judged policy queries each, --learn task --max-key-share 1",
            "every judged query of a keyed client is a reward; each state records its clients",
            {
                "rewards_received": learning.get("rewards_received"),
                "versions": sorted(before),
                "fits": learning.get("fits"),
                "last_fit": learning.get("last_fit"),
            },
            [
                (f"12 rewards ({learning.get('rewards_received')})", learning.get("rewards_received") == 12),
                ("every state records its clients", all(isinstance(clients_of(m), list) for m in before.values())),
            ],
        )
        s = server("task without A", ("B",), [*self.teacher_args(), "--max-key-share", "1"], data, "task")
        try:
            start = s.status("B").get("learning") or {}
            answer = s.answer(SEARCH, "B", query=texts[0], qid="task-after", hits=3)
            settle(s, "B")
        finally:
            self.finish(s)
        served = (answer.get("state") or {}).get("version", 0)
        meta = states(data).get(served, {}) if served else {}
        self.record(
            "learning",
            "--learn task: restart without A's key serves nothing learned from A, uses none of A's rewards",
            s.name,
            "restart with A removed from the key file; B sends a policy query",
            "no state learned from a client no longer trusted; its rewards stay in the log, unused",
            {
                "versions_before": sorted(before),
                "served_version": served,
                "served_clients": clients_of(meta),
                "rewards_received_at_start": start.get("rewards_received"),
            },
            [
                (
                    f"the served state ({served}) learned from B alone, or none",
                    served == 0 or (served not in before and clients_of(meta) == [FP["B"]]),
                ),
                (f"6 rewards used, B's ({start.get('rewards_received')})", start.get("rewards_received") == 6),
            ],
        )

    def refusals(self) -> None:
        """Flags and files that would leave a server open or misread, refused at start in one line."""
        work = self.work / "config"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        files = {
            "empty": "",
            "comments": "# the course's keys\n\n   \n# none yet\n",
            "bom": "\ufeff" + KEYS["A"] + "\n",
            "short": "short-key-15chr\n",
            "accent": "k" * 15 + "é\n",
            "space": "a key with spaces 0123\n",
        }
        for name, text in files.items():
            (work / f"keys-{name}").write_text(text, encoding="utf-8")
        configs = {
            "empty-keys": "api_keys: []\n",
            "null-keys": "api_keys:\n",
            "parent": "indexes:\n  ../up: IDX\n",
            "slash": "indexes:\n  a/b: IDX\n",
            "dots": "indexes:\n  a..b: IDX\n",
            "escape": "indexes:\n  ../../escape: IDX\n",
            "dot": "indexes:\n  .hidden: IDX\n",
            "dash": "indexes:\n  -dash: IDX\n",
            "long": f"indexes:\n  {'n' * 101}: IDX\n",
            "accent": "indexes:\n  café: IDX\n",
            "space": "indexes:\n  'a b': IDX\n",
            "percent": "indexes:\n  '%2e%2e': IDX\n",
        }
        for name, text in configs.items():
            (work / f"{name}.yaml").write_text(text.replace("IDX", str(self.dense)), encoding="utf-8")
        (work / "bad name").symlink_to(self.dense)  # an index whose directory's name cannot name a route
        base, index = ["--port", "0", "--threads", "1"], ["--index", str(self.dense)]
        cases = [
            (f"key file: {name}", [*index, "--api-keys", str(work / f"keys-{name}")], why)
            for name, why in (
                ("empty", "holds no key"),
                ("comments", "holds no key"),
                ("bom", "byte-order mark"),
                ("short", "16"),
                ("accent", "printable ASCII"),
                ("space", "16"),
            )
        ]
        cases += [
            (f"--config: {name}", ["--config", str(work / f"{name}.yaml")], why)
            for name, why in (("empty-keys", "holds no key"), ("null-keys", "holds no key"))
        ]
        cases += [
            (
                f"--config index name: {name}",
                ["--config", str(work / f"{name}.yaml"), *self.teacher_args()],
                "cannot name a route",
            )
            for name in ("parent", "slash", "dots", "escape", "dot", "long", "accent", "percent")
        ]
        cases += [
            (
                "--index whose directory's name holds a space",
                ["--index", str(work / "bad name")],
                "cannot name a route",
            ),
            ("--host 0.0.0.0 without keys", [*index, "--host", "0.0.0.0"], "reachable from other machines"),
            ("--cors '*'", [*index, "--cors", "*"], "give a web origin"),
            ("--learn-from-anonymous without --learn", [*index, "--learn-from-anonymous"], "give --learn"),
            ("--max-key-share 0", [*index, "--max-key-share", "0"], "--max-key-share"),
        ]
        env = {**os.environ, "PYTHONPATH": str(self.tree), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        for i, (name, extra, why) in enumerate(cases):
            data = work / f"data-{i}"
            before = {p.name for p in work.iterdir()}
            process = subprocess.Popen(
                [sys.executable, "-m", "tour_pyserini", "serve", *base, "--data-dir", str(data), *extra],
                cwd=self.tree,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            started: list[str] = []
            reader = threading.Thread(
                target=lambda p=process, out=started: out.append(p.stdout.readline()), daemon=True
            )
            reader.start()
            reader.join(240)
            served = bool(started and started[0].startswith("serving on"))
            if served:
                process.send_signal(signal.SIGTERM)
            try:
                _, err = process.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                process.kill()
                _, err = process.communicate()
            escaped = sorted({p.name for p in work.iterdir()} - before - {data.name})  # written beside it
            lines = [x for x in err.strip().splitlines() if x.strip()]
            checks = [
                ("refused at start (exit 2)", process.returncode == 2 and not served),
                (f"one line naming the cause ({why!r})", len(lines) == 1 and why in lines[0]),
                (f"no file written outside the data directory ({escaped})", not escaped),
            ]
            self.record(
                "config",
                name,
                "start",
                " ".join(extra).replace(str(work), "DIR"),
                "refused at start in one line",
                {
                    "exit": process.returncode,
                    "served": served,
                    "stderr": redacted(err.strip()[-300:], 300),
                    "outside": escaped,
                },
                checks,
            )

    def run(self) -> None:
        self.build_indexes()
        for step in (self.refusals, self.keyed, self.rates, self.quota, self.slow, self.data_dir, self.learning):
            started = time.perf_counter()
            try:
                step()
            except Exception as e:  # noqa: BLE001 - a step that breaks is a case that fails, the others go on
                import traceback

                traceback.print_exc()
                self.record(
                    "own",
                    f"{step.__name__}: the step ran to its end",
                    "-",
                    step.__name__,
                    "the probe's step completes",
                    {"error": redacted(f"{type(e).__name__}: {e}", 500)},
                    [("no exception", False)],
                )
            print(f"--- {step.__name__}: {time.perf_counter() - started:.0f} s", flush=True)


def is_json(line: str) -> bool:
    try:
        json.loads(line)
        return True
    except ValueError:
        return False


def dir_size(path: Path) -> int:
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:  # removed while measured
            pass
    return total


def sample_size(path: Path, peak: list, stop: threading.Event) -> None:
    """The directory's largest size while ``stop`` is not set, and its files then."""
    while not stop.is_set():
        sizes = {}
        for p in path.rglob("*"):
            try:
                if p.is_file():
                    sizes[str(p.relative_to(path))] = p.stat().st_size
            except OSError:  # removed while measured
                pass
        if sum(sizes.values()) > peak[0]:
            peak[0], peak[1] = sum(sizes.values()), sorted(sizes.items())
        time.sleep(0.002)


def state_metadata(path: Path) -> dict | None:
    from safetensors import safe_open

    try:
        with safe_open(str(path), "np") as f:
            return json.loads((f.metadata() or {}).get("ttt_embed", "{}"))
    except Exception:  # noqa: BLE001 - a state that does not load
        return None


def is_state(path: Path) -> bool:
    return state_metadata(path) is not None


# ---------------------------------------------------------------------------------------------------------------
# the report


def summary(results: dict) -> str:
    """The short report: counts per category and run, every failing case of the first run, and how the other runs
    differ from it."""
    runs = results["runs"]
    names = list(runs)
    categories = sorted({c["category"] for run in runs.values() for c in run["cases"]})

    def counts(cases):
        return " / ".join(str(sum(c["result"] == r for c in cases)) for r in ("pass", "fail", "n/a"))

    out = [
        "# `tour-pyserini serve` under an attacker's probe",
        "",
        "`python tests/serve_probe.py [--tree DIR --name NAME]` (runs/bench-serve-probe.json holds every case: what "
        "was sent, the rule, what happened): hostile requests over real HTTP to real servers, each checked against "
        "docs/serve.md's rules. Counts are pass / fail / not applicable (a feature that version lacks).",
        "",
        *[
            f"- **{n}**: {runs[n]['tree_commit']} ({len(runs[n]['cases'])} cases, {runs[n]['seconds']:.0f} s)"
            for n in names
        ],
        "",
        "| category | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
        *[
            f"| {category} | "
            + " | ".join(counts([c for c in runs[n]["cases"] if c["category"] == category]) for n in names)
            + " |"
            for category in categories
        ],
        "| **all** | " + " | ".join(counts(runs[n]["cases"]) for n in names) + " |",
    ]
    first = names[0]
    failed = [c for c in runs[first]["cases"] if c["result"] == "fail"]
    out += ["", f"## Failing on {first} ({len(failed)})", ""]
    out += [
        f"- **{c['category']}: {c['name']}** ({c['server']}): expected {c['expected']}; failed check: {c['why']}"
        for c in failed
    ]
    out += ["none"] if not failed else []
    ours = {(c["category"], c["name"], c["server"]): c["result"] for c in runs[first]["cases"]}
    for name in names[1:]:
        theirs = {(c["category"], c["name"], c["server"]): c["result"] for c in runs[name]["cases"]}
        fixed = [k for k, r in theirs.items() if r == "fail" and ours.get(k) == "pass"]
        worse = [k for k, r in theirs.items() if r == "pass" and ours.get(k) == "fail"]
        na = [k for k, r in theirs.items() if r == "n/a"]
        out += ["", f"## {name} beside {first}", ""]
        by_category = {cat: sum(k[0] == cat for k in fixed) for cat in categories}
        out.append(
            f"Failing on {name}, passing on {first}: {len(fixed)} ("
            + ", ".join(f"{cat} {n}" for cat, n in by_category.items() if n)
            + ")."
        )
        out.append(
            f"Passing on {name}, failing on {first}: {len(worse)}" + "".join(f"; {k[0]}: {k[1]}" for k in worse) + "."
        )
        out.append(f"Not applicable on {name}: {len(na)}" + "".join(f"; {k[1]}" for k in na) + ".")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", default=str(ROOT), help="the checkout whose server is probed (default: this one)")
    ap.add_argument("--name", default="current", help="the run's name in the results (default: current)")
    ap.add_argument("--work", default="/tmp/serve-probe", help="indexes, data directories and logs")
    ap.add_argument(
        "--only",
        nargs="*",
        help="run only these steps (refusals keyed rates quota slow data_dir learning); the results are not written",
    )
    args = ap.parse_args()
    tree = Path(args.tree).resolve()
    work = Path(args.work) / args.name
    for sub in ("keyed", "rate", "quota", "slow", "data", "data-learn", "learning", "config"):
        shutil.rmtree(work / sub, ignore_errors=True)
    for p in work.glob("learn-*"):
        shutil.rmtree(p, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    probe = Probe(tree, args.name, work)
    started = time.perf_counter()
    if args.only:
        probe.build_indexes()
        for step in args.only:
            getattr(probe, step)()
        (work / "only.json").write_text(json.dumps(probe.cases, indent=1, ensure_ascii=False))
        return
    probe.run()
    commit = subprocess.run(
        ["git", "-C", str(tree), "log", "-1", "--format=%h %s"], capture_output=True, text=True
    ).stdout.strip()
    results = json.loads(OUT.read_text()) if OUT.exists() else {"runs": {}}
    results["runs"][args.name] = {
        "tree_commit": commit,
        "seconds": round(time.perf_counter() - started, 1),
        "features": sorted(probe.features),
        "cases": probe.cases,
    }
    OUT.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    SUMMARY.write_text(summary(results))
    tally = {r: sum(c["result"] == r for c in probe.cases) for r in ("pass", "fail", "n/a")}
    print(f"{args.name}: {len(probe.cases)} cases, {tally}; {time.perf_counter() - started:.0f} s; wrote {OUT}")


if __name__ == "__main__":
    main()
