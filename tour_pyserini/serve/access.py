"""Who may use the server, and how much: API keys, the Host and Origin headers a request may carry, requests
per minute per client, and the JSONL request log.

Keys are Pyserini 2.x's: ``X-API-Key: KEY`` or ``Authorization: Bearer KEY``, read from a file of one key per
line or from ``api_keys`` in Pyserini's YAML server config. A key is never logged or echoed: a client is
named by its key's fingerprint (the first 12 hex digits of its SHA-256, as Pyserini's auth log names it).

The Host header must name the address served (an IP literal, or ``localhost`` on loopback) or a name given
with ``--allowed-host``, so that a web page on another name cannot reach the server by DNS rebinding; a
request with an ``Origin`` (every cross-site fetch, every browser MCP client) must come from a page of an
allowed host or from an origin given with ``--cors``.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import re
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from tour_pyserini.errors import UserError
from tour_pyserini.numbers import param, positive_int

ANONYMOUS = "anonymous"  # the client name of requests without a key, where keys are not required
PUBLIC_PATHS = ("/", "/explore", "/docs", "/openapi.json")  # the page and the API's description: no data
MAX_BODY_BYTES = 1024 * 1024  # an MCP call's JSON body; a search's parameters are in its URL
LOGGED_CHARS = 200  # each parameter's value in the request log, at most
MAX_PARAMETERS = 64  # query parameters a request may have: no route reads as many


def error(status: int, message: str, headers: dict | None = None):
    """Every refusal the server makes: one JSON line ``{"error": "..."}``."""
    from starlette.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=status, headers=headers)


def fingerprint(key: str) -> str:
    """A key's name in logs and status: not reversible, the same in every process."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


def read_api_keys(path: str | Path) -> list[str]:
    """Keys from a file of one key per line (blank lines and ``#`` comments ignored)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"--api-keys {path}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    keys = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    return check_keys(keys, f"--api-keys {path}")


def read_server_config(path: str | Path) -> tuple[dict[str, str], list[str]]:
    """Pyserini's YAML server config: ``indexes`` (name: directory, relative to the file) and ``api_keys``."""
    import yaml

    try:
        payload = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise UserError(f"--config {path}: not a readable YAML file ({type(e).__name__})") from None
    if not isinstance(payload, dict):
        raise UserError(f"--config {path}: a YAML mapping with 'indexes' and 'api_keys' was expected")
    raw_keys = payload.get("api_keys") or []
    if not isinstance(raw_keys, list) or not all(isinstance(k, str) and k.strip() for k in raw_keys):
        raise UserError(f"--config {path}: 'api_keys' must be a list of non-empty strings")
    raw_indexes = payload.get("indexes") or {}
    if not isinstance(raw_indexes, dict):
        raise UserError(f"--config {path}: 'indexes' must map names to index directories")
    indexes = {}
    for name, where in raw_indexes.items():
        if not str(name).strip() or not isinstance(where, str) or not where.strip():
            raise UserError(f"--config {path}: index {str(name)[:40]!r} must map to a directory")
        indexes[str(name)] = str((Path(path).resolve().parent / where).resolve())
    return indexes, check_keys([k.strip() for k in raw_keys], f"--config {path}")


def check_keys(keys: list[str], where: str) -> list[str]:
    for lineno, key in enumerate(keys, 1):
        if len(key) < 16 or any(c.isspace() or not c.isprintable() for c in key):
            raise UserError(f"{where}: key {lineno} must be at least 16 printable characters without spaces")
    return keys


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    return host in ("", "0.0.0.0", "::", "[::]")


HOST = re.compile(r"(?P<name>\[[0-9a-z:.%]*\]|[^:\[\]]*)(?::[0-9]+)?")  # name[:port], [v6][:port]


def host_name(header: str) -> str:
    """The name in a Host header (``name``, ``name:port``, ``[v6]:port``), lower case, without a final dot; a
    header that is not of that form is returned whole (and matches no name)."""
    header = header.strip().lower()
    found = HOST.fullmatch(header)
    if found is None:
        return header
    name = found["name"]
    return name if name.startswith("[") else name.rstrip(".")


def is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
        return True
    except ValueError:
        return False


@dataclass(frozen=True)
class HostRule:
    """Which names a request's Host header may carry: an IP address, ``localhost`` where the server listens on
    loopback (or every address), and the names given."""

    listen: str
    names: frozenset[str] = frozenset()

    def allows(self, name: str) -> bool:
        if name in self.names or is_ip_literal(name):  # an address is no name: DNS rebinding needs a name
            return True
        return name == "localhost" and (is_loopback(self.listen) or is_wildcard(self.listen))

    def allows_origin(self, origin: str, host: str, cors: Sequence[str]) -> bool:
        """A page of ``origin`` may call: the server's own origin (the request's ``host``), a page under a name
        given with --allowed-host, or an origin given with --cors."""
        netloc = urlsplit(origin).netloc.lower()
        return origin in cors or (bool(netloc) and netloc == host.strip().lower()) or host_name(netloc) in self.names


