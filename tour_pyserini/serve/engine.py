"""What the server searches with: its indexes, the teachers with their score stores, the pipelines the requests
ask for, and the batch step that runs checked requests.

Everything is assembled by the composition root (:mod:`tour_pyserini.pipeline`) through one
:class:`~tour_pyserini.pipeline.Resources`, so an index, a query encoder, a teacher or a store is opened once
whatever the requests ask; a request's checked :class:`~tour_pyserini.pipeline.Plan` is the key of its pipeline.
Everything here is opened and used by the one thread that searches (:class:`~tour_pyserini.serve.batching.Batcher`):
the encoder, Faiss, the teachers and SQLite all run there, so requests never oversubscribe the cores, and a batch of
many clients' queries is encoded, searched and judged together.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.index.docstore import DocStore
from tour_pyserini.index.layout import DOCSTORE_FILE, IndexKind
from tour_pyserini.pipeline import Pipeline, Plan, build, build_teacher
from tour_pyserini.results import SearchResult, StopReason, Trace, timed
from tour_pyserini.rewriters import Abandoned, StoppableIndex
from tour_pyserini.serve.access import ANONYMOUS, check_index_name
from tour_pyserini.serve.quotas import DataQuota, JudgedQueries
from tour_pyserini.serve.requests import SearchRequest
from tour_pyserini.teachers import Teacher, TeacherSpec
from tour_pyserini.ttt.allocation import JUDGE_DEPTH, MAX_DEPTH, Allocator
from tour_pyserini.ttt.magnitude import RANKING_DEPTH
from tour_pyserini.ttt.online import MIN_JUDGMENTS, OnlineLearner, Reward, usable

if TYPE_CHECKING:
    from tour_pyserini.search.bm25 import Bm25Searcher
    from tour_pyserini.search.searcher import TourSearcher

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeConfig:
    """A server's indexes, teachers and policy. Each index is served as the search command would search it: its
    index's :class:`~tour_pyserini.pipeline.Plan` (its query encoder and the teachers' flags, checked once, the
    index opened), all sharing one :class:`~tour_pyserini.pipeline.Resources`, and ``teachers`` planned once for all
    of them. ``budget`` (judgments per served query) makes requests that name no rewriter follow the server's
    policy: the first teacher judges the top candidates of the share of queries the budget pays for, and re-ranks
    them; ``learn`` (a TTT-Embed scope) also keeps those judgments and refits a state from them, which moves every
    later query."""

    plans: tuple[Plan, ...]  # one per index, in the order given
    teachers: tuple[TeacherSpec, ...] = ()
    data_dir: str = "serve-data"  # score stores (scores/), and with learn the states and rewards (learn/)
    state: str | None = None  # the TTT-Embed state rewriter=ttt-embed searches with
    budget: float | None = None
    learn: str | None = None
    judge_depth: int = JUDGE_DEPTH.default
    max_depth: int = MAX_DEPTH.default
    refit_steps: int = 100  # warm-started refits; the first fit takes FitConfig's 300
    learn_from_anonymous: bool = False  # with learn: keep the judgments of clients without a key too
    keyed_clients: frozenset[str] = frozenset()  # with learn: the fingerprints of the keys accepted now
    max_key_share: float = 0.2  # with learn: the most of a refit's queries one client may give
    alpha_rule: str = "ranking"  # with learn: how a shared state's α is chosen (and whether it is served)
    max_data_mb: float | None = None  # disk data_dir may use; past it nothing is judged (None: no limit)
    names: Mapping[str, str] = field(default_factory=dict)  # path -> route name, where not the base name

    @property
    def indexes(self) -> tuple[str, ...]:
        return tuple(plan.spec.index for plan in self.plans)

    @property
    def query_encoding(self) -> dict:
        """What runs the dense indexes' query encoders, and in which arithmetic: one flag for all, which auto
        may resolve to another runtime for another index's encoder (a hub id, a class OpenVINO does not run), so
        each names every value the indexes resolved to."""
        dense = [plan for plan in self.plans if plan.kind == IndexKind.DENSE]
        if not dense:
            return {}
        return {
            "runtime": ", ".join(sorted({plan.encoder_runtime for plan in dense})),
            "precision": ", ".join(sorted({plan.encoder_precision for plan in dense})),
        }


@dataclass
class ServedIndex:
    """One index as routes name it, with its plan, its searcher and the server's teachers over it; ``stores``: the
    score store of each teacher whose pair scores stand alone (None for one that scores pairs relative to each
    other)."""

    name: str  # the directory's base name, or its name in --config
    path: Path
    plan: Plan  # the index's part: requests add their rewriter to it
    searcher: TourSearcher | Bm25Searcher  # Bm25Searcher for a BM25 index
    docstore: DocStore | None
    teachers: dict[TeacherSpec, Teacher] = field(default_factory=dict)  # as the server was started
    stores: dict[TeacherSpec, str | None] = field(default_factory=dict)

    @property
    def dense(self) -> bool:
        return self.plan.kind == IndexKind.DENSE

    @property
    def dense_searcher(self) -> TourSearcher:
        """The searcher of a dense index, which encodes its queries."""
        from tour_pyserini.search.searcher import TourSearcher

        if not isinstance(self.searcher, TourSearcher):
            raise ValueError(f"index {self.name} is a BM25 index: it encodes no queries")
        return self.searcher

    @property
    def num_docs(self) -> int:
        from tour_pyserini.search.bm25 import Bm25Searcher

        return self.searcher.lucene.num_docs if isinstance(self.searcher, Bm25Searcher) else self.plan.num_docs

    @property
    def names(self) -> dict[str, TeacherSpec]:
        """How a request may name each teacher: by its public name (its label, which names no local path or URL)
        or by its spec as the server was started."""
        return {
            **{str(spec): spec for spec in self.teachers},
            **{teacher.label: spec for spec, teacher in self.teachers.items()},
        }

    @property
    def labels(self) -> list[str]:
        """The teachers' public names, as listings show them."""
        return list(dict.fromkeys(teacher.label for teacher in self.teachers.values()))

    def public(self, spec: TeacherSpec | None) -> str | None:
        return None if spec is None else self.teachers[spec].label


