"""The server's searches as the HTTP routes and the MCP tools call them: checked, queued, batched, answered
in Pyserini's response shape.

:class:`SearchService` owns the :class:`~tour_pyserini.serve.batching.Batcher` whose thread builds and runs
the :class:`~tour_pyserini.serve.engine.Engine`; its coroutines wait for their job with a deadline.
"""

from __future__ import annotations

import asyncio
import logging
import queue
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tour_pyserini.errors import UserError
from tour_pyserini.files.runs import strictly_decreasing
from tour_pyserini.rewriters import available_rewriters
from tour_pyserini.serve.batching import Batcher
from tour_pyserini.serve.engine import Engine, ServeConfig, Served
from tour_pyserini.serve.requests import ONLINE, BadRequest, Plan, SearchRequest, parse_search

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 1


class Overloaded(Exception):
    """The queue is full: answered 503 with Retry-After."""


@dataclass(frozen=True)
class ServiceLimits:
    window: float = 0.005  # seconds the searching thread waits for more requests to batch with the first
    max_batch: int = 64
    max_queue: int = 256  # requests waiting; more are refused with 503
    timeout: float = 60.0  # seconds a request may wait and run; then 504


@dataclass(frozen=True)
class ExplainRequest:
    plan: Plan  # TOUR's plan: index, hits, rewriter, options, teacher
    query: str
    qid: str


def document_payload(doc) -> object:
    """A document as Pyserini's REST shows a parsed JSON document: its one field alone, else the fields."""
    return {"title": doc.title, "text": doc.text} if doc.title else doc.text


class EngineWorker:
    """The engine on the searching thread: a batch's searches run together, explanations one by one."""

    def __init__(self, config: ServeConfig):
        self.engine = Engine(config)

    def handle(self, payloads: Sequence[object]) -> list:
        out: list = [None] * len(payloads)
        searches = [i for i, p in enumerate(payloads) if isinstance(p, SearchRequest)]
        if searches:
            for i, served in zip(searches, self.engine.run([payloads[i] for i in searches])):
                out[i] = served
        for i, payload in enumerate(payloads):
            if isinstance(payload, ExplainRequest):
                try:
                    out[i] = self.engine.explain(payload.plan, payload.query, payload.qid)
                except UserError as e:
                    out[i] = e
        return out

    def close(self) -> None:
        self.engine.close()