class Keys:
    """The accepted keys, compared in constant time by their SHA-256."""

    def __init__(self, keys: Iterable[str]):
        self.digests = {hashlib.sha256(k.encode("utf-8")).digest(): fingerprint(k) for k in keys}
        self.fingerprints = {k: fingerprint(k) for k in keys}  # to find a key sent where no key belongs

    def redact(self, text: str) -> str:
        """``text`` with every key in it replaced by ``<key FINGERPRINT>``."""
        for key, name in self.fingerprints.items():
            if key in text:
                text = text.replace(key, f"<key {name}>")
        return text

    def __bool__(self) -> bool:
        return bool(self.digests)

    def match(self, key: str) -> str | None:
        """The fingerprint of ``key`` if it is accepted."""
        digest = hashlib.sha256(key.encode("utf-8")).digest()
        found = None
        for known, name in self.digests.items():
            if hmac.compare_digest(known, digest):
                found = name
        return found


class RateLimit:
    """At most ``limit`` events per client in any ``seconds`` (None: no limit): requests a minute, judged
    queries a day."""

    def __init__(self, limit: int | None, seconds: float = 60.0):
        self.limit, self.seconds = limit, seconds
        self.seen: dict[str, deque[float]] = {}
        self.lock = threading.Lock()

    def retry_after(self, client: str, now: float | None = None) -> int | None:
        """Seconds until ``client`` may have another, or None (this one is counted)."""
        if self.limit is None:
            return None
        now = time.monotonic() if now is None else now
        with self.lock:
            times = self.seen.setdefault(client, deque())
            while times and times[0] <= now - self.seconds:
                times.popleft()
            if len(times) >= self.limit:
                return max(1, int(times[0] + self.seconds - now + 0.999))
            times.append(now)
            return None

    def give_back(self, client: str) -> None:
        """Uncount the last event of ``client`` (it did not happen after all)."""
        with self.lock:
            if self.seen.get(client):
                self.seen[client].pop()


class RequestLog:
    """One JSON line per answered request: time, key fingerprint, route, index, parameters, status, ms; each
    line flushed as written (the file is closed when the process ends)."""

    def __init__(self, path: str | Path):
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the server's lifetime
        self.lock = threading.Lock()

    def write(self, record: dict) -> None:
        line = json.dumps(record, ensure_ascii=False) + "\n"
        with self.lock:
            self.file.write(line)
            self.file.flush()


def bounded(params: Iterable[tuple[str, object]]) -> dict:
    """Parameters as the request log keeps them: each value cut to LOGGED_CHARS."""
    return {str(k)[:LOGGED_CHARS]: v if isinstance(v, int | float | bool) or v is None else str(v)[:LOGGED_CHARS]
            for k, v in params}  # fmt: skip


def mcp_call(body: bytes) -> dict:
    """The tool and arguments of an MCP ``tools/call`` body, for the request log (other methods: the method)."""
    try:
        message = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(message, dict):
        return {}
    params = message.get("params") if isinstance(message.get("params"), dict) else {}
    out = {"method": message.get("method")}
    if message.get("method") == "tools/call":
        out["tool"] = params.get("name")
        arguments = params.get("arguments")
        out |= bounded(arguments.items()) if isinstance(arguments, dict) else {}
    return bounded(out.items())


@dataclass(frozen=True)
class AccessConfig:
    """What :class:`Access` enforces; built once from the command line (or by a library user)."""

    keys: tuple[str, ...] = ()
    hosts: HostRule = HostRule("127.0.0.1")
    cors: tuple[str, ...] = ()
    requests_per_minute: int | None = param(None, positive_int, "requests one client (a key; without keys, an "
                                            "address) may send in any 60 seconds; more get 429",
                                            default_text="no limit")  # fmt: skip
    request_log: str | None = param(None, str, "append a JSON line per request: time, key fingerprint, route, "
                                    "index, parameters, status, milliseconds", metavar="FILE")  # fmt: skip


def header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def presented_key(scope) -> str | None:
    if key := (header(scope, b"x-api-key") or "").strip():
        return key
    auth = header(scope, b"authorization") or ""
    return auth[7:].strip() if auth[:7].lower() == "bearer " else None


def is_public(path: str) -> bool:
    return path in PUBLIC_PATHS or path.startswith("/static/")


