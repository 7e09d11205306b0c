"""State files: the fitted residuals v_g of one scope, with everything needed to use them safely.

One safetensors file: the tensor ``v`` (G, d) float32 holds one row per scope key, and the metadata
entry ``ttt_embed`` holds JSON with the keys (task and qid of each row), n_g and α_g (n_g / (n_g + 1) by
the count rule, or chosen by cross-validation over the rewarded queries: :mod:`tour_pyserini.ttt.magnitude`),
the scope, the task names, the objective and its hyper-parameters, the encoder's identity (name,
pooling, normalisation, maximum length and a SHA-256 of its weight files) and the rewards' provenance.
A state only applies to queries encoded by the encoder it was fitted for. A neighbours state also holds the
tensor ``x`` (G, d): each rewarded query's own vector, by which other queries find it
(:mod:`tour_pyserini.ttt.neighbours`), and its mixing settings.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from tour_pyserini.encoders import describe, same_encoder
from tour_pyserini.errors import UserError
from tour_pyserini.ttt.neighbours import NeighbourConfig, mix

FORMAT = "tour-pyserini ttt-embed state 1"
SCOPES = ("global", "task", "query", "neighbours")


def shift_queries(vectors: np.ndarray, residuals: np.ndarray) -> np.ndarray:
    """unit(x + r) row by row (float32); a row whose residual is 0 is returned bit for bit unchanged.

    For one query, unit(x + r)·z = (x·z + r·z) / ‖x + r‖ with ‖x + r‖ > 0 the same for every document,
    so the search ranks documents by x·z + α v·z; normalising only rescales the scores.
    """
    out = np.array(vectors, dtype=np.float32, copy=True)
    moved = np.any(residuals != 0, axis=1)
    if moved.any():
        u = np.asarray(vectors, dtype=np.float64)[moved] + residuals[moved]
        out[moved] = (u / np.linalg.norm(u, axis=1, keepdims=True)).astype(np.float32)
    return out


def alpha(n: int) -> float:
    """The deployment magnitude α_g = n_g / (n_g + 1): 0 without rewards, 0.5 for a single query."""
    return n / (n + 1)


@dataclass
class State:
    """Residuals of one scope: row g of ``vectors`` belongs to ``keys[g]`` = (task, qid).

    Keys are (None, None) for the global scope, (task, None) for a task and (task, qid) for a query (query and
    neighbours scopes); a neighbours state has ``anchors``, the raw vector of each key's query, and ``mixing``.
    """

    scope: str
    keys: list[tuple[str | None, str | None]]
    vectors: np.ndarray  # (G, d) float32
    counts: list[int]  # n_g: distinct rewarded queries behind each row
    tasks: list[str]
    fit: dict  # the objective and its hyper-parameters
    encoder: dict  # encoder_identity() of the encoder the queries were encoded with
    provenance: dict = field(default_factory=dict)
    chosen_alphas: list[float] | None = None  # α_g chosen by cross-validation; None: the count rule
    anchors: np.ndarray | None = None  # (G, d) float32, neighbours scope only
    mixing: NeighbourConfig | None = None  # neighbours scope only

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise UserError(f"unknown scope {self.scope!r}; choose one of: {', '.join(SCOPES)}")
        self.vectors = np.asarray(self.vectors, dtype=np.float32)
        self.keys = [(task, qid) for task, qid in self.keys]  # lists, when read from JSON
        if self.vectors.ndim != 2 or not (len(self.keys) == len(self.counts) == len(self.vectors)):
            raise ValueError("a state needs one key, one count and one vector per row")
        if self.chosen_alphas is not None and len(self.chosen_alphas) != len(self.keys):
            raise ValueError("a state with chosen magnitudes needs one per row")
        if (self.scope == "neighbours") != (self.anchors is not None):
            raise ValueError("a neighbours state, and only one, needs the vector of each rewarded query")
        if self.anchors is not None:
            self.anchors = np.asarray(self.anchors, dtype=np.float32)
            self.mixing = self.mixing or NeighbourConfig()
            if self.anchors.shape != self.vectors.shape:
                raise ValueError("a neighbours state needs one query vector per residual")

    @property
    def alphas(self) -> list[float]:
        return list(self.chosen_alphas) if self.chosen_alphas is not None else [alpha(n) for n in self.counts]

    @property
    def alpha_rule(self) -> str:
        """How its α was set: count (n/(n + 1)), or the cross-validated rule its provenance names (cv or ranking)."""
        if self.chosen_alphas is None:
            return "count"
        return self.provenance.get("magnitude", {}).get("rule", "cv")

    @property
    def neighbourhood(self) -> tuple[np.ndarray, NeighbourConfig]:
        """The anchors and mixing of a neighbours state, which ``__post_init__`` gives both."""
        if self.anchors is None or self.mixing is None:
            raise ValueError(f"a {self.scope} state has no query vectors to mix residuals by")
        return self.anchors, self.mixing

    @property
    def dimension(self) -> int:
        return self.vectors.shape[1]

    def metadata(self) -> dict:
        return {
            "format": FORMAT,
            "scope": self.scope,
            "keys": [list(k) for k in self.keys],
            "counts": self.counts,
            "alphas": self.alphas,
            "alpha_rule": self.alpha_rule,
            "tasks": self.tasks,
            "fit": self.fit,
            "encoder": self.encoder,
            "provenance": self.provenance,
            **({"mixing": self.mixing.to_json()} if self.mixing is not None else {}),
        }

    def save(self, path: str | Path) -> None:
        """Write the state atomically: a crash leaves the previous file or none, never half of one."""
        from safetensors.numpy import save_file

        path = Path(path)
        tmp = path.with_name(path.name + ".partial")
        metadata = {"ttt_embed": json.dumps(self.metadata())}
        tensors = {"v": np.ascontiguousarray(self.vectors)}
        if self.anchors is not None:
            tensors["x"] = np.ascontiguousarray(self.anchors)
        save_file(tensors, str(tmp), metadata=metadata)
        with open(tmp, "rb") as f:  # on disk before it takes the name: a power cut leaves the old file, not zeros
            os.fsync(f.fileno())
        os.replace(tmp, path)
        directory = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)

    @classmethod
    def load(cls, path: str | Path) -> State:
        from safetensors import SafetensorError, safe_open

        path = Path(path)
        if not path.is_file():
            raise UserError(f"state file {str(path)!r} does not exist")
        try:
            with safe_open(str(path), framework="np") as f:
                raw = (f.metadata() or {}).get("ttt_embed")
                vectors = f.get_tensor("v") if raw else None
                anchors = f.get_tensor("x") if raw and "x" in f.keys() else None
        except (SafetensorError, OSError) as e:
            raise UserError(f"{path}: not a safetensors state file ({e})") from None
        meta = json.loads(raw) if raw else {}
        if meta.get("format") != FORMAT or vectors is None:
            raise UserError(f"{path}: not a TTT-Embed state file (python -m tour_pyserini.ttt fit writes them)")
        chosen = meta["alphas"] if meta.get("alpha_rule", "count") != "count" else None
        return cls(
            meta["scope"],
            meta["keys"],
            vectors,
            meta["counts"],
            meta["tasks"],
            meta["fit"],
            meta["encoder"],
            meta["provenance"],
            chosen,
            anchors,
            NeighbourConfig(**meta["mixing"]) if "mixing" in meta else None,
        )

    def select_task(self, task: str | None) -> str | None:
        """The task whose residuals apply: ``task``, or the state's only task; None for a global state, which
        moves every query alike (a task given with it would be ignored, so it is refused)."""
        if self.scope == "global":
            if task is not None:
                raise UserError(
                    f"--task {task}: this state is global (one residual for every query); "
                    "--task picks the task of a task or query state"
                )
            return None
        if task is None:
            if len(self.tasks) > 1:
                raise UserError(f"this {self.scope} state has tasks {', '.join(self.tasks)}: choose one (--task NAME)")
            return self.tasks[0]
        if task not in self.tasks:
            raise UserError(f"this state has no task {task!r}; its tasks: {', '.join(self.tasks)}")
        return task

    def by_key(self) -> dict[tuple, np.ndarray]:
        """v_g (unscaled) by key: where a warm start (``fit_scope(init=...)``) begins each residual."""
        return dict(zip(self.keys, self.vectors))

    def residuals(self, qids: list[str], task: str | None, vectors: np.ndarray | None = None) -> np.ndarray:
        """α_g v_g for each query (n, d) float64; rows of queries the scope has no residual for are 0. A
        neighbours state mixes its task's residuals by the queries' ``vectors`` (n, d), which it needs."""
        task = self.select_task(task)
        if self.scope == "neighbours":
            if vectors is None:
                raise ValueError("a neighbours state moves queries by their vectors: pass them")
            anchors, mixing = self.neighbourhood
            mine = [g for g, key in enumerate(self.keys) if key[0] == task]
            return mix(vectors, anchors[mine], self.scaled[mine], mixing)
        rows = {key: g for g, key in enumerate(self.keys)}
        if self.scope == "query":
            found = [(i, rows.get((task, qid))) for i, qid in enumerate(qids)]
        else:
            found = [(i, rows.get((task, None))) for i in range(len(qids))]
        found = [(i, g) for i, g in found if g is not None]
        out = np.zeros((len(qids), self.dimension))
        if found:
            at, groups = map(list, zip(*found))
            out[at] = self.scaled[groups]
        return out

    @cached_property
    def scaled(self) -> np.ndarray:
        """α_g v_g per row (G, d) float64."""
        return np.array(self.alphas)[:, None] * self.vectors.astype(np.float64)

    def check_encoder(self, identity: dict, where: str) -> None:
        """Refuse queries from another encoder: its residuals would point nowhere meaningful."""
        if not same_encoder(self.encoder, identity):
            raise UserError(
                f"{where} was fitted for encoder {describe(self.encoder)}, but the queries are "
                f"encoded with {describe(identity)}"
            )
