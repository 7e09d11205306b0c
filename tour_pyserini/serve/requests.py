"""A search request's parameters, checked into a :class:`Plan` before it waits for the searcher.

Parameters are Pyserini's (``query``, ``hits``, ``qid``) plus ``rewriter``, ``teacher``, ``trace`` and each
rewriter's own options, named as its flags without the dashes (``depth``, ``lr``, ``iterations``, ``preset``,
``lambda``, ``prf-depth``; a flag that takes no value, such as ``no-early-stop``, is ``true``). Numbers are ASCII
digits, booleans ``true`` or ``false``. The work one request may ask is bounded by the server's
:class:`RequestLimits`. Every refusal is a :class:`BadRequest`: one line, and the HTTP status that fits it.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_to_bytes

from tour_pyserini.errors import ParamError, UserError
from tour_pyserini.files.lines import blank
from tour_pyserini.numbers import Number, param, positive_int
from tour_pyserini.rewriters import available_rewriters, check_rewriter
from tour_pyserini.rewriters.ttt_embed import STATE
from tour_pyserini.serve.access import ANONYMOUS
from tour_pyserini.teachers import TeacherSpec

DEFAULT_HITS = 10  # Pyserini's REST default
MAX_QUERY_CHARS = 10_000  # far beyond what any encoder reads (512 tokens)
MAX_FLOAT_OPTION = 1000.0  # no rewriter's float (lr, weights, temperatures) means anything beyond this
ASCII_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
# options that count candidates a rewriter searches, judges or feeds back per step: bounded by max_candidates
CANDIDATE_COUNTS = ("depth", "prf_depth", "topk", "bottomk", "fixed_positives", "teacher_positives")
ONLINE = "online"  # the server's own policy under --budget / --learn: the learned state, the teacher on a share
SHOWN = ("parse", "max_doc_length")  # how documents are shown (Pyserini's REST parameters): any index, any rewriter
BM25 = ("k1", "b")  # BM25's parameters for this request (Pyserini's REST parameters): BM25 indexes only
COMMON = {"query", "hits", "qid", "rewriter", "teacher", "trace", *SHOWN, *BM25}


class BadRequest(Exception):
    """A request refused with ``status`` (400 unless another fits) and a one-line message."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


FLAG = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)")


def as_request(error: UserError) -> BadRequest:
    """A library error as a request's refusal, naming this request's parameters: a parameter's by its field
    (``parameter 'prf-depth'``), and the command-line flags another names (``--depth`` is ``'depth'``)."""
    if isinstance(error, ParamError):
        return BadRequest(error.naming(f"parameter {error.flag.lstrip('-')!r}"))
    return BadRequest(FLAG.sub(lambda m: f"'{m.group(1)}'", str(error)))


@dataclass(frozen=True)
class RequestLimits:
    """The most work one request may ask for, each settable when the server starts; the defaults keep a request
    with the BM25 teacher well within the default timeout on two cores."""

    max_hits: int = param(1000, positive_int, "most hits one request may ask")
    max_candidates: int = param(
        100,
        positive_int,
        "most candidates a request's rewriter may judge or feed back per step (depth, prf-depth, ...)",
        aliases=("--max-k",),
    )
    max_iterations: int = param(10, positive_int, "most iterations (TOUR steps, PRF rounds) one request may ask")


@dataclass(frozen=True)
class Plan:
    """What decides a request's ranking; requests with equal plans are searched as one batch. ``config`` is the
    rewriter's typed configuration, checked from ``options`` once (:func:`make_plan`), as the search command's
    plan keeps it."""

    index: str
    hits: int
    rewriter: str  # "none", a registered rewriter, or ONLINE
    options: tuple[tuple[str, object], ...] = ()  # the rewriter's options, sorted by parameter
    teacher: TeacherSpec | None = None
    config: Any = field(default=None, compare=False)  # equal options give equal configs


def make_plan(
    index: str, hits: int, rewriter: str, options: Mapping[str, object], teacher: TeacherSpec | None = None
) -> Plan:
    """The plan of ``rewriter`` with ``options`` (by parameter), its config checked (one line for a value out of
    range, naming the request's parameter)."""
    try:
        _, config = check_rewriter(rewriter, dict(options), teacher=teacher is not None)
    except UserError as e:
        raise as_request(e) from None
    return Plan(index, hits, rewriter, tuple(sorted(options.items())), teacher, config)


@dataclass(frozen=True)
class Shown:
    """How documents are shown: ``parse`` (Pyserini's default: title and text; else the document as stored, one
    JSON string) and ``max_chars`` (each document's text cut to it; None: whole)."""

    parse: bool = True
    max_chars: int | None = None