class Access:
    """ASGI middleware: the Host and Origin checks, the key check, the rate limit and the request log, before
    any route runs. The client's name (a key's fingerprint, or ``anonymous``) is left in the request's state
    as ``client`` for the routes; ``keyed`` says whether it presented a valid key."""

    def __init__(self, app, config: AccessConfig):
        self.app, self.config = app, config
        self.keys = Keys(config.keys)
        self.rate = RateLimit(config.requests_per_minute)
        self.log = RequestLog(config.request_log) if config.request_log else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        client, refusal, logged, receive = await self.check(scope, receive)
        written = False

        def write(status: int) -> None:  # before the answer leaves: a client that has it finds its line
            nonlocal written
            if self.log is not None and not written:
                written = True
                path = scope.get("path", "")
                index = path.split("/")[2] if path.startswith("/v1/") and path.count("/") >= 3 else None
                self.log.write({"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "key": client,
                                "route": self.keys.redact(path[:200]),
                                "index": index and self.keys.redact(index[:200]), "parameters": self.redacted(logged),
                                "status": status, "ms": round(1000 * (time.perf_counter() - start), 1)})  # fmt: skip

        async def sending(message):
            if message["type"] == "http.response.start":
                write(message["status"])
            await send(message)

        try:
            if refusal is not None:
                await refusal(scope, receive, sending)
            else:
                scope.setdefault("state", {}).update(client=client, keyed=client != ANONYMOUS)
                await self.app(scope, receive, sending)
        finally:
            write(0)  # no answer was sent: the client left, or the server stopped

    async def check(self, scope, receive):
        """(client, a refusal response or None, the parameters to log, the receive to pass on). A refusal of a
        request without a valid key counts against its address's rate too, so that refusals cost a client its
        minute as answers do."""
        path = scope.get("path", "")
        address = f"address {(scope.get('client') or ('?',))[0]}"
        query = scope.get("query_string", b"")
        if query.count(b"&") >= MAX_PARAMETERS:  # counted before anything is parsed or logged
            return None, self.limited(address, error(400, f"more than {MAX_PARAMETERS} parameters")), {}, receive
        logged = bounded(parse_qsl(query.decode("latin-1"), keep_blank_values=True))
        host = header(scope, b"host") or ""
        if not self.config.hosts.allows(host_name(host)):
            refused = error(421, f"this server does not answer for host {host_name(host)[:100]!r}")
            return None, self.limited(address, refused), logged, receive
        origin = header(scope, b"origin")
        if origin is not None and not self.config.hosts.allows_origin(origin, host, self.config.cors):
            refused = error(403, f"origin {origin[:100]!r} is not allowed (the server's --cors)")
            return None, self.limited(address, refused), logged, receive
        client = ANONYMOUS
        if self.keys and not (scope["method"] == "OPTIONS" or is_public(path)):
            key = presented_key(scope)
            client = self.keys.match(key) if key else None
            if client is None:
                message = "an API key is required (X-API-Key: KEY or Authorization: Bearer KEY)" if not key else (
                    "the API key is not valid")  # fmt: skip
                refused = error(401, message, {"WWW-Authenticate": "Bearer"})
                return None, self.limited(address, refused), logged, receive
        if path.startswith("/mcp"):
            body, receive = await buffered(receive)
            if body is None:
                return client, error(413, f"the request body is larger than {MAX_BODY_BYTES} bytes"), logged, receive
            try:
                logged = mcp_call(body)
            except RecursionError:
                return client, error(400, "the request body nests too deeply"), logged, receive
        if not is_public(path):
            if (busy := self.limited(client if client != ANONYMOUS else address)) is not None:
                return client, busy, logged, receive
        return client, None, logged, receive

    def limited(self, who: str, refusal=None):
        """429 if ``who`` is past its rate (this request counted), else ``refusal`` (None: go on)."""
        if (wait := self.rate.retry_after(who)) is None:
            return refusal
        limit = self.config.requests_per_minute
        return error(429, f"more than {limit} requests a minute; retry in {wait} s", {"Retry-After": str(wait)})

    def redacted(self, params: dict) -> dict:
        """``params`` with any key in a name or value (sent where no key belongs) named by its fingerprint; the
        log keeps 200 characters of each, so a key cut there is a prefix too short to use."""
        return {self.keys.redact(k): self.keys.redact(v) if isinstance(v, str) else v for k, v in params.items()}


async def buffered(receive):
    """The whole request body (None past MAX_BODY_BYTES) and a receive that replays it."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"", receive
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None, receive
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    body = b"".join(chunks)
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return body, replay


def host_rule(listen: str, names: Sequence[str]) -> HostRule:
    return HostRule(listen, frozenset(host_name(n) for n in names))
