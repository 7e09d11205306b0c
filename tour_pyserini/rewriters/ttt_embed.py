"""TTT-Embed: search with the query moved by a residual state fitted on teacher rewards.

A state (``python -m tour_pyserini.ttt fit``) holds residuals v_g for a scope; a query is searched as
x̃_q = unit(x_q + α_g v_g) in one plain search of the unchanged index. The state applies to any topics:
a global state moves every query, a task state every query of its task, a query state only the
queries it was fitted on (the others keep x_q).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tour_pyserini.encoders import EncoderSpec, encoder_identity
from tour_pyserini.errors import UserError
from tour_pyserini.numbers import Param, Role, param
from tour_pyserini.results import SearchResult, timed
from tour_pyserini.rewriters.base import REWRITERS, QueryBatch, Rewriter, VectorIndex
from tour_pyserini.ttt.state import State, shift_queries

STATE = Param(
    "state",
    str,
    help="TTT-Embed state file (python -m tour_pyserini.ttt fit): ttt-embed searches with it, "
    "tour-* start from its moved query",
    metavar="FILE",
    role=Role.FILE,
)
TASK = Param("task", str, help="the task whose state applies (task and query states with several tasks)")


class StateShift:
    """A state applied to query vectors: unit(x_q + α_g v_g) for the queries its scope covers.

    ``task`` picks the task of a task or query state; a wrong one fails here, before any model loads.
    """

    def __init__(self, state: State, task: str | None = None, where: str | Path = "the state"):
        self.path = where
        self.state = state
        self.task = state.select_task(task)
        self.checked: VectorIndex | None = None  # the index last checked: its encoder is hashed once, not per batch

    @classmethod
    def load(cls, path: str | Path, task: str | None = None) -> StateShift:
        """The state in the file ``path``, read once."""
        return cls(State.load(path), task, path)

    def check_index(self, index: VectorIndex) -> None:
        if index is self.checked:
            return
        if index.dimension != self.state.dimension:
            raise UserError(
                f"state {self.path} holds {self.state.dimension}-d residuals but the index holds "
                f"{index.dimension}-d vectors"
            )
        if isinstance(index.encoder, EncoderSpec):
            self.state.check_encoder(encoder_identity(index.encoder), f"state {self.path}")
        self.checked = index

    def __call__(self, batch: QueryBatch, index: VectorIndex) -> np.ndarray:
        self.check_index(index)
        return shift_queries(batch.vectors, self.state.residuals(batch.qids, self.task, batch.vectors))


def check_task(state: str | None, task: str | None) -> None:
    """``task`` picks a state's task: alone it is an error."""
    if task and not state:
        raise UserError("--task picks the task of a --state: give the state too")


@dataclass(frozen=True)
class TttEmbedConfig:
    state: str | None = param(None, like=STATE, required=True)
    task: str | None = param(None, like=TASK)


@REWRITERS.register
class TttEmbed(Rewriter):
    """Searches with unit(x_q + α_g v_g) from a state file; ``task`` picks the task of a task or query state.
    ``shift``: the state already read (a search's plan reads it once), else read from ``config.state``."""

    name = "ttt-embed"
    Config = TttEmbedConfig

    def __init__(
        self,
        state: str | Path | None = None,
        task: str | None = None,
        *,
        config: TttEmbedConfig | None = None,
        shift: StateShift | None = None,
    ):
        given = {} if config is not None else {"state": None if state is None else str(state), "task": task}
        super().__init__(config, **given)
        self.shift = shift or StateShift.load(self.config.state, self.config.task)

    def rewrite(self, batch: QueryBatch, index: VectorIndex, hits: int) -> list[SearchResult]:
        traces = batch.traces
        with timed(traces, "update"):
            vectors = self.shift(batch, index)
        with timed(traces, "search"):
            rankings = index.search_vectors(vectors, hits)
        return [SearchResult(qid, ranking, trace) for qid, ranking, trace in zip(batch.qids, rankings, traces)]
