"""DART: dense adaptive re-ranking at test time, teacher-free (Liu and Li, 2026; docs/algorithms.md, "DART").

Per query: search the top-depth once; its first documents are pseudo positives and its last ones pseudo negatives;
a bilinear scoring matrix W (score q^T W d) takes a few SGD steps on a confidence-weighted margin loss over them,
and re-ranks the top-depth. W starts from the identity plus a momentum buffer of the queries before, in run order,
when a run asks for it (:meth:`~tour_pyserini.rewriters.Rewriter.start_run`); otherwise every query starts from
the identity.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.numbers import Role, below_one, non_negative_float, param, positive_float, positive_int
from tour_pyserini.results import Hit, SearchResult, StopReason, timed
from tour_pyserini.rewriters.base import DEPTH, REWRITERS, QueryBatch, Rewriter, VectorIndex, rerank_head
from tour_pyserini.rewriters.updates import adaptive_margin, confidence_weights, dart_adapt, dart_buffer


@dataclass(frozen=True)
class DartConfig:
    depth: int = param(100, like=DEPTH)
    iterations: int = param(3, positive_int, "SGD steps on W per query", flag="--dart-steps", role=Role.ITERATIONS)
    lr: float = param(0.1, non_negative_float, "learning rate of W's steps (for unit-length vectors)", flag="--dart-lr")
    positives: int = param(
        5,
        positive_int,
        "pseudo positives: the retriever's first documents",
        flag="--dart-positives",
        role=Role.CANDIDATES,
    )
    negatives: int = param(
        20,
        positive_int,
        "pseudo negatives: the last documents of the top-k",
        flag="--dart-negatives",
        role=Role.CANDIDATES,
    )
    margin: float = param(
        0.1,
        non_negative_float,
        "the loss's margin, in similarity units, for a query whose first document is at cosine 1",
        flag="--dart-margin",
    )
    margin_slope: float = param(
        1.0,
        non_negative_float,
        "how much the margin widens as the query's cosine with its first document falls: margin + slope (1 - cosine)",
        flag="--dart-margin-slope",
    )
    temperature: float = param(
        0.05,
        positive_float,
        "temperature of the confidence weights (softmax of the retriever's scores)",
        flag="--dart-temperature",
    )
    momentum: float = param(
        0.9,
        below_one,
        "share of a query's adapted W - I that warm-starts the next query of a "
        "run (0: every query starts from the identity)",
        flag="--dart-momentum",
    )

    def check(self) -> None:
        if self.positives + self.negatives > self.depth:
            raise UserError(
                f"--dart-positives {self.positives} and --dart-negatives {self.negatives} overlap: "
                f"together they must be at most {DEPTH.option} {self.depth}"
            )


@REWRITERS.register
class Dart(Rewriter):
    """Re-rank the top-depth by q^T W d, W adapted to the retriever's own top and bottom documents."""

    name = "dart"
    Config = DartConfig
    carries = True

    def __init__(self, config: DartConfig | None = None, **values):
        super().__init__(config, **values)
        self.carrying = False
        self.buffer: np.ndarray | None = None  # B, the warm start W_0 = I + B of the next query (None: zero)

    def start_run(self, state: bytes | None = None) -> None:
        self.carrying = True
        self.buffer = None if state is None else np.load(io.BytesIO(state), allow_pickle=False)

    def run_state(self) -> bytes | None:
        if self.buffer is None:
            return None
        out = io.BytesIO()
        np.save(out, self.buffer, allow_pickle=False)
        return out.getvalue()

    def rewrite(self, batch: QueryBatch, index: VectorIndex, hits: int) -> list[SearchResult]:
        cfg = self.config
        self.check_index(index)
        traces = batch.traces
        with timed(traces, "search"):
            found = index.search_candidates(batch.vectors, max(hits, cfg.depth))
        buffer, results = self.buffer, []
        with timed(traces, "update"):
            for qid, vector, candidates, trace in zip(batch.qids, batch.vectors, found, traces):
                ranking = [Hit(d, s) for d, s in zip(candidates.docids, candidates.scores.tolist())]
                C = candidates.vectors[: cfg.depth].astype(np.float64)
                if len(C) < cfg.positives + cfg.negatives:  # an approximate index found too few
                    trace.stop_reason = StopReason.TOO_FEW
                    results.append(SearchResult(qid, ranking[:hits], trace))
                    continue
                q = vector.astype(np.float64)
                w_pos, w_neg = confidence_weights(C @ q, cfg.positives, cfg.negatives, cfg.temperature)
                margin_q = adaptive_margin(q, C[0], cfg.margin, cfg.margin_slope)
                start = buffer if self.carrying else None
                scores, h, losses = dart_adapt(q, C, start, w_pos, w_neg, margin_q, cfg.lr, cfg.iterations)
                if self.carrying:
                    buffer = dart_buffer(start, q, h, cfg.momentum)
                trace.iterations, trace.losses = cfg.iterations, losses
                results.append(SearchResult(qid, rerank_head(ranking, scores)[:hits], trace))
        self.buffer = buffer
        return results
