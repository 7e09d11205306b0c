"""The server's searches as the HTTP routes and the MCP tools call them: checked, queued, batched, answered
in Pyserini's response shape.

:class:`SearchService` owns the :class:`~tour_pyserini.serve.batching.Batcher` whose thread builds and runs
the :class:`~tour_pyserini.serve.engine.Engine`; its coroutines wait for their job with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import queue
import threading
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from tour_pyserini.errors import UserError
from tour_pyserini.files.runs import strictly_decreasing
from tour_pyserini.numbers import non_negative_float, param, positive_float, positive_int
from tour_pyserini.rewriters import Abandoned, available_rewriters
from tour_pyserini.serve.access import ANONYMOUS
from tour_pyserini.serve.batching import Batcher
from tour_pyserini.serve.engine import Engine, ServeConfig, Served
from tour_pyserini.serve.quotas import DataQuota, JudgedQueries
from tour_pyserini.serve.requests import (
    ONLINE,
    BadRequest,
    RequestLimits,
    SearchRequest,
    Shown,
    as_request,
    parse_search,
    parse_shown,
)

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 1


class Overloaded(Exception):
    """The queue is full: answered 503 with Retry-After."""


class ClientGone(Exception):
    """The client disconnected before its answer was ready: its search was abandoned."""


@dataclass(frozen=True)
class ServiceLimits:
    """How requests are queued, batched and timed, and how many judged queries a client may have a day."""

    window: float = param(
        0.005,
        non_negative_float,
        "how long the first waiting request waits for others to batch with",
        flag="--batch-window",
        metavar="SECONDS",
    )
    max_batch: int = param(64, positive_int, "requests searched together at most")
    max_queue: int = param(256, positive_int, "requests waiting at most; more get 503")
    timeout: float = param(
        60.0,
        positive_float,
        "a request not answered by then gets 504, and its search stops at its next step",
        metavar="SECONDS",
    )
    judged_per_day: int | None = param(
        None,
        positive_int,
        "queries one client (a key, or every client without one) may have a teacher judge in 24 hours; more get 429",
        default_text="no limit",
    )


class QuotaExceeded(Exception):
    """A client past its judged queries for the day: 429 with Retry-After."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


async def answer_or_gone(waiting: asyncio.Future, gone: Callable[[], Awaitable[bool]] | None):
    """The searching thread's answer, or :class:`ClientGone` once ``gone()`` says the client disconnected."""
    if gone is None:
        return await waiting
    while True:
        done, _ = await asyncio.wait({waiting}, timeout=0.25)
        if done:
            return waiting.result()
        if await gone():
            raise ClientGone()


@dataclass(frozen=True)
class ExplainRequest:
    """TOUR's checked request, explained step by step for the explorer page."""

    request: SearchRequest

    @property
    def abandoned(self) -> threading.Event:
        return self.request.abandoned


def document_payload(doc, shown: Shown) -> object:
    """A document as Pyserini's REST shows a parsed JSON document (its one field alone, else the fields), or with
    ``parse=false`` as stored (one JSON string); its text cut to ``shown.max_chars``."""
    text = doc.text if shown.max_chars is None else doc.text[: shown.max_chars]
    if not shown.parse:
        return json.dumps({"id": doc.docid, "title": doc.title, "text": text}, ensure_ascii=False)
    return {"title": doc.title, "text": text} if doc.title else text


def scored(name: str, pairs: Iterable[tuple[object, object]]) -> dict[str, float]:
    """Hits given as (docid, score) pairs, as {docid: score}: each docid a string and each score a finite number
    (a NaN would sort anywhere), else one line naming the argument."""
    out = {}
    for docid, score in pairs:
        if not isinstance(docid, str):
            raise BadRequest(f"argument {name!r}: docid {str(docid)[:40]!r} is not a string")
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise BadRequest(
                f"argument {name!r}: the score of {docid[:40]!r} is not a finite number ({str(score)[:40]})"
            )
        out[docid] = float(score)
    return out


