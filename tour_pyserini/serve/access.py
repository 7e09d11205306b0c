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
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

from tour_pyserini.errors import UserError
from tour_pyserini.numbers import param, positive_int
from tour_pyserini.ttt.online import ANONYMOUS

PUBLIC_PATHS = ("/", "/explore", "/docs", "/openapi.json")  # the page and the API's description: no data
STATIC_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}\.[a-z]{1,8}")  # the page's scripts and styles, under /static/
MAX_BODY_BYTES = 1024 * 1024  # an MCP call's JSON body; a search's parameters are in its URL
LOGGED_CHARS = 200  # each parameter's value in the request log, at most
MAX_PARAMETERS = 64  # query parameters a request may have: no route reads as many
FRAGMENT = 8  # the request log masks any run of this many of a key's characters, not only a whole key
KEY_CHARS = re.compile(r"[!-~]{16,}")  # printable ASCII without spaces: the same text whatever a header's encoding
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")  # an index's name in routes
SURROGATE = re.compile("[\ud800-\udfff]")  # half of a UTF-16 pair: JSON's escapes carry one, no text holds one
# what JSON leaves unescaped but str.splitlines() and editors split on (one request, one line of the log), and lone
# surrogates, which JSON's escapes can carry but UTF-8 cannot
ESCAPED = {c: f"\\u{c:04x}" for c in [0x85, 0x2028, 0x2029, *range(0xD800, 0xE000)]}


def error(status: int, message: str, headers: dict | None = None):
    """Every refusal the server makes: one JSON line ``{"error": "..."}``."""
    from starlette.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=status, headers=headers)