def slug(text: str) -> str:
    """A file name for ``text`` (a teacher spec): readable, and unique by a short hash."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:60]
    return f"{readable}.{hashlib.sha1(text.encode('utf-8')).hexdigest()[:8]}"


def index_names(paths: Sequence[str], given: Mapping[str, str]) -> list[str]:
    """Route names of ``paths`` (the ``given`` name, else the directory's base name), refused when one cannot name a
    route or two would share one."""
    names = [given.get(p) or check_index_name(Path(p).name, f"--index {p}: its directory's name") for p in paths]
    if len(set(names)) != len(names):
        raise UserError(
            f"--index: two indexes are named {next(n for n in names if names.count(n) > 1)!r}; "
            "routes name an index by its directory's base name (or its name in --config)"
        )
    return names


def open_index(plan: Plan, name: str, config: ServeConfig) -> ServedIndex:
    """One index, served as ``name``: its searcher, and where it is dense, the server's teachers over it with the
    path of each one's score store, opened now (its file counts in the data directory from the start)."""
    path = plan.spec.index
    store_path = Path(path) / DOCSTORE_FILE
    docstore = DocStore(store_path) if store_path.exists() else None
    handle = ServedIndex(name, Path(path), plan, build(plan).searcher, docstore)
    if not handle.dense:
        return handle
    for spec in config.teachers:
        teacher = handle.teachers[spec] = build_teacher(plan, spec)
        handle.stores[spec] = None
        if teacher.pairwise:  # judgments kept across requests and restarts: no pair is paid for twice
            store = handle.stores[spec] = str(Path(config.data_dir) / "scores" / f"{name}.{slug(str(spec))}.sqlite")
            plan.resources.store(store, teacher.fingerprint)
        else:
            log.warning("teacher %s scores pairs relative to each other: its judgments are not stored", teacher.label)
    return handle


def unique_rounds(requests: Sequence[SearchRequest]) -> list[list[int]]:
    """Positions of ``requests`` in rounds whose qids are unique (two clients may send the same query at once)."""
    rounds: list[list[int]] = []
    seen: list[set[str]] = []
    for i, request in enumerate(requests):
        r = next((r for r, qids in enumerate(seen) if request.qid not in qids), len(rounds))
        if r == len(rounds):
            rounds.append([])
            seen.append(set())
        rounds[r].append(i)
        seen[r].add(request.qid)
    return rounds


@dataclass
class Served:
    """One request's ranking, and what served it: the state version (0: none) and the teacher's judgments."""

    result: SearchResult
    state_version: int | None = None


class Engine:
    """The server's indexes, teachers, stores, pipelines and policy; one thread builds and uses it. ``judged``: whose
    queries the policy may have judged now (a client's daily quota, the data directory's room)."""

    def __init__(self, config: ServeConfig, judged: JudgedQueries | None = None):
        self.config = config
        self.judged = judged or JudgedQueries(DataQuota(config.data_dir, config.max_data_mb), None)
        names = index_names(config.indexes, config.names)
        for plan in config.plans:  # every score store the pipelines open writes within the data directory's bound
            plan.resources.room = self.judged.data.writing
        self.indexes = {name: open_index(plan, name, config) for plan, name in zip(config.plans, names)}
        self.pipelines: dict[Plan, Pipeline] = {}
        self.allocator = Allocator(config.budget, config.judge_depth, config.max_depth) if config.budget else None
        self.learner = self.open_learner(config.learn) if config.learn else None

    @property
    def policy_teacher(self) -> TeacherSpec | None:
        """The teacher the server's policy asks: the first one it was started with."""
        return self.config.teachers[0] if self.config.teachers else None

    @property
    def policy(self) -> TeacherSpec:
        """The policy's teacher, of a server whose policy judges (a budget, which is given with a teacher)."""
        if self.policy_teacher is None:
            raise ValueError("the server's policy judges with a teacher, and the server was started with none")
        return self.policy_teacher

    def teaches(self, client: str) -> bool:
        """Whether the judgments of ``client``'s queries may teach the learner: a key accepted now, or anonymous
        clients where the server learns from them on purpose. The one rule, for rewards served and on disk."""
        return client in self.config.keyed_clients or (client == ANONYMOUS and self.config.learn_from_anonymous)

    @property
    def policy_digest(self) -> str:
        """The policy's teacher as rewards record it: a digest of its fingerprint."""
        handle = next(h for h in self.indexes.values() if h.dense)
        return hashlib.sha256(handle.teachers[self.policy].fingerprint.encode("utf-8")).hexdigest()[:16]

    def open_learner(self, scope: str) -> OnlineLearner:
        from tour_pyserini.encoders import encoder_identity
        from tour_pyserini.ttt.vectors import DocVectors

        dense = [h for h in self.indexes.values() if h.dense]
        identities = {}
        for h in dense:
            if (encoder := h.dense_searcher.encoder) is None:
                raise UserError(f"--learn: index {h.name} has no query encoder to fit a state to (encoded queries)")
            identities[h.name] = encoder_identity(encoder)
        if len({repr(sorted(i.items())) for i in identities.values()}) > 1:
            raise UserError("--learn: the dense indexes are encoded with different encoders; one state serves one")
        vectors = {h.name: DocVectors(h.path) for h in dense}
        identity = next(iter(identities.values()))
        learner = OnlineLearner(
            Path(self.config.data_dir) / "learn",
            scope,
            identity,
            encode=lambda task, texts: self.indexes[task].dense_searcher.encode(texts),
            doc_vectors=lambda task, docids: vectors[task].get(docids),
            tasks=list(vectors),
            refit_steps=self.config.refit_steps,
            max_key_share=self.config.max_key_share,
            trusted=self.teaches,
            teacher=self.policy_digest,
            room=self.judged.data.writing,
            alpha_rule=self.config.alpha_rule,
            search=lambda task, vectors: [
                [h.docid for h in hits]
                for hits in self.indexes[task].dense_searcher.search_vectors(vectors, RANKING_DEPTH)
            ],
        )
        learner.start()
        return learner

    def pipeline(self, plan: Plan) -> Pipeline:
        """The pipeline of a request's plan, built once (pipelines keep no state between searches, and those of one
        index share its searcher, teachers and stores)."""
        if plan not in self.pipelines:
            self.pipelines[plan] = build(plan)
        return self.pipelines[plan]

    def rerank_plan(self, handle: ServedIndex, depth: int, teacher: TeacherSpec) -> Plan:
        """Re-ranking the top ``depth`` with ``teacher``: the policy's judged share, and the explorer's baseline."""
        return handle.plan.with_rewriter("rerank", {"depth": depth}, teacher, score_store=handle.stores[teacher])

    def run(self, requests: Sequence[SearchRequest]) -> list[Served]:
        """Search ``requests`` (any indexes and plans), in order: each index's texts are encoded together, then
        each plan's queries are rewritten and searched together."""
        out: list[Served | None] = [None] * len(requests)
        for name in dict.fromkeys(r.index for r in requests):
            members = [i for i, r in enumerate(requests) if r.index == name]
            handle = self.indexes[name]
            for round_ in unique_rounds([requests[i] for i in members]):
                positions = [members[i] for i in round_]
                for i, served in zip(positions, self.run_index(handle, [requests[i] for i in positions])):
                    out[i] = served
        return out  # type: ignore[return-value]

    def run_index(self, handle: ServedIndex, requests: Sequence[SearchRequest]) -> list[Served]:
        """One index's requests: their texts encoded together (a dense index), then each group of requests that
        ask for the same search (plan, hits, policy) searched together."""
        texts, qids = [r.query for r in requests], [r.qid for r in requests]
        traces = [Trace() for _ in requests]
        vectors = None
        if handle.dense:
            with timed(traces, "encode"):
                vectors = handle.dense_searcher.encode(texts)
        out: list[Served | None] = [None] * len(requests)
        for group in dict.fromkeys(r.group for r in requests):
            at = [i for i, r in enumerate(requests) if r.group == group]
            members = [requests[i] for i in at]

            def stop(members=members) -> bool:  # every client of the group has had its 504, or has gone
                return all(r.abandoned.is_set() for r in members)

            try:
                if members[0].online:
                    assert vectors is not None  # the policy serves dense indexes, whose texts are encoded above
                    served = self.run_online(handle, members, vectors[at], [traces[i] for i in at], stop)
                else:
                    pipeline = self.pipeline(members[0].plan)
                    found = pipeline.run(
                        [texts[i] for i in at],
                        [qids[i] for i in at],
                        members[0].hits,
                        vectors=None if vectors is None else vectors[at],
                        traces=[traces[i] for i in at] if handle.dense else None,
                        stop=stop if handle.dense else None,
                        encoded=True,  # the index's query encoder is every one of its pipelines'
                    )
                    served = [Served(result) for result in found]
            except Exception as e:  # noqa: BLE001 - this group's clients get the error; the batch's others go on
                if not isinstance(e, UserError | Abandoned):
                    log.exception("searching %d queries of %s failed", len(at), members[0].plan.spec)
                served = [e] * len(at)  # type: ignore[list-item]
            for i, s in zip(at, served):
                out[i] = s
        return out  # type: ignore[return-value]

    def run_online(
        self,
        handle: ServedIndex,
        requests: Sequence[SearchRequest],
        vectors: np.ndarray,
        traces: list[Trace],
        stop: Callable[[], bool],
    ) -> list[Served]:
        """The server's policy: the current state moves the queries; the budget's share is judged and re-ranked
        (its judgments kept as rewards when learning, from trusted clients). A teacher that fails or scores
        nothing leaves those queries in the state's order, unjudged."""
        texts, qids, clients = [r.query for r in requests], [r.qid for r in requests], [r.client for r in requests]
        hits = requests[0].hits
        version, raw = None, vectors
        if self.learner is not None:
            vectors, version = self.learner.shift(handle.name, qids, clients, vectors)
        grants = [self.grant(handle.name, client) for client in clients]
        out: list[Served | None] = [None] * len(qids)
        rewards, rewarded = [], []
        for depth in dict.fromkeys(grants):
            at = [i for i, g in enumerate(grants) if g == depth]

            def search(plan: Plan, at=at) -> list[SearchResult]:
                return self.pipeline(plan).run(
                    [texts[i] for i in at],
                    [qids[i] for i in at],
                    hits,
                    vectors=vectors[at],
                    traces=[traces[i] for i in at],
                    stop=stop,
                )

            results, failed = None, False
            if depth:
                try:
                    results = search(self.rerank_plan(handle, depth, self.policy))
                except Abandoned:
                    raise
                except Exception as e:  # noqa: BLE001 - the policy serves the state's order instead
                    log.warning(
                        "the policy's teacher %s failed (%s: %s); %d queries served unjudged",
                        handle.public(self.policy_teacher),
                        type(e).__name__,
                        str(e)[:200],
                        len(at),
                    )
                    for i in at:  # what the failed attempt recorded is no judgment: only its time stays
                        traces[i] = Trace(seconds=traces[i].seconds, stop_reason=StopReason.TEACHER_FAILED)
                    failed = True
            if results is None:
                results = search(handle.plan)
            for i, result in zip(at, results):
                out[i] = Served(result, version)
                if depth and (failed or result.trace.unjudged):  # granted, but judged by nobody
                    assert self.allocator is not None  # it granted the depth
                    self.allocator.refund(handle.name, depth)
                    self.judged.give_back(clients[i])
                    continue
                judgments = usable(result.trace.judgments)
                if depth and self.teaches(clients[i]) and len(judgments) >= MIN_JUDGMENTS:
                    rewards.append(Reward(handle.name, qids[i], texts[i], judgments, clients[i], self.policy_digest))
                    rewarded.append(i)
        if self.learner is not None:
            self.learner.add(rewards, raw[rewarded])  # on disk before the answers leave
        return out  # type: ignore[return-value]

    def grant(self, task: str, client: str) -> int:
        """Judgments the policy spends on the next served query of ``task`` from ``client`` (0: none): the budget's
        share, if the data directory has room and the client is within its day (a grant refused is returned to the
        budget, uncounted)."""
        if self.allocator is None:
            return 0
        depth = self.allocator.next(task)
        if depth and not self.judged.take(client):
            self.allocator.refund(task, depth)
            return 0
        return depth

    def explain(self, request: SearchRequest, stop: Callable[[], bool] = lambda: False) -> dict:
        """TOUR's stages on one query and re-ranking at its teacher calls (:mod:`tour_pyserini.serve.explain`);
        ``stop()``: asked before each search (its client has gone)."""
        from tour_pyserini.serve.explain import explain

        handle, plan = self.indexes[request.index], request.plan
        depth = plan.rewriter_config.depth

        def rerank_at(calls: int):
            return self.pipeline(self.rerank_plan(handle, min(calls, handle.num_docs), plan.asked_teacher)).rewriter

        tour = self.pipeline(plan).rewriter
        if tour is None:  # BM25's: check_explain asks a dense index
            raise UserError(f"index {handle.name} is a BM25 index: TOUR's stages are a dense search's")
        show = min(max(request.hits, depth), handle.num_docs)  # TOUR's final ranking as deep as its searches
        searcher = handle.dense_searcher
        return explain(
            StoppableIndex(searcher, stop),
            searcher.encode([request.query]),
            request.query,
            request.qid,
            tour=tour,
            rerank_at=rerank_at,
            hits=show,
            show=show,
        )

    def close(self) -> None:
        if self.learner is not None:
            self.learner.close()
        for plan in self.config.plans[:1]:  # one Resources for every index
            plan.resources.close()
