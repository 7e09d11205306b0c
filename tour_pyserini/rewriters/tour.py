"""TOUR: test-time optimisation of query representations (Sung et al., 2023; docs/algorithms.md, "TOUR").

Per query, for t = 0..T-1: search the full index for the top-depth, have the teacher score the
candidates (each at most once per query), turn the scores into pseudo labels, and take one SGD step
on the query vector. Then search once more with the final vector and rank its top-depth by
lam softmax(teacher) + (1 - lam) softmax(sim / smoothing). A batch of queries advances together: one
Faiss search and one teacher call per iteration for all queries still active, with exactly the results
of running them one at a time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.numbers import finite_float, positive_int
from tour_pyserini.results import SearchResult, timed
from tour_pyserini.rewriters.base import (
    DEPTH,
    LAMBDA,
    REWRITERS,
    SMOOTHING,
    Option,
    QueryBatch,
    Rewriter,
    VectorIndex,
    check_depth,
    rank_by_teacher,
)
from tour_pyserini.rewriters.ttt_embed import STATE, TASK, optional_shift
from tour_pyserini.rewriters.updates import (
    SimilarityScale,
    check_aggregation,
    clip_by_norm,
    fill_unscored,
    hard_loss_and_grad,
    linear_lr,
    nucleus,
    sgd_step,
    soft_loss_and_grad,
    softmax,
)
from tour_pyserini.teachers import ScoreCache, ScoreStore, Teacher

PRESETS = {
    "passage": {"lr": 0.2, "iterations": 1, "depth": 100, "lam": 1.0},  # paper Table 7, DPR passage retrieval
    "odqa": {"lr": 1.2, "iterations": 3, "depth": 10, "lam": 0.1},  # paper Table 7, open-domain QA
}

UNSCORED = "the teacher scored none of the candidates"  # a trace's stop reason

TOUR_OPTIONS = (
    Option("--preset", "preset", str, "passage: lr 0.2, T 1, k 100, lambda 1; odqa: lr 1.2, T 3, k 10, lambda 0.1",
           choices=tuple(PRESETS)),  # fmt: skip
    DEPTH,
    Option("--iterations", "iterations", positive_int, "maximum iterations T"),
    Option("--lr", "lr", finite_float, "learning rate (decays linearly to 0 over T)"),
    Option("--momentum", "momentum", finite_float, "SGD momentum (0.99)"),
    Option("--weight-decay", "weight_decay", finite_float, "SGD weight decay (0.01; official code 0.1)"),
    Option("--clip", "clip", finite_float, "gradient-norm clipping (1.0)"),
    Option("--tau", "tau", finite_float, "teacher temperature (0.5)"),
    Option("--retriever-temperature", "retriever_temperature", finite_float, "temperature of the retriever's "
           "distribution P_k in the loss (1, the paper's; 0.05 suits unit-length encoders trained at scale 20)"),
    Option("--p", "p", finite_float, "nucleus mass of the hard pseudo positives (0.5)"),
    LAMBDA,
    SMOOTHING,
    Option("--fixed-positives", "fixed_positives", positive_int, "ablation: the retriever's top-k' are the pseudo "
           "positives (TOUR-hard then equals Rocchio; no early stop)", metavar="K'"),  # fmt: skip
    Option("--teacher-positives", "teacher_positives", positive_int, "ablation: the teacher's top-k' are the pseudo "
           "positives (TOUR-hard)", metavar="K'"),  # fmt: skip
    Option("--soft-stop", "soft_stop", str, "TOUR-soft early stop: the retriever's top-1 is the teacher's top-1 "
           "(argmax, paper) or in the teacher's p-nucleus (nucleus, official code)", choices=("argmax", "nucleus")),
    Option("--no-early-stop", "early_stop", help="ablation: always run T iterations", const=False),
    Option("--no-cache", "use_cache", help="ablation: rescore candidates every iteration", const=False),
    Option("--similarity-scale", "similarity_scale", str, "fixed: lr, clip, weight decay and temperatures as "
           "given (default); norms: they are for unit vectors, converted by each query's norm and its "
           "candidates' (unit-length encoders unchanged)", choices=("fixed", "norms")),
    Option("--final", "final", str, "final ranking: the last search's top-k (paper), or its union with every "
           "candidate scored on the way (no extra teacher calls)", choices=("search", "union")),
    STATE,  # beyond the paper: start from a TTT-Embed state's unit(x + alpha v) instead of x
    TASK,
)  # fmt: skip


@dataclass(frozen=True)
class TourConfig:
    """Every knob of TOUR; defaults are the paper's, the learning-rate group comes from a preset."""

    depth: int = 100  # candidates the teacher scores per iteration (--k)
    iterations: int = 1
    lr: float = 0.2
    lam: float = 1.0  # final score = lam * teacher + (1 - lam) * retriever
    momentum: float = 0.99
    weight_decay: float = 0.01  # paper text; the official code passes 0.1
    clip: float | None = 1.0  # gradient-norm clipping (official code)
    tau: float = 0.5  # teacher temperature
    retriever_temperature: float = 1.0  # P_k = softmax(sim / this) in the loss
    p: float = 0.5  # nucleus mass of the hard pseudo positives
    fixed_positives: int | None = None  # ablation: the retriever's top-k' instead of the nucleus
    teacher_positives: int | None = None  # ablation: the teacher's top-k' instead of the nucleus
    soft_stop: str = "argmax"  # "nucleus": the official code's rule
    early_stop: bool = True
    use_cache: bool = True  # ablation: False rescores every candidate at every iteration
    smoothing: float = 100.0  # retriever logits are sim / smoothing in the final aggregation
    final: str = "search"  # "union": the final ranking also holds every candidate scored in the iterations
    # "fixed": used as given (the paper's presets were chosen so for DPR); "norms": lr, clip, weight decay and
    # the temperatures are for unit vectors, converted per query by its norms (SimilarityScale)
    similarity_scale: str = "fixed"

    @classmethod
    def from_preset(cls, preset: str = "passage", **overrides) -> TourConfig:
        if preset not in PRESETS:
            raise UserError(f"unknown preset {preset!r}; choose one of: {', '.join(PRESETS)}")
        known = {f.name for f in fields(cls)}
        unknown = set(overrides) - known
        if unknown:
            raise UserError(f"unknown TOUR option(s): {', '.join(sorted(unknown))}")
        config = replace(cls(), **{**PRESETS[preset], **{k: v for k, v in overrides.items() if v is not None}})
        config.validate()
        return config

    def validate(self) -> None:
        def finite(name: str, value: float, ok: bool) -> None:
            if not (math.isfinite(value) and ok):
                raise UserError(f"{name} out of range: {value}")

        if self.depth < 1 or self.iterations < 1:
            raise UserError("TOUR needs --k >= 1 and --iterations >= 1")
        finite("--lr (must be >= 0)", self.lr, self.lr >= 0)
        finite("--momentum (must be in [0, 1))", self.momentum, 0 <= self.momentum < 1)
        finite("--weight-decay (must be >= 0)", self.weight_decay, self.weight_decay >= 0)
        if self.clip is not None:
            finite("--clip (must be > 0)", self.clip, self.clip > 0)
        finite("--tau (must be > 0)", self.tau, self.tau > 0)
        finite("--retriever-temperature (must be > 0)", self.retriever_temperature, self.retriever_temperature > 0)
        finite("--p (must be in (0, 1])", self.p, 0 < self.p <= 1)
        check_aggregation(self.lam, self.smoothing)
        if self.soft_stop not in ("argmax", "nucleus"):
            raise UserError(f"--soft-stop must be 'argmax' or 'nucleus', got {self.soft_stop!r}")
        if self.similarity_scale not in ("norms", "fixed"):
            raise UserError(f"--similarity-scale must be 'norms' or 'fixed', got {self.similarity_scale!r}")
        if self.final not in ("search", "union"):
            raise UserError(f"final ranking must be 'search' or 'union', got {self.final!r}")
        if self.final == "union" and not self.use_cache:
            raise UserError("the union final ranking reuses cached teacher scores: it needs the cache")
        if self.fixed_positives is not None and self.teacher_positives is not None:
            raise UserError("give --fixed-positives or --teacher-positives, not both")
        for name, value in (("--fixed-positives", self.fixed_positives), ("--teacher-positives",
                                                                          self.teacher_positives)):  # fmt: skip
            if value is not None and not 1 <= value <= self.depth:
                raise UserError(f"{name} k' must be in [1, k], got {value}")