class EngineWorker:
    """The engine on the searching thread: a batch's searches run together, explanations one by one."""

    def __init__(self, config: ServeConfig, judged: JudgedQueries):
        self.engine = Engine(config, judged)

    def handle(self, payloads: Sequence[object]) -> list:
        out: list = [None] * len(payloads)
        searches = [(i, p) for i, p in enumerate(payloads) if isinstance(p, SearchRequest)]
        if searches:
            for (i, _), served in zip(searches, self.engine.run([p for _, p in searches])):
                out[i] = served
        for i, payload in enumerate(payloads):
            if isinstance(payload, ExplainRequest):
                try:
                    out[i] = self.engine.explain(payload.request, payload.abandoned.is_set)
                except (UserError, Abandoned) as e:
                    out[i] = e
        return out

    def close(self) -> None:
        self.engine.close()


class SearchService:
    """Checks requests, queues them for the searching thread, and shapes the answers."""

    def __init__(
        self,
        config: ServeConfig,
        limits: ServiceLimits = ServiceLimits(),
        *,
        requests: RequestLimits | None = None,
        relevance: Mapping[str, Mapping[str, int]] | None = None,
        topics: Sequence | None = None,
    ):
        self.config, self.limits, self.requests = config, limits, requests or RequestLimits()
        self.relevance = relevance or {}
        self.topics = list(topics or [])
        self.judged = JudgedQueries(DataQuota(config.data_dir, config.max_data_mb), limits.judged_per_day)
        self.batcher = Batcher(
            lambda: EngineWorker(config, self.judged),
            window=limits.window,
            max_batch=limits.max_batch,
            max_queue=limits.max_queue,
        )
        self.started: Engine | None = None

    @property
    def engine(self) -> Engine:
        """The engine :meth:`start` opened on the searching thread."""
        if self.started is None:
            raise RuntimeError("the search service is not started: start() opens its engine")
        return self.started

    def start(self) -> None:
        """Open every index, teacher and store (on the searching thread); a bad one raises here."""
        self.started = self.batcher.start().engine

    def close(self) -> None:
        """Finish what is queued and in flight, then close the stores and the learner."""
        self.batcher.close()

    def handle(self, index: str):
        if index not in self.engine.indexes:
            raise BadRequest(
                f"unknown index {index[:100]!r}; this server's indexes: {', '.join(self.engine.indexes)}", 404
            )
        return self.engine.indexes[index]

    def check_search(self, index: str, params: Mapping[str, str], client: str = ANONYMOUS) -> SearchRequest:
        handle = self.handle(index)
        online = handle.dense and self.config.budget is not None
        request = parse_search(
            index,
            handle.plan,
            params,
            num_docs=handle.num_docs,
            teachers=handle.names,
            stores=handle.stores,
            state=self.config.state,
            online=online,
            limits=self.requests,
            client=client,
        )
        if request.plan.teacher is not None:
            if self.judged.data.full():
                raise BadRequest(
                    f"the server's data directory is full ({self.config.max_data_mb:g} MB): no query "
                    "is judged until it has room",
                    507,
                )
            if (wait := self.judged.day.retry_after(client)) is not None:
                raise QuotaExceeded(
                    f"more than {self.limits.judged_per_day} judged queries in 24 hours; retry in {wait} s", wait
                )
        return request

    async def run(
        self,
        payload: object,
        abandoned: threading.Event | None = None,
        gone: Callable[[], Awaitable[bool]] | None = None,
        teacher: str | None = None,
    ):
        """The searching thread's answer to ``payload``, or Overloaded, TimeoutError or ClientGone; on the last
        two ``abandoned`` is set, so that the search stops at its next step. A request was checked before it was
        queued: what fails while it is searched (a teacher's server, an index) is the server's, a 502 whose line
        names no path or address (``teacher``: the public name of the teacher the request asks), the details going
        to the server's log."""
        try:
            future = self.batcher.submit(payload)
        except queue.Full:
            waiting = self.limits.max_queue
            raise Overloaded(f"{waiting} requests are waiting; retry in {RETRY_AFTER_SECONDS} s") from None
        try:
            return await asyncio.wait_for(answer_or_gone(asyncio.wrap_future(future), gone), self.limits.timeout)
        except UserError as e:
            log.warning("a search failed: %s", e)
            what = f"its teacher {teacher!r}" if teacher else "its search"
            message = f"the request was checked, but {what} failed; the server's log has the details"
            raise BadRequest(message, 502) from None
        except (TimeoutError, ClientGone):
            if abandoned is not None:
                abandoned.set()
            raise

    async def run_judged(self, request: SearchRequest, payload: object, gone: Callable[[], Awaitable[bool]] | None):
        """:meth:`run`, with a request that names a teacher given back to its client's day when the search
        fails on its way (the queue full, the teacher failing): judged by nobody, it costs nothing. One whose client
        left or timed out may have been judged, and stays counted."""
        teacher = self.engine.indexes[request.index].public(request.plan.teacher)
        try:
            return await self.run(payload, request.abandoned, gone, teacher)
        except (TimeoutError, ClientGone):
            raise
        except BaseException:
            if request.plan.teacher is not None:
                self.judged.give_back(request.client)
            raise

    async def search(
        self,
        index: str,
        params: Mapping[str, str],
        client: str = ANONYMOUS,
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> dict:
        """Pyserini's ``/v1/{index}/search`` answer, with what served it: rewriter, teacher, state version.
        ``client``: who asks; ``gone()``: whether the client has disconnected."""
        request = self.check_search(index, params, client)
        served: Served = await self.run_judged(request, request, gone)
        handle = self.engine.indexes[index]
        docids = [h.docid for h in served.result.hits]
        docs = await asyncio.to_thread(handle.docstore.get, docids) if handle.docstore else [None] * len(docids)
        teacher = request.plan.teacher
        trace = served.result.trace
        if teacher is not None and trace.unjudged:  # never a retriever order that looks judged
            self.judged.give_back(client)
            raise BadRequest(f"teacher {handle.public(teacher)!r} scored none of the candidates", 502)
        scores = strictly_decreasing([h.score for h in served.result.hits])  # as the search command writes them
        answer: dict[str, object] = {
            "api": "v1",
            "index": index,
            "query": {"text": request.query},
            "candidates": [
                {
                    "docid": h.docid,
                    "score": score,
                    "rank": rank,
                    "doc": document_payload(doc, request.shown) if doc else None,
                }
                for rank, (h, score, doc) in enumerate(zip(served.result.hits, scores, docs), 1)
            ],
            "qid": request.qid,
            "rewriter": request.rewriter,
            "teacher": handle.public(
                (self.engine.policy_teacher if trace.teacher_calls and not trace.unjudged else None)
                if request.online
                else teacher
            ),
            "teacher_calls": trace.teacher_calls,
            "state": None
            if served.state_version is None
            else {"version": served.state_version, "scope": self.config.learn},
        }
        if request.trace:
            answer["trace"] = trace.to_json()
        if request.warnings:
            answer["warnings"] = list(request.warnings)
        return answer

    async def document(self, index: str, docid: str, params: Mapping[str, str] | None = None) -> dict:
        """Pyserini's ``/v1/{index}/doc/{docid}`` answer; ``params``: ``parse`` and ``max_doc_length``."""
        shown = parse_shown(params or {})
        handle = self.handle(index)
        if handle.docstore is None or docid not in handle.docstore:
            cut = docid if len(docid) <= 100 else f"{docid[:100]}..."
            raise BadRequest(f"document {cut!r} is not in index {index!r}", 404)
        doc = handle.docstore[docid]
        return {"api": "v1", "index": index, "docid": docid, "doc": document_payload(doc, shown)}

    async def explain(
        self,
        index: str,
        params: Mapping[str, str],
        client: str = ANONYMOUS,
        gone: Callable[[], Awaitable[bool]] | None = None,
    ) -> dict:
        """The explorer's view of TOUR on one query (rewriter tour-hard or tour-soft, and a teacher)."""
        params = dict(params)
        params.setdefault("rewriter", "tour-soft")
        if params["rewriter"] not in ("tour-hard", "tour-soft"):
            raise BadRequest("the explorer shows TOUR: parameter 'rewriter' is tour-hard or tour-soft")
        if not params.get("teacher"):
            if not self.config.teachers:
                raise BadRequest("the explorer needs a teacher: start the server with --teacher SPEC")
            params["teacher"] = str(self.config.teachers[0])
        request = self.check_search(index, params, client)
        if not params.get("qid"):  # a topic's own qid finds its judgments
            request = replace(request, qid=self.topic_qid(request.query) or request.qid)
        out = await self.run_judged(request, ExplainRequest(request), gone)
        handle = self.engine.indexes[index]
        shown = {d["docid"] for stage in out["stages"] for d in stage["ranking"]}
        shown |= {d["docid"] for d in out.get("rerank", {}).get("ranking", [])}
        docs = await asyncio.to_thread(handle.docstore.get, sorted(shown)) if handle.docstore else []
        judged = self.relevance.get(request.qid)
        return {
            "api": "v1",
            "index": index,
            "query": {"text": request.query},
            "qid": request.qid,
            "rewriter": request.rewriter,
            "teacher": handle.public(request.plan.teacher),
            "depth": request.plan.rewriter_config.depth,
            **out,
            "titles": {d.docid: (d.title or d.text)[:120] for d in docs},
            "relevance": None if judged is None else {d: judged.get(d, 0) for d in shown},
        }

    def topic_qid(self, text: str) -> str | None:
        return next((t.qid for t in self.topics if t.text == text), None)

    def index_info(self, index: str) -> dict:
        """One index as :meth:`indexes` lists it."""
        self.handle(index)
        return next(i for i in self.indexes()["indexes"] if i["name"] == index)

    def qrels_of(self, index: str, qid: str) -> dict[str, int]:
        """The judgments of ``qid`` among the qrels the server was started with (--qrels), {} if none."""
        self.handle(index)
        if not self.relevance:
            raise BadRequest("this server has no qrels: start it with --topics and --qrels")
        return dict(self.relevance.get(qid, {}))

    def eval_hits(self, index: str, measure: str, qid: str, hits: Mapping[str, float]) -> float:
        """``measure`` (an ir-measures name) of one query's ``hits`` ({docid: score}) against the server's qrels."""
        from tour_pyserini.eval.judge import QrelsJudge

        judged = self.qrels_of(index, qid)
        if not judged:
            raise BadRequest(f"query {qid[:100]!r} has no judgments in this server's qrels")
        scored("hits", hits.items())
        try:
            judge = QrelsJudge({qid: judged}, [measure])
        except UserError as e:
            raise as_request(e) from None
        values = judge.per_query({qid: scored("hits", hits.items())})
        return values[str(judge.measures[0])][qid]

    @staticmethod
    def fuse(first: Sequence[Mapping], second: Sequence[Mapping], k: int) -> list[dict]:
        """Pyserini's normalised fusion of two result lists of {"docid", "score"}, the top ``k``."""
        from tour_pyserini.search.fusion import hybrid_fusion

        if k < 1:
            raise BadRequest(f"k must be positive, got {k}")
        runs = []
        for name, hits in (("hits1", first), ("hits2", second)):
            if not all(isinstance(h, Mapping) and "docid" in h and "score" in h for h in hits):
                raise BadRequest(f"argument {name!r} must be a list of {{'docid': ..., 'score': number}}")
            runs.append(scored(name, [(h["docid"], h["score"]) for h in hits]))
        return [{"docid": d, "score": s} for d, s in hybrid_fusion(runs[0], runs[1], k)]

    def indexes(self) -> dict:
        rewriters = sorted(available_rewriters())
        return {
            "api": "v1",
            "indexes": [
                {
                    "name": h.name,
                    "kind": "dense" if h.dense else "bm25",
                    "documents": h.num_docs,
                    "teachers": h.labels,
                    "rewriters": rewriters if h.dense else ["none"],
                    "policy": ONLINE if h.dense and self.config.budget is not None else "none",
                }
                for h in self.engine.indexes.values()
            ],
        }

    def status(self) -> dict:
        engine = self.engine
        return {
            "api": "v1",
            "queued": self.batcher.jobs.qsize(),
            "batches": self.batcher.batches,
            "batched_requests": self.batcher.batched,
            "budget": None
            if engine.allocator is None
            else {
                "judgments_per_query": engine.allocator.budget,
                "served": engine.allocator.served,
                "judgments": engine.allocator.spent,
            },
            "query_encoder": engine.config.query_encoding or None,
            "data": self.judged.data.status(),
            "learning": engine.learner.status() if engine.learner else None,
        }
