"""A search request's parameters, checked into a :class:`Plan` before it waits for the searcher.

Parameters are Pyserini's (``query``, ``hits``, ``qid``) plus ``rewriter``, ``teacher``, ``trace`` and each
rewriter's own options, named as its flags without the dashes (``k``, ``lr``, ``iterations``, ``preset``,
``lambda``, ``prf-depth``; a flag that takes no value, such as ``no-early-stop``, is ``true``). Every refusal
is a :class:`BadRequest`: one line, and the HTTP status that fits it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

from tour_pyserini.errors import UserError
from tour_pyserini.numbers import Number
from tour_pyserini.rewriters import available_rewriters, check_rewriter
from tour_pyserini.rewriters.ttt_embed import STATE, TASK

DEFAULT_HITS = 10  # Pyserini's REST default
MAX_HITS = 10_000
MAX_QUERY_CHARS = 10_000  # far beyond what any encoder reads (512 tokens)
ONLINE = "online"  # the server's own policy under --budget / --learn: the learned state, the teacher on a share
COMMON = {"query", "hits", "qid", "rewriter", "teacher", "trace"}


class BadRequest(Exception):
    """A request refused with ``status`` (400 unless another fits) and a one-line message."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Plan:
    """What decides a request's ranking; requests with equal plans are searched as one batch."""

    index: str
    hits: int
    rewriter: str  # "none", a registered rewriter, or ONLINE
    options: tuple[tuple[str, object], ...] = ()  # the rewriter's options, sorted by parameter
    teacher: str | None = None


@dataclass(frozen=True)
class SearchRequest:
    plan: Plan
    query: str
    qid: str
    trace: bool = False


def check_utf8(raw_query_string: bytes) -> None:
    """Refuse percent-encoded bytes that are not UTF-8 (Starlette would silently replace them with U+FFFD)."""
    for pair in raw_query_string.split(b"&"):
        name, _, value = pair.partition(b"=")
        for part in (name, value):
            try:
                unquote_to_bytes(part.replace(b"+", b" ")).decode("utf-8")
            except UnicodeDecodeError:
                shown = unquote_to_bytes(name).decode("utf-8", "replace")[:40]
                raise BadRequest(f"parameter {shown!r} is not valid UTF-8") from None


def derived_qid(text: str) -> str:
    """A query without a qid gets one from its text, the same in every process and after a restart."""
    return "q" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]


def parse_hits(raw: str | None, limit: int) -> int:
    if raw is None or not raw.strip():
        return min(DEFAULT_HITS, limit)
    try:
        hits = int(raw)
    except ValueError:
        raise BadRequest(f"parameter 'hits' must be an integer, got {raw[:40]!r}") from None
    if not 1 <= hits <= limit:
        raise BadRequest(f"parameter 'hits' must be in [1, {limit}], got {hits}")
    return hits


def check_query(query: str | None) -> str:
    if query is None or not query.strip():
        raise BadRequest("parameter 'query' is required and must not be blank")
    if len(query) > MAX_QUERY_CHARS:
        raise BadRequest(f"parameter 'query' has {len(query)} characters; at most {MAX_QUERY_CHARS}", 413)
    return query


def rewriter_options(rewriter: str, params: Mapping[str, str]) -> dict:
    """The rewriter's options among ``params``, parsed and range-checked as its flags are; others refused."""
    cls = available_rewriters()[rewriter]
    by_name = {o.option.lstrip("-"): o for o in cls.options if o.name not in (STATE.name, TASK.name)}
    if stray := sorted(set(params) - COMMON - set(by_name)):
        known = ", ".join(sorted(by_name)) or "none"
        raise BadRequest(f"parameter {stray[0]!r} is not an option of rewriter {rewriter!r} (its options: {known})")
    options = {}
    for name, raw in params.items():
        if name not in by_name:
            continue
        option = by_name[name]
        if option.const is not None:
            if raw.lower() not in ("true", "false"):
                raise BadRequest(f"parameter {name!r} is 'true' or 'false', got {raw[:40]!r}")
            if raw.lower() == "true":
                options[option.name] = option.const
            continue
        try:
            value = option.type(raw)
        except ValueError:
            raise BadRequest(f"parameter {name!r}: {raw[:40]!r} is not a {option.type.__name__}") from None
        if isinstance(option.type, Number):
            try:
                option.type.check(name, value)
            except UserError as e:
                raise BadRequest(str(e)) from None
        if option.choices and value not in option.choices:
            raise BadRequest(f"parameter {name!r} must be one of {', '.join(option.choices)}, got {value!r}")
        options[option.name] = value
    return options


def check_qid(qid: str | None, query: str) -> str:
    if qid is None:
        return derived_qid(query)
    if not qid or len(qid) > 200 or any(c.isspace() for c in qid):
        raise BadRequest(f"parameter 'qid' must be 1 to 200 characters without whitespace, got {qid[:40]!r}")
    return qid


def parse_search(index: str, params: Mapping[str, str], *, num_docs: int, dense: bool, teachers: list[str],
                 state: str | None, online: bool) -> SearchRequest:  # fmt: skip
    """The checked request for ``index`` (``num_docs`` documents) on a server with ``teachers`` and ``state``
    (the file ``ttt-embed`` searches with); ``online``: a request naming no rewriter follows the server's policy."""
    query = check_query(params.get("query"))
    hits = parse_hits(params.get("hits"), min(MAX_HITS, num_docs))
    rewriter = params.get("rewriter") or (ONLINE if online else "none")
    teacher = params.get("teacher") or None
    if rewriter == ONLINE:
        if not online:
            raise BadRequest("rewriter 'online' is the policy of a server started with --budget (on a dense index)")
        if stray := sorted(set(params) - COMMON):
            raise BadRequest(f"parameter {stray[0]!r}: the server's own policy takes no rewriter options")
        if teacher is not None:
            raise BadRequest("parameter 'teacher': the server's own policy uses the teacher it was started with")
        return SearchRequest(Plan(index, hits, ONLINE), query, check_qid(params.get("qid"), query),
                             params.get("trace") == "true")  # fmt: skip
    if rewriter not in available_rewriters():
        raise BadRequest(f"unknown rewriter {rewriter!r}; choose one of: {', '.join(available_rewriters())}")
    if not dense and (rewriter != "none" or teacher):
        raise BadRequest(f"index {index!r} is BM25: it takes no rewriter or teacher")
    if teacher is not None and teacher not in teachers:
        started = ", ".join(teachers) if teachers else "none (start it with --teacher SPEC)"
        raise BadRequest(f"unknown teacher {teacher!r}; this server's teachers: {started}")
    options = rewriter_options(rewriter, params)
    if rewriter == "ttt-embed":
        if state is None:
            raise BadRequest("rewriter 'ttt-embed' searches with the server's state: start it with --state FILE")
        options["state"] = state
    try:
        _, config = check_rewriter(rewriter, options, teacher=teacher is not None)
    except UserError as e:
        raise BadRequest(str(e)) from None
    depth = getattr(config, "depth", None) or 0
    if depth > num_docs:
        raise BadRequest(f"parameter 'k' ({depth}) is larger than the index ({num_docs} documents)")
    plan = Plan(index, hits, rewriter, tuple(sorted(options.items())), teacher)
    return SearchRequest(plan, query, check_qid(params.get("qid"), query), params.get("trace") == "true")