@dataclass(frozen=True)
class SearchRequest:
    """A checked request, with who sent it: ``client`` (a valid key's fingerprint, or ``anonymous``).
    ``abandoned`` is set once its client has its 504 or has gone: its search stops at the next step."""

    plan: Plan
    query: str
    qid: str
    trace: bool = False
    client: str = ANONYMOUS
    shown: Shown = Shown()
    warnings: tuple[str, ...] = ()  # what the answer says of the request (an old parameter name)
    abandoned: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)


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


def parse_boolean(name: str, raw: str | None) -> bool:
    """``true`` or ``false`` (any case); absent is false."""
    if raw is None or raw.lower() == "false":
        return False
    if raw.lower() != "true":
        raise BadRequest(f"parameter {name!r} is 'true' or 'false', got {raw[:40]!r}")
    return True


def parse_number(name: str, raw: str, kind: type) -> int | float:
    """``raw`` as ``kind``, written in ASCII digits (Python's int() and float() also read other scripts' digits)."""
    if not ASCII_NUMBER.fullmatch(raw) or (kind is int and not raw.lstrip("+-").isdigit()):
        what = "an integer" if kind is int else "a finite number"
        raise BadRequest(f"parameter {name!r}: {raw[:40]!r} is not {what}")
    return kind(raw)


def parse_hits(raw: str | None, limit: int, num_docs: int) -> int:
    """Hits asked (at most ``limit``), and as Pyserini answers, no more than the index holds."""
    if raw is None or not raw.strip():
        return min(DEFAULT_HITS, num_docs)
    hits = parse_number("hits", raw, int)
    if not 1 <= hits <= limit:
        raise BadRequest(f"parameter 'hits' must be in [1, {limit}], got {hits}")
    return min(hits, num_docs)


def check_query(query: str | None) -> str:
    if query is None or blank(query):
        raise BadRequest("parameter 'query' is required and must not be blank")
    if len(query) > MAX_QUERY_CHARS:
        raise BadRequest(f"parameter 'query' has {len(query)} characters; at most {MAX_QUERY_CHARS}", 413)
    return query


def rewriter_options(rewriter: str, params: Mapping[str, str]) -> tuple[dict, list[str]]:
    """The rewriter's options among ``params``, parsed and range-checked as its flags are (others refused), and a
    warning for each given by its old name (``k`` for ``depth``)."""
    cls = available_rewriters()[rewriter]
    declared = [o for o in cls.options if o.name != STATE.name]  # files are the server's
    by_name = {o.option.lstrip("-"): o for o in declared}
    old = {alias.lstrip("-"): o for o in declared for alias in o.aliases}
    if stray := sorted(set(params) - COMMON - set(by_name) - set(old)):
        known = ", ".join(sorted(by_name)) or "none"
        raise BadRequest(f"parameter {stray[0]!r} is not an option of rewriter {rewriter!r} (its options: {known})")
    options, warnings = {}, []
    for name, raw in params.items():
        option = by_name.get(name) or old.get(name)
        if option is None:
            continue
        if option.name in options:  # given by both names
            raise BadRequest(
                f"parameter {option.aliases[0].lstrip('-')!r} is the old name of "
                f"{option.option.lstrip('-')!r}: give one of them"
            )
        if name in old:
            warnings.append(
                f"parameter {name!r} is the old name of {option.option.lstrip('-')!r} (same meaning); "
                "it will be removed in the next release"
            )
        if option.const is not None:
            if parse_boolean(name, raw):
                options[option.name] = option.const
            continue
        value = parse_number(name, raw, option.type.kind) if isinstance(option.type, Number) else option.type(raw)
        if isinstance(option.type, Number):
            try:
                option.type.check(f"parameter {name!r}", value)
            except UserError as e:
                raise as_request(e) from None
        if option.choices and value not in option.choices:
            raise BadRequest(f"parameter {name!r} must be one of {', '.join(option.choices)}, got {value!r}")
        options[option.name] = value
    return options, warnings


def check_qid(qid: str | None, query: str) -> str:
    if qid is None:
        return derived_qid(query)
    if not qid or len(qid) > 200 or any(c.isspace() for c in qid):
        raise BadRequest(f"parameter 'qid' must be 1 to 200 characters without whitespace, got {qid[:40]!r}")
    return qid


def parse_shown(params: Mapping[str, str]) -> Shown:
    """``parse`` (true or false) and ``max_doc_length`` (characters, positive) of a search or document request."""
    raw = params.get("max_doc_length")
    max_chars = None if raw is None else parse_number("max_doc_length", raw, int)
    if max_chars is not None and max_chars < 1:
        raise BadRequest(f"parameter 'max_doc_length' must be positive, got {max_chars}")
    parse = params.get("parse")
    return Shown(parse is None or parse_boolean("parse", parse), max_chars)


