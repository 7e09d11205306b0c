"""TTT-Embed's pipeline: teacher judgments of base candidates become rewards; rewards become a state.

``judge_rewards`` takes the searcher whose base candidates are judged (a ``TourSearcher``: anything with
``encode``, ``search_vectors`` and ``docstore``), so this room never imports the searcher, which reads
the states it writes. ``fit_state`` encodes the rewarded queries with each task's index encoder.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import numpy as np

from tour_pyserini.encoders import describe, encoder_identity, same_encoder
from tour_pyserini.encoders.query import QueryEncoder
from tour_pyserini.errors import UserError
from tour_pyserini.files.digest import file_sha256
from tour_pyserini.index.query_side import query_encoder_spec
from tour_pyserini.ttt.fitting import RewardedQuery, fit_scope
from tour_pyserini.ttt.magnitude import (
    AUTO_SCOPE,
    CROSS_VALIDATED,
    MagnitudeConfig,
    Search,
    choose_scope,
    cross_validated_alpha,
)
from tour_pyserini.ttt.neighbours import NeighbourConfig
from tour_pyserini.ttt.objectives import FitConfig
from tour_pyserini.ttt.rewards import Rewards, TaskSource
from tour_pyserini.ttt.state import State
from tour_pyserini.ttt.vectors import DocVectors


def judge_rewards(
    searcher, teacher, topics: Sequence, pairs: Sequence, source: TaskSource, *, max_depth: int
) -> Rewards:
    """The teacher's score of each allocated (query, rank) pair of ``searcher``'s top ``max_depth``; a pair the
    teacher could not score is no reward, and a teacher that scored most pairs none is one line."""
    from tour_pyserini.results import Trace
    from tour_pyserini.teachers import ScoreCache
    from tour_pyserini.teachers.cache import mostly_unscored

    wanted: dict[str, list[int]] = {}
    for pair in pairs:
        wanted.setdefault(pair.qid, []).append(pair.rank)
    chosen = [t for t in topics if t.qid in wanted]
    rankings = searcher.search_vectors(searcher.encode([t.text for t in chosen]), max_depth)
    docids = [[ranking[r].docid for r in wanted[t.qid]] for t, ranking in zip(chosen, rankings)]
    cache = ScoreCache(teacher, searcher.docstore)
    scores = cache.score([t.qid for t in chosen], [t.text for t in chosen], docids, [Trace() for _ in chosen])
    unscored = sum(int(np.isnan(values).sum()) for values in scores)
    asked = sum(len(ids) for ids in docids)
    if mostly_unscored(unscored, asked):
        raise UserError(
            f"teacher {teacher.label} gave no score for {unscored} of the {asked} pairs it was asked: "
            "too few rewards to fit on"
        )
    rewards = Rewards(tasks={source.name: source})
    for topic, ids, values in zip(chosen, docids, scores):
        for docid, value in zip(ids, values):
            if not np.isnan(value):
                rewards.add(source.name, topic.qid, docid, float(value))
    return rewards


def fit_state(
    rewards: Rewards,
    texts: Mapping[str, Mapping[str, str]],
    scope: str,
    config: FitConfig,
    *,
    init: State | None = None,
    init_path: str | None = None,
    magnitude: MagnitudeConfig | None = None,
    mixing: NeighbourConfig | None = None,
    search: Search | None = None,
) -> tuple[State, float]:
    """The ``scope`` state fitted on ``rewards`` (query texts per task in ``texts``), warm-started from
    ``init``, its α chosen by ``magnitude``'s rule, mixed as ``mixing`` says (neighbours scope); and the seconds
    the fit took. Every task must be encoded by one encoder. Scope ``auto``: the scope and its α chosen by
    cross-validation over the rewarded queries (:func:`~tour_pyserini.ttt.magnitude.choose_scope`). ``search``
    re-searches a task's index for ``magnitude``'s ranking rule."""
    queries, encoder = [], None
    for task, judged in rewards.judgments.items():
        source = rewards.tasks[task]
        spec = query_encoder_spec(source.index)
        identity = encoder_identity(spec)
        if encoder is not None and not same_encoder(encoder, identity):
            raise UserError(
                f"task {task!r} is encoded with {describe(identity)}, the tasks before it with "
                f"{describe(encoder)}: one state serves one encoder"
            )
        encoder = identity
        docs = DocVectors(source.index)
        qids = list(judged)
        X = QueryEncoder.build(spec).encode([texts[task][q] for q in qids])
        for qid, x in zip(qids, X):
            ids = list(judged[qid])
            rewards_of = np.array([judged[qid][d] for d in ids])
            queries.append(RewardedQuery(task, qid, x, docs.get(ids), rewards_of, tuple(ids)))
    if encoder is None:
        raise UserError("no rewarded queries to fit a state on")
    provenance: dict[str, dict] = {
        path: {**info, "sha256": file_sha256(path)} for path, info in rewards.provenance.items()
    }
    if init is not None:
        if init_path is None:
            raise ValueError("a warm start's provenance names its state file: pass init_path with init")
        init.check_encoder(encoder, f"--init {init_path}")
        provenance["warm start"] = {"state": init_path, "sha256": file_sha256(init_path)}
    start = time.perf_counter()
    state = fit_queries(
        queries,
        scope,
        config,
        magnitude=magnitude,
        mixing=mixing,
        search=search,
        init=init,
        encoder=encoder,
        provenance=provenance,
    )
    return state, time.perf_counter() - start


def fit_queries(
    queries: Sequence[RewardedQuery],
    scope: str,
    config: FitConfig,
    *,
    magnitude: MagnitudeConfig | None = None,
    mixing: NeighbourConfig | None = None,
    search: Search | None = None,
    init: State | None = None,
    encoder: dict | None = None,
    provenance: dict | None = None,
) -> State:
    """The ``scope`` state fitted on rewarded ``queries`` (warm-started from ``init``), its α chosen by
    ``magnitude``'s rule, mixed as ``mixing`` says (neighbours scope); scope ``auto``: the scope and its α chosen by
    cross-validation. What was chosen is added to ``provenance``, which the state keeps with ``encoder``."""
    if scope == AUTO_SCOPE:  # the scope, and its α, chosen by cross-validation over the rewarded queries
        scope, choice, tried = choose_scope(queries, config, magnitude, mixing=mixing, search=search)
    else:
        cv = magnitude is not None and magnitude.alpha_rule in CROSS_VALIDATED
        choice = cross_validated_alpha(queries, scope, config, magnitude, mixing=mixing, search=search) if cv else None
        tried = {}
    keys, V, counts = fit_scope(queries, scope, config, init=init.by_key() if init is not None else None)
    provenance = dict(provenance or {})
    if choice is not None:
        provenance["magnitude"] = choice.to_json()
    if tried:
        provenance["scope"] = {"chosen": scope, **{s: c.to_json() for s, c in tried.items()}}
    chosen = None if choice is None else [choice.alpha] * len(keys)
    neighbours = scope == "neighbours"
    anchors = np.stack([q.x for q in queries]) if neighbours else None  # keys are in query order
    return State(
        scope,
        keys,
        V,
        counts,
        list(dict.fromkeys(q.task for q in queries)),
        config.to_json(),
        encoder or {},
        provenance,
        chosen,
        anchors,
        mixing if neighbours else None,
    )


def fitted_per_query(
    searcher,
    teacher,
    task: str,
    qids: Sequence[str],
    texts: Sequence[str],
    vectors,
    depth: int,
    k: int,
    scope: str = "query",
):
    """TTT-Embed's state of ``scope`` fitted at test time: ``teacher``'s scores of each query's base top ``depth``
    (``searcher``'s) fit the state, and each query is searched once more, moved by it, unit(x + alpha v). A query
    state moves each query by its own rewards alone (what a state gives a query judged as re-ranking its top
    ``depth`` would); a shared state moves each by all the queries' rewards, which only the teacher made. The top
    ``k`` of each query with its trace (the teacher's calls)."""
    from tour_pyserini.results import SearchResult, Trace
    from tour_pyserini.teachers import ScoreCache
    from tour_pyserini.ttt.state import shift_queries

    traces = [Trace() for _ in qids]
    found = searcher.search_candidates(vectors, depth)
    scores = ScoreCache(teacher, searcher.docstore).score(
        qids, texts, [f.docids for f in found], traces, list(vectors), searcher.query_encoder
    )
    queries = [
        RewardedQuery(task, qid, x, f.vectors, s)
        for qid, x, f, s in zip(qids, vectors, found, scores)
        if not np.isnan(s).all()
    ]
    state = fit_queries(queries, scope, FitConfig())
    moved = shift_queries(vectors, state.residuals(list(qids), None if scope == "global" else task, vectors))
    return [SearchResult(q, r, t) for q, r, t in zip(qids, searcher.search_vectors(moved, k), traces)]
