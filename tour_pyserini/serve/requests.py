"""A search request's parameters, checked into a :class:`~tour_pyserini.pipeline.Plan` before it waits for the
searcher.

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
from dataclasses import dataclass, field, replace
from urllib.parse import unquote_to_bytes

from tour_pyserini.errors import ParamError, UserError
from tour_pyserini.files.lines import blank
from tour_pyserini.index.layout import IndexKind
from tour_pyserini.numbers import Number, Param, Role, param, positive_int, probability
from tour_pyserini.pipeline import Plan
from tour_pyserini.rewriters import available_rewriters
from tour_pyserini.serve.access import ANONYMOUS
from tour_pyserini.teachers import TeacherSpec

DEFAULT_HITS = 10  # Pyserini's REST default
MAX_QUERY_CHARS = 10_000  # far beyond what any encoder reads (512 tokens)
MAX_FLOAT_OPTION = 1000.0  # no rewriter's float (lr, weights, temperatures) means anything beyond this
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
    with the BM25 teacher well within the default timeout on two cores. Each bounds the rewriters' options of one
    :class:`~tour_pyserini.numbers.Role`, whatever their names."""

    max_hits: int = param(1000, positive_int, "most hits one request may ask")
    max_candidates: int = param(
        100,
        positive_int,
        "most candidates a request's rewriter may judge or feed back per step (depth, prf-depth, ...)",
        aliases=("--max-k",),
    )
    max_iterations: int = param(10, positive_int, "most iterations (TOUR steps, PRF rounds) one request may ask")

    def bound(self, plan: Plan) -> None:
        """The rewriter's checked options within these limits: candidates per step, iterations; and no float
        beyond what any rewriter's float (a learning rate, a weight, a temperature) can mean."""
        limits: dict[Role | None, int] = {Role.CANDIDATES: self.max_candidates, Role.ITERATIONS: self.max_iterations}
        for option in plan.dense_rewriter.options:
            value = getattr(plan.rewriter_config, option.name, None)
            shown = option.option.lstrip("-")
            limit = limits.get(option.role)
            if limit is not None and value is not None and value > limit:
                raise BadRequest(f"parameter {shown!r} ({value}) is above this server's maximum of {limit}")
            if isinstance(value, float) and abs(value) > MAX_FLOAT_OPTION:
                raise BadRequest(f"parameter {shown!r} ({value:g}) is beyond {MAX_FLOAT_OPTION:g}")


@dataclass(frozen=True)
class Shown:
    """How documents are shown: ``parse`` (Pyserini's default: title and text; else the document as stored, one
    JSON string) and ``max_chars`` (each document's text cut to it; None: whole)."""

    parse: bool = True
    max_chars: int | None = None


@dataclass(frozen=True)
class SearchRequest:
    """A checked request of index ``index``: its ``plan`` (the index's, under the server's policy when
    ``online``), the hits it asks, who sent it (``client``: a valid key's fingerprint, or ``anonymous``).
    ``abandoned`` is set once its client has its 504 or has gone: its search stops at the next step."""

    index: str
    plan: Plan
    hits: int
    query: str
    qid: str
    online: bool = False
    trace: bool = False
    client: str = ANONYMOUS
    shown: Shown = Shown()
    warnings: tuple[str, ...] = ()  # what the answer says of the request (an old parameter name)
    abandoned: threading.Event = field(default_factory=threading.Event, compare=False, repr=False)

    @property
    def group(self) -> tuple:
        """What requests searched together share: the plan, the hits, the policy."""
        return self.plan, self.hits, self.online

    @property
    def rewriter(self) -> str:
        return ONLINE if self.online else self.plan.spec.rewriter


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


def parsed(option: Param, raw: str, name: str):
    """``raw`` as ``option``'s flag gives it (:meth:`~tour_pyserini.numbers.Param.parse_flag`), refused naming the
    request's parameter ``name``."""
    try:
        return option.parse_flag(raw)
    except ParamError as e:
        raise BadRequest(e.naming(f"parameter {name!r}")) from None


TRACE = Param("trace", bool)
PARSE = Param("parse", bool)
HITS = Param("hits", Number(int, "an integer", lambda v: True), role=Role.HITS)  # its range is the server's
MAX_DOC_LENGTH = Param("max_doc_length", positive_int)
BM25_K1 = Param("k1", Number(float, f"in [0, {MAX_FLOAT_OPTION:g}]", lambda v: 0 <= v <= MAX_FLOAT_OPTION))
BM25_B = Param("b", probability)