def fingerprint(key: str) -> str:
    """A key's name in logs and status: not reversible, the same in every process."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]


def read_api_keys(path: str | Path) -> list[str]:
    """Keys from a file of one key per line (blank lines and ``#`` comments ignored); a file that holds none
    is refused, since a server given no key would serve everyone."""
    where = f"--api-keys {path}"
    try:
        data = Path(path).read_bytes()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"{where}: cannot read it ({getattr(e, 'strerror', None) or e})") from None
    if data.startswith(b"\xef\xbb\xbf"):
        raise UserError(
            f"{where}: the file starts with a UTF-8 byte-order mark, which would be read as part of "
            "the first key; save it without one"
        )
    lines = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)]
    keys = [(n, key) for n, key in lines if key and not key.startswith("#")]
    if not keys:
        raise UserError(
            f"{where}: the file holds no key (only blank lines and # comments): the server would be open to everyone"
        )
    return check_keys([(f"{where}:{n}", key) for n, key in keys])


def read_server_config(path: str | Path) -> tuple[dict[str, str], list[str]]:
    """Pyserini's YAML server config: ``indexes`` (name: directory, relative to the file) and ``api_keys``
    (refused when given but empty: a server given no key would serve everyone)."""
    import yaml

    where = f"--config {path}"
    try:
        payload = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise UserError(f"{where}: not a readable YAML file ({type(e).__name__})") from None
    if not isinstance(payload, dict):
        raise UserError(f"{where}: a YAML mapping with 'indexes' and 'api_keys' was expected")
    raw_keys = payload.get("api_keys")
    if "api_keys" in payload and not raw_keys:
        raise UserError(f"{where}: 'api_keys' holds no key: the server would be open to everyone")
    raw_keys = raw_keys or []
    if not isinstance(raw_keys, list) or not all(isinstance(k, str) and k.strip() for k in raw_keys):
        raise UserError(f"{where}: 'api_keys' must be a list of non-empty strings")
    raw_indexes = payload.get("indexes") or {}
    if not isinstance(raw_indexes, dict):
        raise UserError(f"{where}: 'indexes' must map names to index directories")
    indexes = {}
    for name, directory in raw_indexes.items():
        check_index_name(str(name), f"{where}: index")
        if not isinstance(directory, str) or not directory.strip():
            raise UserError(f"{where}: index {str(name)[:40]!r} must map to a directory")
        indexes[str(name)] = str((Path(path).resolve().parent / directory).resolve())
    return indexes, check_keys([(f"{where}: api_keys key {n}", k.strip()) for n, k in enumerate(raw_keys, 1)])


def check_index_name(name: str, where: str) -> str:
    """An index's name in routes (``/v1/{name}/search``): letters, digits, ``.``, ``_`` and ``-``, no ``..``."""
    if not NAME.fullmatch(name) or ".." in name:
        raise UserError(
            f"{where} {name[:40]!r} cannot name a route: use letters, digits, '.', '_' and '-' (at "
            "most 100, no '..', not starting with '.' or '-')"
        )
    return name


def check_keys(keys: list[tuple[str, str]]) -> list[str]:
    """The keys of (where, key) pairs, each at least 16 printable ASCII characters without spaces."""
    for where, key in keys:
        if not KEY_CHARS.fullmatch(key):
            raise UserError(f"{where}: a key must be at least 16 printable ASCII characters without spaces")
    return [key for _, key in keys]


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
    """The accepted keys, compared in constant time by their SHA-256, and how text that holds one is shown.

    Clients see only whether a request holds a *whole* key (:meth:`found_in`); the request log also masks any
    run of :data:`FRAGMENT` characters of a key. A client-visible answer that depended on fragments would tell
    a client, eight characters at a time, what other clients' keys are made of."""

    def __init__(self, keys: Iterable[str]):
        keys = list(keys)
        self.digests = {hashlib.sha256(k.encode("utf-8")).digest(): fingerprint(k) for k in keys}
        self.names = {k: fingerprint(k) for k in keys}
        self.fragments = {k[i : i + FRAGMENT] for k in keys for i in range(len(k) - FRAGMENT + 1)}

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

    def found_in(self, text: str) -> str | None:
        """The fingerprint of an accepted key that ``text`` holds whole, if any."""
        return next((name for key, name in self.names.items() if key in text), None)

    def shown(self, text: str, limit: int) -> str:
        """``text`` as an answer may echo it: each whole key replaced by ``<key FINGERPRINT>`` before it is cut
        to ``limit`` characters, so that no cut leaves the start of a key."""
        for key, name in self.names.items():
            if key in text:
                text = text.replace(key, f"<key {name}>")
        return text[:limit]

    def stripped(self, body: bytes) -> bytes:
        """An answer's body with each whole key replaced (:meth:`shown`): in every string of a JSON body, where a
        key's quote or backslash is escaped, else in its text."""
        try:
            value = json.loads(body)
        except (ValueError, UnicodeDecodeError, RecursionError):
            return self.shown(body.decode("utf-8", "replace"), len(body) + 1).encode("utf-8")

        def walk(item):
            if isinstance(item, str):
                return self.shown(item, len(item) + 1)
            if isinstance(item, dict):
                return {walk(k): walk(v) for k, v in item.items()}
            return [walk(v) for v in item] if isinstance(item, list) else item

        return json.dumps(walk(value), ensure_ascii=False).encode("utf-8")

    def logged(self, text: str) -> str:
        """``text`` as the request log keeps it: :meth:`shown` at :data:`LOGGED_CHARS`, and every run of
        :data:`FRAGMENT` or more characters of a key masked with ``*``. Masking keeps the length, so only the
        characters kept need scanning, whatever the request's length."""
        kept = list(self.shown(text, LOGGED_CHARS + FRAGMENT - 1))
        masked = [False] * len(kept)
        for i in range(len(kept) - FRAGMENT + 1):
            if "".join(kept[i : i + FRAGMENT]) in self.fragments:
                masked[i : i + FRAGMENT] = [True] * FRAGMENT
        return "".join("*" if m else c for c, m in zip(kept, masked))[:LOGGED_CHARS]


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
    line flushed as written (the file is closed when the process ends). A line break of any kind inside the
    record is escaped, so that every reader finds one record per line."""

    def __init__(self, path: str | Path):
        self.file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open for the server's lifetime
        self.lock = threading.Lock()

    def write(self, record: dict) -> None:
        line = json.dumps(record, ensure_ascii=False).translate(ESCAPED) + "\n"
        with self.lock:
            self.file.write(line)
            self.file.flush()


def mcp_call(message: object) -> list[tuple[str, object]]:
    """The method, tool and arguments of an MCP message (a ``tools/call``; other methods: the method), as the
    request log names them."""
    if not isinstance(message, dict):
        return []
    given = message.get("params")
    params = given if isinstance(given, dict) else {}
    out: list[tuple[str, object]] = [("method", message.get("method"))]
    if message.get("method") == "tools/call":
        out.append(("tool", params.get("name")))
        arguments = params.get("arguments")
        out += list(arguments.items()) if isinstance(arguments, dict) else []
    return out


def strings_of(value: object) -> Iterable[str]:
    """Every string in a decoded JSON value, names included."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            stack += item


@dataclass(frozen=True)
class AccessConfig:
    """What :class:`Access` enforces; built once from the command line (or by a library user)."""

    keys: tuple[str, ...] = ()
    hosts: HostRule = HostRule("127.0.0.1")
    cors: tuple[str, ...] = ()
    requests_per_minute: int | None = param(
        None,
        positive_int,
        "requests one client (a key; without keys, an address) may send in any 60 seconds; more get 429",
        default_text="no limit",
    )
    request_log: str | None = param(
        None,
        str,
        "append a JSON line per request: time, key fingerprint, route, index, parameters, status, milliseconds",
        metavar="FILE",
    )


def header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return value.decode("latin-1")
    return None


def other_headers(scope) -> list[str]:
    """The values of a request's headers but those a key belongs in."""
    return [v.decode("latin-1") for k, v in scope.get("headers", ()) if k not in (b"x-api-key", b"authorization")]


def presented_key(scope) -> str | None:
    if key := (header(scope, b"x-api-key") or "").strip():
        return key
    auth = header(scope, b"authorization") or ""
    return auth[7:].strip() or None if auth[:7].lower() == "bearer " else None


def is_public(path: str) -> bool:
    """The page, its scripts and the API's description: the only paths served without a key."""
    return path in PUBLIC_PATHS or (path.startswith("/static/") and bool(STATIC_NAME.fullmatch(path[8:])))


@dataclass
class Checked:
    """What :meth:`Access.check` found: who sent the request (``name``: its key's fingerprint, valid or not, or
    ``anonymous``; ``client``: the name routes act for, a valid key's or ``anonymous``), the refusal to send
    instead of the route (None: go on), the parameters to log, and the receive to pass on."""

    name: str
    client: str
    refusal: object
    logged: list
    receive: object


class Access:
    """ASGI middleware: the Host and Origin checks, the key check, the rate limit and the request log, before
    any route runs, and every error body stripped of keys as it leaves. The client's name (a key's fingerprint,
    or ``anonymous``) is left in the request's state as ``client`` for the routes."""

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
        checked = await self.check(scope, receive)
        written = False

        def write(status: int) -> None:  # before the answer leaves: a client that has it finds its line
            nonlocal written
            if self.log is not None and not written:
                written = True
                path = scope.get("path", "")
                index = path.split("/")[2] if path.startswith("/v1/") and path.count("/") >= 3 else None
                self.log.write(
                    {
                        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                        "key": checked.name,
                        "route": self.keys.logged(path),
                        "index": index and self.keys.logged(index),
                        "parameters": self.logged(checked.logged),
                        "status": status,
                        "ms": round(1000 * (time.perf_counter() - start), 1),
                    }
                )

        sending = self.sender(send, write)
        try:
            if checked.refusal is not None:
                await checked.refusal(scope, checked.receive, sending)
            else:
                scope.setdefault("state", {}).update(client=checked.client)
                await self.app(scope, checked.receive, sending)
        finally:
            write(0)  # no answer was sent: the client left, or the server stopped

    def sender(self, send, write: Callable[[int], None]) -> Callable[[dict], Awaitable[None]]:
        """``send`` that logs the status as the answer starts, and holds an error answer back until its body is
        whole, to send it with every key in it replaced by the key's fingerprint."""
        held: list[dict] = []

        async def sending(message):
            if message["type"] == "http.response.start":
                write(message["status"])
                if message["status"] >= 400 and self.keys:
                    held.append(message)
                    return
            if held and message["type"] == "http.response.body":
                held.append(message)
                if message.get("more_body"):
                    return
                body = self.keys.stripped(b"".join(m.get("body", b"") for m in held[1:]))
                headers = [(k, v) for k, v in held[0].get("headers", []) if k.lower() != b"content-length"]
                await send({**held[0], "headers": [*headers, (b"content-length", str(len(body)).encode())]})
                held.clear()
                message = {"type": "http.response.body", "body": body, "more_body": False}
            await send(message)

        return sending

    async def check(self, scope, receive) -> Checked:
        """Who sent the request and whether it goes on. Every request counts against its client's rate (a key's,
        or its address's without a valid key), refused ones too: a refusal costs a client its minute as an answer
        does."""
        path = scope.get("path", "")
        address = f"address {(scope.get('client') or ('?',))[0]}"
        key = presented_key(scope)
        name = fingerprint(key) if key else ANONYMOUS
        client: str | None = ANONYMOUS  # None: a key that matches none
        logged: list = []

        def refused(answer) -> Checked:
            who = client if client not in (None, ANONYMOUS) else address
            return Checked(name, client or ANONYMOUS, self.limited(who, answer), list(logged), receive)

        query = scope.get("query_string", b"")
        if query.count(b"&") >= MAX_PARAMETERS:  # counted before anything is parsed or logged
            return refused(error(400, f"more than {MAX_PARAMETERS} parameters"))
        logged = parse_qsl(query.decode("latin-1"), keep_blank_values=True)
        host = header(scope, b"host") or ""
        if not self.config.hosts.allows(host_name(host)):
            shown = host_name(self.keys.shown(host, 300))[:100]  # a key is replaced before the name is lowercased
            return refused(error(421, f"this server does not answer for host {shown!r}"))
        origin = header(scope, b"origin")
        if origin is not None and not self.config.hosts.allows_origin(origin, host, self.config.cors):
            shown = self.keys.shown(origin, 100)
            return refused(error(403, f"origin {shown!r} is not allowed (the server's --cors)"))
        if self.keys and not (scope["method"] == "OPTIONS" or is_public(path)):
            client = self.keys.match(key) if key else None
            if client is None:
                message = (
                    "the API key is not valid"
                    if key
                    else ("an API key is required (X-API-Key: KEY or Authorization: Bearer KEY)")
                )
                return refused(error(401, message, {"WWW-Authenticate": "Bearer"}))
        texts = [path, query.decode("latin-1"), *(t for pair in logged for t in pair), *other_headers(scope)]
        if path.startswith("/mcp"):
            body, receive = await buffered(receive)
            if body is None:
                return refused(error(413, f"the request body is larger than {MAX_BODY_BYTES} bytes"))
            try:
                call = json.loads(body)
            except (ValueError, UnicodeDecodeError):
                call = None
            except RecursionError:
                return refused(error(400, "the request body nests too deeply"))
            logged = mcp_call(call)
            strings = list(strings_of(call))
            if any(SURROGATE.search(t) for t in strings):
                return refused(error(400, "the request body holds a lone surrogate (\\ud800 to \\udfff): not text"))
            texts += [body.decode("utf-8", "replace"), *strings]
        if self.keys and any(self.keys.found_in(t) for t in texts):
            return refused(
                error(
                    400,
                    "the request holds an API key outside its X-API-Key or Authorization header; send keys only there",
                )
            )
        if not is_public(path):
            return refused(None)
        return Checked(name, client or ANONYMOUS, None, logged, receive)  # as refused() names it

    def limited(self, who: str, refusal=None):
        """429 if ``who`` is past its rate (this request counted), else ``refusal`` (None: go on)."""
        if (wait := self.rate.retry_after(who)) is None:
            return refusal
        limit = self.config.requests_per_minute
        return error(429, f"more than {limit} requests a minute; retry in {wait} s", {"Retry-After": str(wait)})

    def logged(self, params: list[tuple[str, object]]) -> dict:
        """Parameters as the request log keeps them: numbers as they are, other values as text; keys and runs of
        their characters masked before each name and value is cut (:meth:`Keys.logged`)."""
        return {self.keys.logged(str(k)): self.logged_value(v) for k, v in params}

    def logged_value(self, value: object) -> object:
        """A parameter's value as the log keeps it: a number as it is, unless its digits hold a run of a key's."""
        if value is None or isinstance(value, bool):
            return value
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        masked = self.keys.logged(text)
        return value if isinstance(value, int | float) and masked == text else masked


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
