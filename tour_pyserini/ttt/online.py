"""Online TTT-Embed: the teacher's judgments of served queries, refitted into versioned states as they arrive.

A served query is searched with unit(x + α_g v_g) of the current state (none before the first fit). The
judgments the budget buys for trusted clients (the engine decides whom) are appended to a rewards log (JSON
lines, each flushed and fsynced before the query's answer leaves), and a background thread refits the state,
warm-started from the current one (``ttt fit --init``: the same objective and hyper-parameters).

Four rules keep one client from steering what every client is served:

- every query is its client's: its key is (task, client/qid), so no client writes another's query state;
- a refit uses at most ``max_key_share`` of its queries from any one client (each client's most recent ones,
  up to the largest count that keeps every share within the cap: with a share of 0.2, five clients at least);
- a global, task or neighbours state moves queries nobody judged, so its α is chosen by cross-validation over
  the rewarded queries it is fitted on (:mod:`tour_pyserini.ttt.magnitude`): by default (rule ``ranking``) by what
  it does to held-out rewarded queries' re-searched top 10, where a document no teacher judged gains nothing
  (rule ``cv``: by their agreement with the teacher on their judged candidates alone); when no α helps them
  significantly, the fitted state is not served, and the status says what was measured;
- one judged query in ``HELD_BACK`` (the 1st, 6th, 11th, ... to arrive) is never fitted on: a new state is served
  only if it orders the held-back queries' candidates as the teacher does at least as often as the state it
  would replace (:mod:`tour_pyserini.ttt.agreement`); otherwise it is dropped and the status says so. A query
  state moves only its own query, so held-back queries cannot tell against one: the guard always passes it.

A served state is written as the next version (``state-NNNNNN.safetensors``, fsynced, renamed into place) and
only then swapped in; a batch of queries reads the current state once, so each query is served by one
complete version, which its response names. A state records every client whose rewards it (or a state it was
warm-started from) was fitted or checked on, the teacher that judged them and the share cap it was fitted under.

The rules hold across restarts, whatever flags the log and the states were written under. On a restart the log
is read again: a line torn by a crash is dropped, and rewards of indexes no longer served, of another teacher, or
of a client no longer trusted (a key no longer in the key file; anonymous clients without
``--learn-from-anonymous``) stay in the log unused. The newest version that loads and that was fitted only
from trusted clients, by the same teacher, under a share cap no looser, is served (others are skipped, with a
warning), and rewards it has not seen are fitted at once. A fit that fails is reported in the status and tried
again when new rewards arrive. A write the data directory has no room for is skipped: rewards not written are
not learned, a state not written is not served.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.teachers.store import Room
from tour_pyserini.ttt.agreement import mean_agreement
from tour_pyserini.ttt.fitting import RewardedQuery, fit_scope
from tour_pyserini.ttt.magnitude import CROSS_VALIDATED, MagnitudeConfig, Search, cross_validated_alpha
from tour_pyserini.ttt.objectives import FitConfig
from tour_pyserini.ttt.state import State, shift_queries

log = logging.getLogger(__name__)

ANONYMOUS = "anonymous"  # the client of requests without a key (a server's access check names every client)

REWARDS_LOG = "rewards.jsonl"
STATE_NAME = re.compile(r"state-(\d{6})\.safetensors")
KEEP_VERSIONS = 5  # older versions are removed once a newer one is complete
HELD_BACK = 5  # one judged query in this many checks new states instead of fitting them
MIN_JUDGMENTS = 2  # a rewarded query's judgments must order at least one pair to teach anything


@dataclass(frozen=True)
class Reward:
    """The teacher's judgments of one served query's candidates, and the client whose query it was."""

    task: str
    qid: str
    text: str
    judgments: dict[str, float]
    client: str = ANONYMOUS
    teacher: str = ""  # which teacher judged: a digest of its fingerprint (the log may outlive a change of teacher)

    @property
    def key(self) -> tuple[str, str]:
        """Where the learner keeps it: (task, client/qid), so that one client's qid is not another's."""
        return self.task, learned_qid(self.client, self.qid)


def usable(judgments: Mapping[str, float]) -> dict[str, float]:
    """The judgments a reward keeps: the finite ones (a NaN is a pair the teacher gave no score)."""
    return {d: s for d, s in judgments.items() if np.isfinite(s)}


def learned_qid(client: str, qid: str) -> str:
    return f"{client}/{qid}"


def per_client_cap(counts: Mapping[str, int], share: float) -> int:
    """The most queries any one client may give a fit: the largest m with m <= share * sum(min(c, m)) (no cap
    at share 1).

    >>> per_client_cap({"a": 10, "b": 10, "c": 10, "d": 10, "e": 10}, 0.2)
    10
    >>> per_client_cap({"a": 100, "b": 1}, 0.5)
    1
    >>> per_client_cap({"a": 100}, 0.2)
    0
    """
    if share >= 1:
        return max(counts.values(), default=0)
    for m in range(max(counts.values(), default=0), 0, -1):
        if m <= share * sum(min(c, m) for c in counts.values()):
            return m
    return 0


class RewardsLog:
    """Append-only JSON lines, one judged query each: a crash can tear only the line being written."""

    def __init__(self, path: Path):
        self.path = path

    def read(self) -> list[Reward]:
        """The complete lines; a torn last line (no newline: the process died writing it) is cut off the file."""
        if not self.path.exists():
            return []
        data = self.path.read_bytes()
        whole = data[: data.rfind(b"\n") + 1]
        if len(whole) < len(data):
            log.warning("%s: dropping a torn last line (%d bytes) left by a crash", self.path, len(data) - len(whole))
            with open(self.path, "r+b") as f:
                f.truncate(len(whole))
        rewards = []
        for lineno, line in enumerate(whole.decode("utf-8").splitlines(), 1):
            try:
                record = json.loads(line)
                judgments = {str(d): float(s) for d, s in record["judgments"].items()}
                client, teacher = str(record.get("client", ANONYMOUS)), str(record.get("teacher", ""))
                rewards.append(Reward(record["task"], record["qid"], record["query"], judgments, client, teacher))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
                raise UserError(f"{self.path}:{lineno}: not a rewards record") from None
        return rewards

    def append(self, rewards: Sequence[Reward], room: Room | None = None) -> bool:
        """Append ``rewards`` if ``room`` (a :meth:`~tour_pyserini.serve.quotas.DataQuota.writing`) lets their
        bytes be written; whether they were."""
        lines = "".join(
            json.dumps(
                {
                    "task": r.task,
                    "qid": r.qid,
                    "client": r.client,
                    "teacher": r.teacher,
                    "query": r.text,
                    "judgments": r.judgments,
                }
            )
            + "\n"
            for r in rewards
        )
        with room(len(lines.encode("utf-8"))) if room else nullcontext(True) as fits:
            if fits:
                with open(self.path, "a", encoding="utf-8") as f:
                    f.write(lines)
                    f.flush()
                    os.fsync(f.fileno())
            return fits


class StateVersions:
    """States numbered 1, 2, ... in one directory, each written whole before it counts."""

    def __init__(self, directory: Path):
        self.directory = directory

    def versions(self) -> list[int]:
        return sorted(int(m.group(1)) for p in self.directory.iterdir() if (m := STATE_NAME.fullmatch(p.name)))

    def path(self, version: int) -> Path:
        return self.directory / f"state-{version:06d}.safetensors"

    def loadable(self) -> Iterator[tuple[int, State]]:
        """The versions that load and their states, the newest first (one that does not load is skipped, with a
        warning)."""
        for version in reversed(self.versions()):
            try:
                state = State.load(self.path(version))
            except UserError as e:
                log.warning("online TTT-Embed: skipping state version %d, which does not load (%s)", version, e)
                continue
            yield version, state

    def save(self, version: int, state: State, room: Room | None) -> bool:
        """Write ``state`` as ``version`` if ``room`` lets its bytes be written; whether it was."""
        size = state.vectors.nbytes * (1 if state.anchors is None else 2) + len(json.dumps(state.metadata())) + 4096
        with room(size) if room else nullcontext(True) as fits:
            if fits:
                state.save(self.path(version))  # written beside, then renamed: never half a state under this name
        for old in self.versions()[:-KEEP_VERSIONS]:
            self.path(old).unlink(missing_ok=True)
        return fits


def shift_by_state(state: State | None, task: str, qids: Sequence[str], vectors: np.ndarray) -> np.ndarray:
    """Query vectors moved by ``state``'s residuals for ``task`` (unchanged without a state or one for the task)."""
    if state is None or (state.scope != "global" and task not in state.tasks):
        return vectors
    return shift_queries(vectors, state.residuals(list(qids), None if state.scope == "global" else task, vectors))