class SearchService:
    """Checks requests, queues them for the searching thread, and shapes the answers."""

    def __init__(self, config: ServeConfig, limits: ServiceLimits = ServiceLimits(), *,
                 relevance: Mapping[str, Mapping[str, int]] | None = None,
                 topics: Sequence | None = None):  # fmt: skip
        self.config, self.limits = config, limits
        self.relevance = relevance or {}
        self.topics = list(topics or [])
        self.batcher = Batcher(lambda: EngineWorker(config), window=limits.window, max_batch=limits.max_batch,
                               max_queue=limits.max_queue)  # fmt: skip
        self.engine: Engine | None = None

    def start(self) -> None:
        """Open every index, teacher and store (on the searching thread); a bad one raises here."""
        self.batcher.start()
        self.engine = self.batcher.worker.engine

    def close(self) -> None:
        """Finish what is queued and in flight, then close the stores and the learner."""
        self.batcher.close()

    def handle(self, index: str):
        if index not in self.engine.indexes:
            raise BadRequest(f"unknown index {index!r}; this server's indexes: {', '.join(self.engine.indexes)}", 404)
        return self.engine.indexes[index]

    def check_search(self, index: str, params: Mapping[str, str]) -> SearchRequest:
        handle = self.handle(index)
        online = handle.dense and self.config.budget is not None
        return parse_search(index, params, num_docs=handle.num_docs, dense=handle.dense,
                            teachers=list(self.config.teachers), state=self.config.state, online=online)  # fmt: skip

    async def run(self, payload: object):
        """The searching thread's answer to ``payload``, or Overloaded, or TimeoutError."""
        try:
            future = self.batcher.submit(payload)
        except queue.Full:
            waiting = self.limits.max_queue
            raise Overloaded(f"{waiting} requests are waiting; retry in {RETRY_AFTER_SECONDS} s") from None
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.limits.timeout)
        except UserError as e:
            raise BadRequest(str(e)) from None

    async def search(self, index: str, params: Mapping[str, str]) -> dict:
        """Pyserini's ``/v1/{index}/search`` answer, with what served it: rewriter, teacher, state version."""
        request = self.check_search(index, params)
        served: Served = await self.run(request)
        handle = self.engine.indexes[index]
        docids = [h.docid for h in served.result.hits]
        docs = await asyncio.to_thread(handle.docstore.get, docids) if handle.docstore else [None] * len(docids)
        plan = request.plan
        trace = served.result.trace
        scores = strictly_decreasing([h.score for h in served.result.hits])  # as the search command writes them
        answer = {
            "api": "v1", "index": index, "query": {"text": request.query},
            "candidates": [{"docid": h.docid, "score": score, "rank": rank,
                            "doc": document_payload(doc) if doc else None}
                           for rank, (h, score, doc) in enumerate(zip(served.result.hits, scores, docs), 1)],
            "qid": request.qid, "rewriter": plan.rewriter,
            "teacher": self.engine.judge if plan.rewriter == ONLINE and trace.teacher_calls else plan.teacher,
            "teacher_calls": trace.teacher_calls,
            "state": None if served.state_version is None else {"version": served.state_version,
                                                                 "scope": self.config.learn},
        }  # fmt: skip
        if request.trace:
            answer["trace"] = trace.to_json()
        return answer

    async def document(self, index: str, docid: str) -> dict:
        handle = self.handle(index)
        if handle.docstore is None or docid not in handle.docstore:
            raise BadRequest(f"document {docid!r} is not in index {index!r}", 404)
        doc = handle.docstore[docid]
        return {"api": "v1", "index": index, "docid": docid, "doc": document_payload(doc)}

    async def explain(self, index: str, params: Mapping[str, str]) -> dict:
        """The explorer's view of TOUR on one query (rewriter tour-hard or tour-soft, and a teacher)."""
        params = dict(params)
        params.setdefault("rewriter", "tour-soft")
        if params["rewriter"] not in ("tour-hard", "tour-soft"):
            raise BadRequest("the explorer shows TOUR: parameter 'rewriter' is tour-hard or tour-soft")
        if not params.get("teacher"):
            if not self.config.teachers:
                raise BadRequest("the explorer needs a teacher: start the server with --teacher SPEC")
            params["teacher"] = self.config.teachers[0]
        request = self.check_search(index, params)
        qid = request.qid if params.get("qid") else self.topic_qid(request.query) or request.qid
        out = await self.run(ExplainRequest(request.plan, request.query, qid))
        handle = self.engine.indexes[index]
        shown = {d["docid"] for stage in out["stages"] for d in stage["ranking"]}
        shown |= {d["docid"] for d in out.get("rerank", {}).get("ranking", [])}
        docs = await asyncio.to_thread(handle.docstore.get, sorted(shown)) if handle.docstore else []
        judged = self.relevance.get(qid)
        return {"api": "v1", "index": index, "query": {"text": request.query}, "qid": qid,
                "rewriter": request.plan.rewriter, "teacher": request.plan.teacher, "k": dict(request.plan.options).get(
                    "depth", 100), **out, "titles": {d.docid: (d.title or d.text)[:120] for d in docs},
                "relevance": None if judged is None else {d: judged.get(d, 0) for d in shown}}  # fmt: skip

    def topic_qid(self, text: str) -> str | None:
        return next((t.qid for t in self.topics if t.text == text), None)

    def indexes(self) -> dict:
        rewriters = sorted(available_rewriters())
        return {"api": "v1", "indexes": [
            {"name": h.name, "kind": "dense" if h.dense else "bm25", "documents": h.num_docs,
             "teachers": list(h.teachers), "rewriters": rewriters if h.dense else ["none"],
             "policy": ONLINE if h.dense and self.config.budget is not None else "none"}
            for h in self.engine.indexes.values()]}  # fmt: skip

    def status(self) -> dict:
        engine = self.engine
        return {"api": "v1", "queued": self.batcher.jobs.qsize(), "batches": self.batcher.batches,
                "batched_requests": self.batcher.batched,
                "budget": None if engine.allocator is None else {"judgments_per_query": engine.allocator.budget,
                                                                 "served": engine.allocator.served,
                                                                 "judgments": engine.allocator.spent},
                "query_encoder": {"runtime": engine.config.encoder_runtime,
                                  "precision": engine.config.encoder_precision},
                "learning": engine.learner.status() if engine.learner else None}  # fmt: skip