def parse_hits(raw: str | None, limit: int, num_docs: int) -> int:
    """Hits asked (at most ``limit``), and as Pyserini answers, no more than the index holds."""
    if raw is None or not raw.strip():
        return min(DEFAULT_HITS, num_docs)
    hits = parsed(HITS, raw, "hits")
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
    """The rewriter's options among ``params``, named as its flags without dashes, read as its flags are (others
    refused; a file or an address is the server's, never a request's), and a warning for each given by its old
    name (``k`` for ``depth``)."""
    declared = [o for o in available_rewriters()[rewriter].options if o.role not in (Role.FILE, Role.URL)]
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
        if (value := parsed(option, raw, name)) is not None:
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
    max_chars = None if raw is None else parsed(MAX_DOC_LENGTH, raw, "max_doc_length")
    parse = params.get("parse")
    return Shown(parse is None or parsed(PARSE, parse, "parse"), max_chars)


def bm25_plan(plan: Plan, params: Mapping[str, str], index: str) -> Plan:
    """A BM25 index's plan with the ``k1`` and ``b`` a request sets (Pyserini's REST parameters); refused on a
    dense index, which has no BM25 to set."""
    given = {option: params[option.name] for option in (BM25_K1, BM25_B) if option.name in params}
    if not given:
        return plan
    if plan.kind == IndexKind.DENSE:
        raise BadRequest(f"parameters 'k1' and 'b' set BM25: index {index!r} is dense")
    values = {f"bm25_{option.name}": parsed(option, raw, option.name) for option, raw in given.items()}
    return replace(plan, spec=replace(plan.spec, **values))


def parse_search(
    index: str,
    plan: Plan,
    params: Mapping[str, str],
    *,
    num_docs: int,
    teachers: Mapping[str, TeacherSpec],
    stores: Mapping[TeacherSpec, str | None],
    state: str | None,
    online: bool,
    limits: RequestLimits = RequestLimits(),
    client: str = ANONYMOUS,
) -> SearchRequest:
    """The checked request for ``index`` (``num_docs`` documents), whose ``plan`` is the index's part, on a server
    with ``teachers`` (each name a request may give one -> its spec), their ``stores``, and ``state`` (the file
    ``ttt-embed`` searches with); ``online``: a request naming no rewriter follows the server's policy; ``client``:
    who sent it."""
    query = check_query(params.get("query"))
    hits = parse_hits(params.get("hits"), limits.max_hits, num_docs)
    trace = params.get("trace") is not None and parsed(TRACE, params["trace"], "trace")
    qid = check_qid(params.get("qid"), query)
    shown = parse_shown(params)
    plan = bm25_plan(plan, params, index)
    rewriter = params.get("rewriter") or (ONLINE if online else "none")
    teacher = params.get("teacher") or None
    request = SearchRequest(index, plan, hits, query, qid, trace=trace, client=client, shown=shown)
    if rewriter == ONLINE:
        if not online:
            raise BadRequest("rewriter 'online' is the policy of a server started with --budget (on a dense index)")
        if stray := sorted(set(params) - COMMON):
            raise BadRequest(f"parameter {stray[0]!r}: the server's own policy takes no rewriter options")
        if teacher is not None:
            raise BadRequest("parameter 'teacher': the server's own policy uses the teacher it was started with")
        return replace(request, online=True)
    if rewriter not in available_rewriters():
        raise BadRequest(f"unknown rewriter {rewriter!r}; choose one of: {', '.join(available_rewriters())}")
    if plan.kind == IndexKind.BM25:
        if rewriter != "none" or teacher:
            raise BadRequest(f"index {index!r} is BM25: it takes no rewriter or teacher")
        if stray := sorted(set(params) - COMMON):
            raise BadRequest(f"parameter {stray[0]!r} does not apply to BM25 index {index!r}")
        return request
    if teacher is not None and teacher not in teachers:
        public = [name for name, spec in teachers.items() if name != str(spec)]
        started = ", ".join(public) if teachers else "none (start it with --teacher SPEC)"
        raise BadRequest(f"unknown teacher {teacher[:100]!r}; this server's teachers: {started}")
    spec = None if teacher is None else teachers[teacher]
    options, warnings = rewriter_options(rewriter, params)
    # a file a rewriter cannot search without is the server's: its --state (a TTT-Embed state)
    if files := [o for o in available_rewriters()[rewriter].options if o.role is Role.FILE and o.required]:
        if state is None:
            raise BadRequest(f"rewriter {rewriter!r} searches with the server's state: start it with --state FILE")
        options[files[0].name] = state
    try:
        planned = plan.with_rewriter(rewriter, options, spec, score_store=stores.get(spec) if spec else None)
    except UserError as e:
        raise as_request(e) from None
    limits.bound(planned)
    return replace(request, plan=planned, warnings=tuple(warnings))
