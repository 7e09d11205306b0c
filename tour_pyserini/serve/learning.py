"""Online TTT-Embed: the teacher's judgments of served queries, refitted into versioned states as they arrive.

A served query is searched with unit(x + α_g v_g) of the current state (none before the first fit). The
judgments the budget buys are appended to a rewards log (JSON lines, each flushed and fsynced before the
query's answer leaves), and a background thread refits the state on every reward so far, warm-started from
the current one (``ttt fit --init``: the same objective, hyper-parameters and α rule), writes it as the next
version (``state-NNNNNN.safetensors``, atomically) and only then swaps it in. A batch of queries reads the
current state once, so each query is served by one complete version, which its response names.

On a restart the newest complete version is loaded and the log is read again; a line torn by a crash is
dropped, and rewards the newest version has not seen are refitted at once.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.rewriters.ttt_embed import shift_queries
from tour_pyserini.ttt.fitting import RewardedQuery, fit_scope
from tour_pyserini.ttt.objectives import FitConfig
from tour_pyserini.ttt.state import State

log = logging.getLogger(__name__)

REWARDS_LOG = "rewards.jsonl"
STATE_NAME = re.compile(r"state-(\d{6})\.safetensors")
KEEP_VERSIONS = 5  # older versions are removed once a newer one is complete


@dataclass(frozen=True)
class Reward:
    """The teacher's judgments of one served query's candidates."""

    task: str
    qid: str
    text: str
    judgments: dict[str, float]


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
                rewards.append(Reward(record["task"], record["qid"], record["query"],
                                      {str(d): float(s) for d, s in record["judgments"].items()}))  # fmt: skip
            except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
                raise UserError(f"{self.path}:{lineno}: not a rewards record") from None
        return rewards

    def append(self, rewards: Sequence[Reward]) -> None:
        lines = "".join(json.dumps({"task": r.task, "qid": r.qid, "query": r.text, "judgments": r.judgments}) + "\n"
                        for r in rewards)  # fmt: skip
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(lines)
            f.flush()
            os.fsync(f.fileno())


class StateVersions:
    """States numbered 1, 2, ... in one directory, each written whole before it counts."""

    def __init__(self, directory: Path):
        self.directory = directory

    def versions(self) -> list[int]:
        return sorted(int(m.group(1)) for p in self.directory.iterdir() if (m := STATE_NAME.fullmatch(p.name)))

    def path(self, version: int) -> Path:
        return self.directory / f"state-{version:06d}.safetensors"

    def latest(self) -> tuple[int, State | None]:
        """The newest version and its state; (0, None) before the first fit."""
        found = self.versions()
        return (found[-1], State.load(self.path(found[-1]))) if found else (0, None)

    def save(self, version: int, state: State) -> None:
        state.save(self.path(version))  # written beside, then renamed: never half a state under this name
        for old in self.versions()[:-KEEP_VERSIONS]:
            self.path(old).unlink(missing_ok=True)


def shift_by_state(state: State | None, task: str, qids: Sequence[str], vectors: np.ndarray) -> np.ndarray:
    """Query vectors moved by ``state``'s residuals for ``task`` (unchanged without a state or one for the task)."""
    if state is None or (state.scope != "global" and task not in state.tasks):
        return vectors
    return shift_queries(vectors, state.residuals(list(qids), None if state.scope == "global" else task))