@dataclass
class _Step:
    stop: bool
    loss: float
    grad: np.ndarray


class _Tour(Rewriter):
    stop_reason: str  # the trace's stop reason when the early-stop rule fires
    options = TOUR_OPTIONS

    def __init__(self, teacher: Teacher, preset: str = "passage", *, store: ScoreStore | None = None,
                 state: str | None = None, task: str | None = None, **options):  # fmt: skip
        """``store`` keeps teacher scores on disk across searches (see :class:`ScoreCache`); ``state``, a
        TTT-Embed state file, moves each query it covers to unit(x + alpha v) before the first step."""
        self.teacher, self.store = teacher, store
        self.config = TourConfig.from_preset(preset, **options)
        self.start = optional_shift(state, task)

    @classmethod
    def check_options(cls, preset: str = "passage", state: str | None = None, task: str | None = None,
                      **options) -> None:  # fmt: skip
        TourConfig.from_preset(preset, **options)
        optional_shift(state, task)  # a missing file or a wrong task fails before any model loads

    def step(self, q: np.ndarray, C: np.ndarray, teacher_scores: np.ndarray, temperature: float) -> _Step:
        """Early stop, loss and gradient for one query at retriever temperature ``temperature``."""
        raise NotImplementedError

    def rewrite(self, batch: QueryBatch, index: VectorIndex, hits: int) -> list[SearchResult]:
        cfg = self.config
        check_depth(cfg.depth, index)
        traces = batch.traces
        q = (self.start(batch, index) if self.start else batch.vectors).astype(np.float64)
        momentum_buffers: list[np.ndarray | None] = [None] * len(batch)
        cache = ScoreCache(self.teacher, index.docstore, enabled=cfg.use_cache, store=self.store)
        active = list(range(len(batch)))
        scored: list[dict[str, np.ndarray]] = [{} for _ in batch.qids]  # candidates the teacher has seen
        scales = [SimilarityScale()] * len(batch)  # set from each query's first candidates
        for t in range(cfg.iterations):
            if not active:
                break
            active_traces = [traces[i] for i in active]
            with timed(active_traces, "search"):
                candidates = index.search_candidates(q[active], cfg.depth)
            scores = cache.score(
                [batch.qids[i] for i in active],
                [batch.texts[i] for i in active],
                [found.docids for found in candidates],
                active_traces,
            )
            still_active = []
            lr = linear_lr(cfg.lr, t, cfg.iterations)
            with timed(active_traces, "update"):
                for i, found, s in zip(active, candidates, scores):
                    scored[i].update(zip(found.docids, found.vectors))
                    if s.size and np.isnan(s).all():  # no pseudo label to learn from: the query stays where it is
                        traces[i].stop_reason = UNSCORED
                        continue
                    s = fill_unscored(s)
                    C = found.vectors.astype(np.float64)
                    if t == 0 and cfg.similarity_scale == "norms":
                        scales[i] = SimilarityScale.of(q[i], C)
                    scale = scales[i]
                    step = self.step(q[i], C, s, scale.temperature(cfg.retriever_temperature))
                    traces[i].losses.append(step.loss)
                    if step.stop and cfg.early_stop:
                        traces[i].stop_reason = self.stop_reason
                        continue
                    grad = clip_by_norm(step.grad, scale.clip(cfg.clip))
                    q[i], momentum_buffers[i] = sgd_step(q[i], grad, momentum_buffers[i], scale.lr(lr), cfg.momentum,
                                                         scale.weight_decay(cfg.weight_decay))  # fmt: skip
                    traces[i].iterations += 1
                    still_active.append(i)
            active = still_active
        for i in active:
            traces[i].stop_reason = "max iterations"
        return rank_by_teacher(batch, index, vectors=q, cache=cache, depth=cfg.depth, hits=hits, lam=cfg.lam,
                               smoothing=[scale.temperature(cfg.smoothing) for scale in scales],
                               scored=scored if cfg.final == "union" else None)  # fmt: skip