class OnlineLearner:
    """Rewards of served queries refitted into the state of ``scope``, in the background.

    ``encode(task, texts)`` gives raw query vectors and ``doc_vectors(task, docids)`` the index vectors of
    judged documents; ``encoder`` is the identity every state records; ``tasks``: the indexes served (rewards of
    others in the log are not used). ``alpha_rule`` chooses a shared state's α (:mod:`tour_pyserini.ttt.magnitude`);
    the ranking rule re-searches a task's index with ``search(task, vectors)`` (each query's top docids). ``fit``
    holds the objective and the steps of the first fit; warm-started refits take ``refit_steps``.
    ``max_key_share``: the most of a fit's queries one client may give.
    """

    def __init__(
        self,
        directory: str | Path,
        scope: str,
        encoder: dict,
        *,
        encode: Callable,
        doc_vectors: Callable,
        tasks: Sequence[str],
        fit: FitConfig | None = None,
        refit_steps: int = 100,
        max_key_share: float = 1.0,
        trusted: Callable[[str], bool] = lambda client: True,
        teacher: str = "",
        room: Room | None = None,
        alpha_rule: str = "ranking",
        search: Search | None = None,
    ):
        if alpha_rule not in CROSS_VALIDATED:
            raise ValueError(f"a served state's alpha is cross-validated: rule {alpha_rule!r} is not one of those")
        if alpha_rule == "ranking" and search is None and scope != "query":  # a query state's α is not chosen
            raise ValueError("the ranking rule re-searches the index: pass search")
        self.alpha_rule, self.search = alpha_rule, search
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.scope, self.encoder = scope, encoder
        self.trusted, self.teacher, self.room = trusted, teacher, room
        self.encode, self.doc_vectors = encode, doc_vectors
        self.tasks = set(tasks)
        self.fit_config = fit or FitConfig()
        self.refit_steps = refit_steps
        self.max_key_share = max_key_share
        self.log = RewardsLog(self.directory / REWARDS_LOG)
        self.versions = StateVersions(self.directory)
        self.current = self.load_latest()
        self.newest = max(self.versions.versions(), default=0)  # the next state written is the one after it
        self.lock = threading.Lock()  # guards the rewards below (the serving thread adds, the refit reads)
        # (task, client/qid) -> {docid: reward}, in order of arrival
        self.judged: dict[tuple[str, str], dict[str, float]] = {}
        self.clients: dict[tuple[str, str], str] = {}  # (task, client/qid) -> client
        self.vectors: dict[tuple[str, str], np.ndarray] = {}  # (task, client/qid) -> raw query vector
        self.received = 0  # rewards records kept (log lines)
        logged = self.log.read()
        learnable = [r for r in logged if self.may_learn(r)]
        if len(learnable) < len(logged):
            log.warning(
                "online TTT-Embed: %d of %d rewards in the log are of another teacher or of clients this "
                "server does not learn from; they stay in the log, unused",
                len(logged) - len(learnable),
                len(logged),
            )
        self.keep(learnable)
        version, state = self.current
        # what the served state has seen, if it is the newest and the log holds nothing it must not: else fit anew
        seen = state.provenance["online"].get("rewards", 0) if state is not None else 0
        self.fitted = seen if version == self.newest and len(learnable) == len(logged) else 0
        self.fits, self.fit_seconds = 0, 0.0
        self.refused = 0  # fitted states the guard did not serve
        self.last: dict = {}  # what the last fit found: the guard's decision, or why there was nothing to fit
        self.error: str | None = None
        self.wake = threading.Condition()
        self.stopping = False
        self.thread = threading.Thread(target=self.refit_loop, name="ttt-refit", daemon=True)

    def may_learn(self, reward: Reward) -> bool:
        """Whether ``reward`` may teach: judged by this server's teacher, for a client it trusts."""
        return reward.teacher == self.teacher and self.trusted(reward.client)

    def why_not_served(self, state: State) -> str | None:
        """Why a state on disk must not be served under this server's rules (None: it may be)."""
        online = state.provenance.get("online", {})
        if "clients" not in online:
            return "it does not record whom it was learned from"
        if online.get("teacher") != self.teacher:
            return "another teacher judged its rewards"
        if online.get("max_key_share", 1.0) > self.max_key_share:
            return f"it was fitted under a larger share per client ({online.get('max_key_share')})"
        if untrusted := [c for c in online["clients"] if not self.trusted(c)]:
            return f"it was learned from {len(untrusted)} client(s) this server does not learn from"
        return None

    def load_latest(self) -> tuple[int, State | None]:
        """The newest state on disk that loads and may be served, and its version; (0, None) if none."""
        for version, state in self.versions.loadable():
            where = str(self.versions.path(version))
            if state.scope != self.scope:
                raise UserError(
                    f"{where} holds a {state.scope} state; this server learns the {self.scope} scope "
                    "(start it with that scope, or give another directory)"
                )
            state.check_encoder(self.encoder, where)
            if (why := self.why_not_served(state)) is not None:
                log.warning("online TTT-Embed: not serving state version %d: %s", version, why)
                continue
            log.info("online TTT-Embed: continuing from state version %d (%s)", version, where)
            return version, state
        return 0, None

    def start(self) -> None:
        self.thread.start()

    def shift(
        self, task: str, qids: Sequence[str], clients: Sequence[str], vectors: np.ndarray
    ) -> tuple[np.ndarray, int]:
        """The served vectors of one batch (each query ``qids[i]`` of ``clients[i]``) and the version that moved
        them (0: none yet)."""
        version, state = self.current  # one read: the whole batch is served by one version
        return shift_by_state(state, task, [learned_qid(c, q) for c, q in zip(clients, qids)], vectors), version

    def add(self, rewards: Sequence[Reward], vectors: np.ndarray | None = None) -> None:
        """Keep the judgments of served queries (``vectors``: their raw query vectors, if known), on disk
        first, and wake the refit."""
        if rewards and self.log.append(rewards, self.room):
            self.keep(rewards, vectors)
            with self.wake:
                self.wake.notify()

    def keep(self, rewards: Sequence[Reward], vectors: np.ndarray | None = None) -> None:
        served = [i for i, r in enumerate(rewards) if r.task in self.tasks]
        if len(served) < len(rewards):
            log.warning(
                "online TTT-Embed: %d rewarded queries are of indexes this server does not serve; they stay "
                "in the log, unused",
                len(rewards) - len(served),
            )
        by_task: dict[str, list[int]] = {}
        for i in served:
            by_task.setdefault(rewards[i].task, []).append(i)
        for task, at in by_task.items():
            fresh = list({rewards[i].key: i for i in at if rewards[i].key not in self.vectors}.values())
            if vectors is not None:
                X = vectors[fresh]
            else:
                X = self.encode(task, [rewards[i].text for i in fresh]) if fresh else []
            with self.lock:
                self.vectors.update((rewards[i].key, x) for i, x in zip(fresh, X))
                for i in at:  # a query judged again keeps every judgment, the later score winning
                    self.judged.setdefault(rewards[i].key, {}).update(usable(rewards[i].judgments))
                    self.clients[rewards[i].key] = rewards[i].client
        with self.lock:
            self.received += len(rewards)

    def pending(self) -> bool:
        with self.lock:
            return self.received > self.fitted

    def refit_loop(self) -> None:
        while True:
            with self.wake:
                self.wake.wait_for(lambda: self.stopping or self.pending())
                if self.stopping:
                    return
            with self.lock:
                received = self.received
            try:
                self.refit()
                self.error = None
            except Exception as e:  # noqa: BLE001 - reported in the status; tried again when rewards arrive
                log.exception("online TTT-Embed: the fit failed; learning waits for new rewards")
                self.error = f"the last fit failed ({type(e).__name__}: {str(e)[:200]})"
            with self.lock:
                self.fitted = received

    def rewarded(self, keys: Sequence[tuple[str, str]], judged: Mapping) -> list[RewardedQuery]:
        return [
            RewardedQuery(
                task,
                qid,
                self.vectors[(task, qid)],
                self.doc_vectors(task, list(judged[(task, qid)])),
                np.array(list(judged[(task, qid)].values())),
                tuple(judged[(task, qid)]),
            )
            for task, qid in keys
        ]

    def fit_set(self, judged: Mapping, clients: Mapping) -> tuple[list, list]:
        """The keys to fit on (each client's most recent, within its share) and the held-back keys."""
        ordered = [(i, key) for i, (key, scores) in enumerate(judged.items()) if len(scores) >= MIN_JUDGMENTS]
        fitting = [key for i, key in ordered if i % HELD_BACK]
        counts: dict[str, int] = {}
        for key in fitting:
            counts[clients[key]] = counts.get(clients[key], 0) + 1
        cap = per_client_cap(counts, self.max_key_share)
        taken: dict[str, int] = {}
        chosen = []
        for key in reversed(fitting):  # the most recent first
            if taken.get(clients[key], 0) < cap:
                taken[clients[key]] = taken.get(clients[key], 0) + 1
                chosen.append(key)
        return chosen[::-1], [key for i, key in ordered if not i % HELD_BACK]

    def agreement(self, state: State | None, queries: Sequence[RewardedQuery]) -> float:
        """Mean teacher agreement of ``queries`` moved by ``state`` (None: not moved)."""
        X = np.stack([q.x for q in queries]).astype(np.float64)
        moved = np.concatenate([shift_by_state(state, q.task, [q.qid], X[i : i + 1]) for i, q in enumerate(queries)])
        return mean_agreement(moved, [q.Z.astype(np.float64) for q in queries], [q.rewards for q in queries])

    def refit(self) -> None:
        """Fit on the rewards so far, from the current state; if it passes the guard, write the next version and
        swap it in."""
        with self.lock:
            received = self.received
            judged = {key: dict(scores) for key, scores in self.judged.items()}
            clients = dict(self.clients)
        keys, checks = self.fit_set(judged, clients)
        if not keys or not checks:
            self.last = {
                "fitted": False,
                "why": f"no rewarded queries a fit may use yet (clients' shares are capped at {self.max_key_share:g})"
                if not keys
                else "no held-back judged query to check a new state on yet",
            }
            return
        queries, held = self.rewarded(keys, judged), self.rewarded(checks, judged)
        version, state = self.current
        config = self.fit_config if state is None else replace(self.fit_config, steps=self.refit_steps)
        start = time.perf_counter()
        keys_, V, counts = fit_scope(queries, self.scope, config, init=state.by_key() if state is not None else None)
        seconds = time.perf_counter() - start
        # every client whose rewards shaped it: fitted on, checked on, or behind the state it starts from
        learned_from = {clients[k] for k in [*keys, *checks]} | set(
            state.provenance["online"]["clients"] if state else ()
        )
        provenance = {
            "online": {
                "version": self.newest + 1,
                "rewards": received,
                "rewarded queries": len(queries),
                "held back": len(held),
                "clients": sorted(learned_from),
                "teacher": self.teacher,
                "max_key_share": self.max_key_share,
                "judgments": sum(len(judged[k]) for k in keys),
                "warm start": version or None,
            }
        }
        anchors = np.stack([self.vectors[key] for key in keys]) if self.scope == "neighbours" else None
        fitted = State(
            self.scope,
            keys_,
            V,
            counts,
            list(dict.fromkeys(q.task for q in queries)),
            config.to_json(),
            self.encoder,
            provenance,
            anchors=anchors,
        )
        new, last = self.judge(fitted, state, queries, held)
        if new is not None and not self.versions.save(self.newest + 1, new, self.room):
            new, last = None, last | {"served": False, "why": "the data directory is full: the state was not written"}
        if new is not None:
            new.scaled  # computed here, not by the first batch it serves  # noqa: B018
            self.newest += 1
            self.current = (self.newest, new)  # the swap: one assignment, read once per served batch
            log.info("online TTT-Embed: state version %d from %d rewarded queries", self.newest, len(queries))
        else:
            self.refused += 1
        # counted last: a status that counts this fit shows its decision
        self.fit_seconds += seconds
        self.last = last
        self.fits += 1

    def judge(
        self, new: State, serving: State | None, queries: Sequence[RewardedQuery], held: Sequence[RewardedQuery]
    ) -> tuple[State | None, dict]:
        """``new`` with its α chosen by cross-validation over ``queries`` (a state that moves other queries), or
        None when it must not be served; and what was found, for the status."""
        if self.scope == "query":  # a query state moves only its own query: neither check can judge it
            return new, {"fitted": True, "held_back": len(held), "served": True}
        # from scratch, with the first fit's steps: what a state fitted on these queries would do
        magnitude = MagnitudeConfig(alpha_rule=self.alpha_rule)
        choice = cross_validated_alpha(queries, self.scope, self.fit_config, magnitude, search=self.search)
        new.provenance["magnitude"] = choice.to_json()
        if choice.alpha == 0:
            log.info("online TTT-Embed: a new state is not served: %s", choice.describe())
            return None, {
                "fitted": True,
                "served": False,
                "why": "cross-validation over the rewarded queries: "
                f"{choice.describe()}; no alpha helped held-out queries, so it is not served",
            }
        new = replace(new, chosen_alphas=[choice.alpha] * len(new.keys))
        before, after = self.agreement(serving, held), self.agreement(new, held)
        last = {
            "fitted": True,
            "held_back": len(held),
            "served": True,
            "alpha": choice.alpha,
            "agreement": None if np.isnan(after) else round(after, 4),
            "serving_agreement": None if np.isnan(before) else round(before, 4),
        }
        if np.isnan(after) or np.isnan(before):
            return None, last | {
                "served": False,
                "why": "the teacher ordered no pair of the held-back queries' "
                "candidates: nothing to check a new state on",
            }
        if after < before:
            log.warning(
                "online TTT-Embed: a new state agrees less with the teacher on %d held-back queries "
                "(%.4f < %.4f); it is not served",
                len(held),
                after,
                before,
            )
            return None, last | {"served": False}
        return new, last

    def close(self) -> None:
        """Stop refitting; a fit in progress finishes and is written (the last version stays complete)."""
        with self.wake:
            self.stopping = True
            self.wake.notify()
        if self.thread.is_alive():
            self.thread.join()

    def status(self) -> dict:
        version, state = self.current
        with self.lock:
            return {
                "scope": self.scope,
                "alpha_rule": self.alpha_rule,
                "version": version,
                "rewarded_queries": len(self.judged),
                "judgments": sum(len(s) for s in self.judged.values()),
                "rewards_fitted": self.fitted,
                "rewards_received": self.received,
                "clients": len(set(self.clients.values())),
                "max_key_share": self.max_key_share,
                "fits": self.fits,
                "states_refused": self.refused,
                "fit_seconds": round(self.fit_seconds, 4),
                "last_fit": self.last,
                "error": self.error,
            }