class OnlineLearner:
    """Rewards of served queries refitted into the state of ``scope``, in the background.

    ``encode(task, texts)`` gives raw query vectors and ``doc_vectors(task, docids)`` the index vectors of
    judged documents; ``encoder`` is the identity every state records. ``fit`` holds the objective and the
    steps of the first fit; warm-started refits take ``refit_steps``.
    """

    def __init__(self, directory: str | Path, scope: str, encoder: dict, *, encode: Callable, doc_vectors: Callable,
                 fit: FitConfig | None = None, refit_steps: int = 100):  # fmt: skip
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.scope, self.encoder = scope, encoder
        self.encode, self.doc_vectors = encode, doc_vectors
        self.fit_config = fit or FitConfig()
        self.refit_steps = refit_steps
        self.log = RewardsLog(self.directory / REWARDS_LOG)
        self.versions = StateVersions(self.directory)
        self.current = self.load_latest()
        self.lock = threading.Lock()  # guards the rewards below (the serving thread adds, the refit reads)
        self.judged: dict[tuple[str, str], dict[str, float]] = {}  # (task, qid) -> {docid: reward}
        self.vectors: dict[tuple[str, str], np.ndarray] = {}  # (task, qid) -> raw query vector
        self.received = 0  # rewards records kept (log lines)
        self.keep(self.log.read())
        state = self.current[1]
        self.fitted = state.provenance.get("online", {}).get("rewards", 0) if state is not None else 0
        self.fits, self.fit_seconds = 0, 0.0
        self.wake = threading.Condition()
        self.stopping = False
        self.thread = threading.Thread(target=self.refit_loop, name="ttt-refit", daemon=True)

    def load_latest(self) -> tuple[int, State | None]:
        version, state = self.versions.latest()
        if state is not None:
            where = str(self.versions.path(version))
            if state.scope != self.scope:
                raise UserError(f"{where} holds a {state.scope} state; this server learns the {self.scope} scope "
                                "(start it with that scope, or give another directory)")  # fmt: skip
            state.check_encoder(self.encoder, where)
            log.info("online TTT-Embed: continuing from state version %d (%s)", version, where)
        return version, state

    def start(self) -> None:
        self.thread.start()

    def shift(self, task: str, qids: Sequence[str], vectors: np.ndarray) -> tuple[np.ndarray, int]:
        """The served vectors of one batch and the version that moved them (0: none yet)."""
        version, state = self.current  # one read: the whole batch is served by one version
        return shift_by_state(state, task, qids, vectors), version

    def add(self, rewards: Sequence[Reward], vectors: np.ndarray | None = None) -> None:
        """Keep the judgments of served queries (``vectors``: their raw query vectors, if known), on disk
        first, and wake the refit."""
        if rewards:
            self.log.append(rewards)
            self.keep(rewards, vectors)
            with self.wake:
                self.wake.notify()

    def keep(self, rewards: Sequence[Reward], vectors: np.ndarray | None = None) -> None:
        by_task: dict[str, list[int]] = {}
        for i, reward in enumerate(rewards):
            by_task.setdefault(reward.task, []).append(i)
        for task, at in by_task.items():
            group = [rewards[i] for i in at]
            fresh = [i for i in at if (task, rewards[i].qid) not in self.vectors]
            if vectors is not None:
                X = vectors[fresh]
            else:
                X = self.encode(task, [rewards[i].text for i in fresh]) if fresh else []
            with self.lock:
                self.vectors.update(((task, rewards[i].qid), x) for i, x in zip(fresh, X))
                for reward in group:  # a query judged again keeps every judgment, the later score winning
                    self.judged.setdefault((task, reward.qid), {}).update(reward.judgments)
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
            self.refit()

    def refit(self) -> None:
        """Fit on every reward so far, from the current state; write the next version, then swap it in."""
        with self.lock:
            received = self.received
            judged = {key: dict(scores) for key, scores in self.judged.items()}
            vectors = dict(self.vectors)
        queries = [RewardedQuery(task, qid, vectors[(task, qid)], self.doc_vectors(task, list(scores)),
                                 np.array(list(scores.values())))
                   for (task, qid), scores in judged.items()]  # fmt: skip
        version, state = self.current
        config = self.fit_config if state is None else replace(self.fit_config, steps=self.refit_steps)
        start = time.perf_counter()
        keys, V, counts = fit_scope(queries, self.scope, config, init=state.by_key() if state is not None else None)
        self.fit_seconds += time.perf_counter() - start
        tasks = list(dict.fromkeys(q.task for q in queries))
        provenance = {
            "online": {
                "version": version + 1,
                "rewards": received,
                "rewarded queries": len(queries),
                "judgments": sum(len(s) for s in judged.values()),
                "warm start": version or None,
            }
        }
        new = State(self.scope, keys, V, counts, tasks, config.to_json(), self.encoder, provenance)
        new.scaled  # computed here, not by the first batch it serves  # noqa: B018
        self.versions.save(version + 1, new)
        self.current = (version + 1, new)  # the swap: one assignment, read once per served batch
        self.fits += 1
        with self.lock:
            self.fitted = received
        log.info("online TTT-Embed: state version %d from %d rewarded queries", version + 1, len(queries))

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
            return {"scope": self.scope, "version": version, "rewarded_queries": len(self.judged),
                    "judgments": sum(len(s) for s in self.judged.values()), "rewards_fitted": self.fitted,
                    "rewards_received": self.received, "fits": self.fits,
                    "fit_seconds": round(self.fit_seconds, 4)}  # fmt: skip