@REWRITERS.register
class TourHard(_Tour):
    """Hard pseudo labels: maximise the retriever's probability of the teacher's nucleus C_hard."""

    name = "tour-hard"
    stop_reason = "retriever top-1 is a pseudo positive"

    def positives(self, teacher_scores: np.ndarray) -> np.ndarray:
        cfg = self.config
        if cfg.fixed_positives is not None:
            return np.arange(cfg.fixed_positives)
        if cfg.teacher_positives is not None:
            return np.argsort(-teacher_scores, kind="stable")[: cfg.teacher_positives]
        return nucleus(softmax(teacher_scores, cfg.tau), cfg.p)

    def step(self, q: np.ndarray, C: np.ndarray, teacher_scores: np.ndarray, temperature: float) -> _Step:
        positives = self.positives(teacher_scores)
        loss, grad = hard_loss_and_grad(q, C, positives, temperature)
        # the retriever's own top-k' always hold its top-1: that ablation runs every iteration
        stop = self.config.fixed_positives is None and bool(np.any(positives == 0))
        return _Step(stop, loss, grad)


@REWRITERS.register
class TourSoft(_Tour):
    """Soft pseudo labels: minimise KL(teacher distribution || retriever distribution) over the top-depth."""

    name = "tour-soft"

    @property
    def stop_reason(self) -> str:
        if self.config.soft_stop == "nucleus":
            return "retriever top-1 is in the teacher's nucleus"
        return "retriever top-1 is the teacher's top-1"

    def step(self, q: np.ndarray, C: np.ndarray, teacher_scores: np.ndarray, temperature: float) -> _Step:
        cfg = self.config
        probs = softmax(teacher_scores, cfg.tau)
        loss, grad = soft_loss_and_grad(q, C, probs, temperature)
        if cfg.soft_stop == "nucleus":
            stop = bool(np.any(nucleus(probs, cfg.p) == 0))
        else:
            stop = int(np.argmax(probs)) == 0
        return _Step(stop, loss, grad)
