"""State files: the fitted residuals v_g of one scope, with everything needed to use them safely.

One safetensors file: the tensor ``v`` (G, d) float32 holds one row per scope key, and the metadata
entry ``ttt_embed`` holds JSON with the keys (task and qid of each row), n_g and α_g = n_g / (n_g + 1),
the scope, the task names, the objective and its hyper-parameters, the encoder's identity (name,
pooling, normalisation, maximum length and a SHA-256 of its weight files) and the rewards' provenance.
A state only applies to queries encoded by the encoder it was fitted for.
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

FORMAT = "tour-pyserini ttt-embed state 1"
SCOPES = ("global", "task", "query")


def alpha(n: int) -> float:
    """The deployment magnitude α_g = n_g / (n_g + 1): 0 without rewards, 0.5 for a single query."""
    return n / (n + 1)


@dataclass
class State:
    """Residuals of one scope: row g of ``vectors`` belongs to ``keys[g]`` = (task, qid).

    Keys are (None, None) for the global scope, (task, None) for a task and (task, qid) for a query.
    """

    scope: str
    keys: list[tuple[str | None, str | None]]
    vectors: np.ndarray  # (G, d) float32
    counts: list[int]  # n_g: distinct rewarded queries behind each row
    tasks: list[str]
    fit: dict  # the objective and its hyper-parameters
    encoder: dict  # encoder_identity() of the encoder the queries were encoded with
    provenance: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.scope not in SCOPES:
            raise UserError(f"unknown scope {self.scope!r}; choose one of: {', '.join(SCOPES)}")
        self.vectors = np.asarray(self.vectors, dtype=np.float32)
        self.keys = [tuple(k) for k in self.keys]
        if self.vectors.ndim != 2 or not (len(self.keys) == len(self.counts) == len(self.vectors)):
            raise ValueError("a state needs one key, one count and one vector per row")

    @property
    def alphas(self) -> list[float]:
        return [alpha(n) for n in self.counts]

    @property
    def dimension(self) -> int:
        return self.vectors.shape[1]

    def metadata(self) -> dict:
        return {
            "format": FORMAT, "scope": self.scope, "keys": [list(k) for k in self.keys], "counts": self.counts,
            "alphas": self.alphas, "tasks": self.tasks, "fit": self.fit, "encoder": self.encoder,
            "provenance": self.provenance,
        }  # fmt: skip

    def save(self, path: str | Path) -> None:
        """Write the state atomically: a crash leaves the previous file or none, never half of one."""
        from safetensors.numpy import save_file

        path = Path(path)
        tmp = path.with_name(path.name + ".partial")
        metadata = {"ttt_embed": json.dumps(self.metadata())}
        save_file({"v": np.ascontiguousarray(self.vectors)}, str(tmp), metadata=metadata)
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
        except (SafetensorError, OSError) as e:
            raise UserError(f"{path}: not a safetensors state file ({e})") from None
        meta = json.loads(raw) if raw else {}
        if meta.get("format") != FORMAT:
            raise UserError(f"{path}: not a TTT-Embed state file (python -m tour_pyserini.ttt fit writes them)")
        return cls(meta["scope"], meta["keys"], vectors, meta["counts"], meta["tasks"], meta["fit"],
                   meta["encoder"], meta["provenance"])  # fmt: skip

    def select_task(self, task: str | None) -> str | None:
        """The task whose residuals apply: ``task``, or the state's only task; None for a global state, which
        moves every query alike (a task given with it would be ignored, so it is refused)."""
        if self.scope == "global":
            if task is not None:
                raise UserError(f"--task {task}: this state is global (one residual for every query); "
                                "--task picks the task of a task or query state")  # fmt: skip
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

    def residuals(self, qids: list[str], task: str | None) -> np.ndarray:
        """α_g v_g for each query (n, d) float64; rows of queries the scope has no residual for are 0."""
        task = self.select_task(task)
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
            raise UserError(f"{where} was fitted for encoder {describe(self.encoder)}, but the queries are "
                            f"encoded with {describe(identity)}")  # fmt: skip
