"""TOUR: test-time optimisation of query representations (Sung et al., 2023; SPEC section 2).

Per query, for t = 0..T-1: search the full index for the top-k, have the teacher score the
candidates (each at most once per query), turn the scores into pseudo labels, and take one SGD step
on the query vector. Then search once more with the final vector and rank its top-k by
lam softmax(teacher) + (1 - lam) softmax(sim / 100). A batch of queries advances together: one Faiss
search and one teacher call per iteration for all queries still active, with exactly the results of
running them one at a time.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import ClassVar

import numpy as np

from tour_pyserini.results import SearchResult, Trace, timed
from tour_pyserini.rewriters.base import QueryBatch, Rewriter, check_depth, rank_by_teacher
from tour_pyserini.rewriters.updates import (
    clip_by_norm,
    hard_loss_and_grad,
    linear_lr,
    nucleus,
    sgd_step,
    soft_loss_and_grad,
    softmax,
)
from tour_pyserini.teachers import ScoreCache, Teacher

PRESETS = {
    "passage": {"lr": 0.2, "iterations": 1, "k": 100, "lam": 1.0},  # paper Table 7, DPR passage retrieval
    "odqa": {"lr": 1.2, "iterations": 3, "k": 10, "lam": 0.1},  # paper Table 7, open-domain QA
}


@dataclass(frozen=True)
class TourConfig:
    """Every knob of TOUR; defaults are the paper's, the learning-rate group comes from a preset."""

    k: int = 100
    iterations: int = 1
    lr: float = 0.2
    lam: float = 1.0  # final score = lam * teacher + (1 - lam) * retriever
    momentum: float = 0.99
    weight_decay: float = 0.01  # paper text; the official code passes 0.1
    clip: float | None = 1.0  # gradient-norm clipping (official code)
    tau: float = 0.5  # teacher temperature
    p: float = 0.5  # nucleus mass of the hard pseudo positives
    fixed_positives: int | None = None  # ablation: the teacher's top-k' instead of the nucleus
    early_stop: bool = True
    use_cache: bool = True  # ablation: False rescores every candidate at every iteration
    smoothing: float = 100.0  # retriever logits are sim / smoothing in the final aggregation
    final: str = "search"  # "union": the final ranking also holds every candidate scored in the iterations

    @classmethod
    def from_preset(cls, preset: str = "passage", **overrides) -> TourConfig:
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}")
        known = {f.name for f in fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise ValueError(f"unknown TOUR option(s): {', '.join(sorted(unknown))}")
        config = replace(cls(), **{**PRESETS[preset], **{k: v for k, v in overrides.items() if v is not None}})
        config.validate()
        return config

    def validate(self) -> None:
        if self.k < 1 or self.iterations < 1:
            raise ValueError("TOUR needs k >= 1 and iterations >= 1")
        if not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"lambda must be in [0, 1], got {self.lam}")
        if self.tau <= 0:
            raise ValueError(f"tau must be positive, got {self.tau}")
        if self.final not in ("search", "union"):
            raise ValueError(f"final ranking must be 'search' or 'union', got {self.final!r}")
        if self.final == "union" and not self.use_cache:
            raise ValueError("the union final ranking reuses cached teacher scores: it needs the cache")
        if self.fixed_positives is not None and not 1 <= self.fixed_positives <= self.k:
            raise ValueError(f"fixed pseudo positives k' must be in [1, k], got {self.fixed_positives}")


@dataclass
class _Step:
    stop: bool
    loss: float
    grad: np.ndarray


class _Tour(Rewriter):
    loss: ClassVar[str]
    stop_reason: ClassVar[str]

    def __init__(self, teacher: Teacher, preset: str = "passage", **options):
        self.teacher = teacher
        self.config = TourConfig.from_preset(preset, **options)

    def step(self, q: np.ndarray, C: np.ndarray, teacher_scores: np.ndarray) -> _Step:
        raise NotImplementedError

    def rewrite(self, batch: QueryBatch, searcher, k: int) -> list[SearchResult]:
        cfg = self.config
        check_depth(cfg.k, searcher)
        traces = [Trace() for _ in batch.qids]
        q = batch.vectors.astype(np.float64)
        momentum_buffers: list[np.ndarray | None] = [None] * len(batch)
        cache = ScoreCache(self.teacher, searcher.docstore, cfg.use_cache)
        active = list(range(len(batch)))
        scored: list[dict[str, np.ndarray]] = [{} for _ in batch.qids]  # candidates the teacher has seen
        for t in range(cfg.iterations):
            if not active:
                break
            active_traces = [traces[i] for i in active]
            with timed(active_traces, "search"):
                candidates = searcher.search_vectors(q[active], cfg.k, return_vector=True)
            scores = cache.score(
                [batch.qids[i] for i in active],
                [batch.texts[i] for i in active],
                [[h.docid for h in hits] for hits in candidates],
                active_traces,
            )
            still_active = []
            lr = linear_lr(cfg.lr, t, cfg.iterations)
            with timed(active_traces, "update"):
                for i, hits, s in zip(active, candidates, scores):
                    scored[i].update((h.docid, h.vector) for h in hits)
                    step = self.step(q[i], np.vstack([h.vector for h in hits]).astype(np.float64), s)
                    traces[i].losses.append(step.loss)
                    if step.stop and cfg.early_stop:
                        traces[i].stop_reason = self.stop_reason
                        continue
                    grad = clip_by_norm(step.grad, cfg.clip)
                    q[i], momentum_buffers[i] = sgd_step(
                        q[i], grad, momentum_buffers[i], lr, cfg.momentum, cfg.weight_decay
                    )
                    traces[i].iterations += 1
                    still_active.append(i)
            active = still_active
        for i in active:
            traces[i].stop_reason = "max iterations"
        union = scored if cfg.final == "union" else None
        return rank_by_teacher(batch, searcher, q, cache, traces, cfg.k, k, cfg.lam, cfg.smoothing, union)


class TourHard(_Tour):
    """Hard pseudo labels: maximise the retriever's probability of the teacher's nucleus C_hard."""

    name = "tour-hard"
    stop_reason = "retriever top-1 is a pseudo positive"

    def positives(self, teacher_scores: np.ndarray) -> np.ndarray:
        cfg = self.config
        if cfg.fixed_positives is not None:
            return np.argsort(-teacher_scores, kind="stable")[: cfg.fixed_positives]
        return nucleus(softmax(teacher_scores, cfg.tau), cfg.p)

    def step(self, q: np.ndarray, C: np.ndarray, teacher_scores: np.ndarray) -> _Step:
        positives = self.positives(teacher_scores)
        loss, grad = hard_loss_and_grad(q, C, positives)
        return _Step(bool(np.any(positives == 0)), loss, grad)


class TourSoft(_Tour):
    """Soft pseudo labels: minimise KL(teacher distribution || retriever distribution) over the top-k."""

    name = "tour-soft"
    stop_reason = "retriever top-1 is the teacher's top-1"

    def step(self, q: np.ndarray, C: np.ndarray, teacher_scores: np.ndarray) -> _Step:
        probs = softmax(teacher_scores, self.config.tau)
        loss, grad = soft_loss_and_grad(q, C, probs)
        return _Step(int(np.argmax(probs)) == 0, loss, grad)