def parse_bm25(params: Mapping[str, str], index: str, dense: bool) -> tuple[tuple[str, float], ...]:
    """The BM25 parameters a request sets (``k1`` at least 0, ``b`` in [0, 1]), as plan options; refused on a
    dense index, which has no BM25 to set."""
    given = {name: params[name] for name in BM25 if name in params}
    if given and dense:
        raise BadRequest(f"parameters 'k1' and 'b' set BM25: index {index!r} is dense")
    values = {name: parse_number(name, raw, float) for name, raw in given.items()}
    if not 0 <= values.get("k1", 0) <= MAX_FLOAT_OPTION:
        raise BadRequest(f"parameter 'k1' must be in [0, {MAX_FLOAT_OPTION:g}], got {values['k1']:g}")
    if not 0 <= values.get("b", 0) <= 1:
        raise BadRequest(f"parameter 'b' must be in [0, 1], got {values['b']:g}")
    return tuple(sorted(values.items()))


def check_work(rewriter: str, config, limits: RequestLimits) -> None:
    """The rewriter's checked ``config`` within the server's limits: candidates per step, iterations, floats."""
    by_name = {o.name: o for o in available_rewriters()[rewriter].options}
    for name, option in by_name.items():
        value = getattr(config, name, None)
        shown = option.option.lstrip("-")
        if name in CANDIDATE_COUNTS and value is not None and value > limits.max_candidates:
            raise BadRequest(f"parameter {shown!r} ({value}) is above this server's maximum of {limits.max_candidates}")
        if name == "iterations" and value is not None and value > limits.max_iterations:
            raise BadRequest(f"parameter {shown!r} ({value}) is above this server's maximum of {limits.max_iterations}")
        if isinstance(value, float) and abs(value) > MAX_FLOAT_OPTION:
            raise BadRequest(f"parameter {shown!r} ({value:g}) is beyond {MAX_FLOAT_OPTION:g}")


def parse_search(
    index: str,
    params: Mapping[str, str],
    *,
    num_docs: int,
    dense: bool,
    teachers: Mapping[str, TeacherSpec],
    state: str | None,
    online: bool,
    limits: RequestLimits = RequestLimits(),
    client: str = ANONYMOUS,
) -> SearchRequest:
    """The checked request for ``index`` (``num_docs`` documents) on a server with ``teachers`` (each name a request
    may give it -> its spec) and ``state`` (the file ``ttt-embed`` searches with); ``online``: a
    request naming no rewriter follows the server's policy; ``client``: who sent it."""
    query = check_query(params.get("query"))
    hits = parse_hits(params.get("hits"), limits.max_hits, num_docs)
    trace = parse_boolean("trace", params.get("trace"))
    qid = check_qid(params.get("qid"), query)
    shown, bm25 = parse_shown(params), parse_bm25(params, index, dense)
    rewriter = params.get("rewriter") or (ONLINE if online else "none")
    teacher = params.get("teacher") or None
    if rewriter == ONLINE:
        if not online:
            raise BadRequest("rewriter 'online' is the policy of a server started with --budget (on a dense index)")
        if stray := sorted(set(params) - COMMON):
            raise BadRequest(f"parameter {stray[0]!r}: the server's own policy takes no rewriter options")
        if teacher is not None:
            raise BadRequest("parameter 'teacher': the server's own policy uses the teacher it was started with")
        return SearchRequest(Plan(index, hits, ONLINE), query, qid, trace, client, shown)
    if rewriter not in available_rewriters():
        raise BadRequest(f"unknown rewriter {rewriter!r}; choose one of: {', '.join(available_rewriters())}")
    if not dense and (rewriter != "none" or teacher):
        raise BadRequest(f"index {index!r} is BM25: it takes no rewriter or teacher")
    if not dense:
        if stray := sorted(set(params) - COMMON):
            raise BadRequest(f"parameter {stray[0]!r} does not apply to BM25 index {index!r}")
        return SearchRequest(Plan(index, hits, "none", bm25), query, qid, trace, client, shown)
    if teacher is not None and teacher not in teachers:
        public = [name for name, spec in teachers.items() if name != str(spec)]
        started = ", ".join(public) if teachers else "none (start it with --teacher SPEC)"
        raise BadRequest(f"unknown teacher {teacher[:100]!r}; this server's teachers: {started}")
    spec = None if teacher is None else teachers[teacher]
    options, warnings = rewriter_options(rewriter, params)
    if rewriter == "ttt-embed":
        if state is None:
            raise BadRequest("rewriter 'ttt-embed' searches with the server's state: start it with --state FILE")
        options["state"] = state
    plan = make_plan(index, hits, rewriter, options, spec)
    depth = getattr(plan.config, "depth", None) or 0
    if depth > num_docs:
        raise BadRequest(f"parameter 'depth' ({depth}) is larger than the index ({num_docs} documents)")
    check_work(rewriter, plan.config, limits)
    return SearchRequest(plan, query, qid, trace, client, shown, tuple(warnings))
