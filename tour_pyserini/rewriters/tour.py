"""TOUR: test-time optimisation of query representations (Sung et al., 2023; docs/algorithms.md, "TOUR").

Per query, for t = 0..T-1: search the full index for the top-depth, have the teacher score the
candidates (each at most once per query), turn the scores into pseudo labels, and take one SGD step
on the query vector. Then search once more with the final vector and rank its top-depth by
lam softmax(teacher) + (1 - lam) softmax(sim / smoothing). A batch of queries advances together: one
Faiss search and one teacher call per iteration for all queries still active, with exactly the results
of running them one at a time.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.numbers import (
    Role,
    below_one,
    configure,
    mass,
    non_negative_float,
    param,
    positive_float,
    positive_int,
)
from tour_pyserini.results import SearchResult, StopReason, timed
from tour_pyserini.rewriters.base import (
    DEPTH,
    LAMBDA,
    REWRITERS,
    SMOOTHING,
    QueryBatch,
    TeacherRewriter,
    VectorIndex,
    rank_by_teacher,
)
from tour_pyserini.rewriters.ttt_embed import STATE, TASK, StateShift, check_task
from tour_pyserini.rewriters.updates import (
    SimilarityScale,
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


PRESET_HELP = "; ".join(
    f"{name}: " + ", ".join(f"{k} {v}" for k, v in values.items()) for name, values in PRESETS.items()
)
FROM_PRESET = "the preset's"


@dataclass(frozen=True)
class TourConfig:
    """Every knob of TOUR, each declared once; defaults are the paper's, the learning-rate group (lr, iterations,
    depth, lam) comes from a preset unless given."""

    preset: str = param("passage", str, f"the paper's settings ({PRESET_HELP})", choices=tuple(PRESETS))
    depth: int | None = param(None, like=DEPTH, default_text=FROM_PRESET)
    iterations: int | None = param(
        None, positive_int, "maximum iterations T", default_text=FROM_PRESET, role=Role.ITERATIONS
    )
    lr: float | None = param(
        None, non_negative_float, "learning rate, decaying linearly to 0 over T", default_text=FROM_PRESET
    )
    lam: float | None = param(None, like=LAMBDA, default_text=FROM_PRESET)
    momentum: float = param(0.99, below_one, "SGD momentum")
    weight_decay: float = param(0.01, non_negative_float, "SGD weight decay (the paper's; its official code: 0.1)")
    clip: float = param(1.0, positive_float, "gradient-norm clipping (the official code's)")
    tau: float = param(0.5, positive_float, "teacher temperature")
    retriever_temperature: float = param(
        1.0,
        positive_float,
        "temperature of the retriever's distribution P_k in "
        "the loss (the paper's 1; 0.05 suits unit-length encoders trained at scale "
        "20)",
    )
    p: float = param(0.5, mass, "nucleus mass of the hard pseudo positives")
    smoothing: float = param(100.0, like=SMOOTHING)
    fixed_positives: int | None = param(
        None,
        positive_int,
        "ablation: the retriever's top-k' are the pseudo positives (TOUR-hard then equals Rocchio; no early stop)",
        metavar="K'",
        role=Role.CANDIDATES,
    )
    teacher_positives: int | None = param(
        None,
        positive_int,
        "ablation: the teacher's top-k' are the pseudo positives (TOUR-hard)",
        metavar="K'",
        role=Role.CANDIDATES,
    )
    soft_stop: str = param(
        "argmax",
        str,
        "TOUR-soft early stop: the retriever's top-1 is the teacher's top-1 "
        "(argmax, paper) or in the teacher's p-nucleus (nucleus, official code)",
        choices=("argmax", "nucleus"),
    )
    early_stop: bool = param(True, bool, "ablation: always run T iterations", flag="--no-early-stop", const=False)
    use_cache: bool = param(True, bool, "ablation: rescore candidates every iteration", flag="--no-cache", const=False)
    # "fixed": used as given (the paper's presets were chosen so for DPR); "norms": lr, clip, weight decay and
    # the temperatures are for unit vectors, converted per query by its norms (SimilarityScale)
    similarity_scale: str = param(
        "fixed",
        str,
        "fixed: lr, clip, weight decay and temperatures as given; norms: "
        "they are for unit vectors, converted by each query's norm and its candidates' "
        "(unit-length encoders unchanged)",
        choices=("fixed", "norms"),
    )
    final: str = param(
        "search",
        str,
        "final ranking: the last search's top-k (paper), or its union with every "
        "candidate scored on the way (no extra teacher calls)",
        choices=("search", "union"),
    )
    # beyond the paper: start from a TTT-Embed state's unit(x + alpha v) instead of x
    state: str | None = param(None, like=STATE)
    task: str | None = param(None, like=TASK)

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise UserError(f"--preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        for name, value in PRESETS[self.preset].items():
            if getattr(self, name) is None:
                object.__setattr__(self, name, value)

    @classmethod
    def from_preset(cls, preset: str = "passage", **overrides) -> TourConfig:
        """The config of ``preset`` with ``overrides`` (None: the preset's), checked."""
        return configure(cls, {"preset": preset, **overrides}, "TOUR")

    def check(self) -> None:
        """What no single parameter's range says."""
        if self.final == "union" and not self.use_cache:
            raise UserError("the union final ranking reuses cached teacher scores: it needs the cache")
        if self.fixed_positives is not None and self.teacher_positives is not None:
            raise UserError("give --fixed-positives or --teacher-positives, not both")
        assert self.depth is not None  # __post_init__ fills it from the preset
        for name, value in (
            ("--fixed-positives", self.fixed_positives),
            ("--teacher-positives", self.teacher_positives),
        ):
            if value is not None and value > self.depth:
                raise UserError(
                    f"{name} ({value}) must be at most --depth ({self.depth}): positives are chosen "
                    "among the candidates judged"
                )
        check_task(self.state, self.task)


@dataclass
class _Step:
    stop: bool
    loss: float
    grad: np.ndarray


class _Tour(TeacherRewriter):
    Config = TourConfig

    @property
    @abstractmethod
    def stop_reason(self) -> StopReason:
        """The trace's stop reason when the early-stop rule fires."""

    def __init__(
        self,
        teacher: Teacher,
        config: TourConfig | None = None,
        *,
        store: ScoreStore | None = None,
        start: StateShift | None = None,
        **values,
    ):
        """``store`` keeps teacher scores on disk across searches (see :class:`ScoreCache`); ``config.state``, a
        TTT-Embed state file, moves each query it covers to unit(x + alpha v) before the first step (``start``:
        that state already read, as a search's plan reads it once)."""
        super().__init__(teacher, config, store=store, **values)
        self.start = start or (StateShift.load(self.config.state, self.config.task) if self.config.state else None)

    def step(self, q: np.ndarray, C: np.ndarray, teacher_scores: np.ndarray, temperature: float) -> _Step:
        """Early stop, loss and gradient for one query at retriever temperature ``temperature``."""
        raise NotImplementedError

    def rewrite(self, batch: QueryBatch, index: VectorIndex, hits: int) -> list[SearchResult]:
        cfg = self.config
        self.check_index(index)
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
                [batch.vectors[i] for i in active],
                batch.encoded_by,
            )
            still_active = []
            lr = linear_lr(cfg.lr, t, cfg.iterations)
            with timed(active_traces, "update"):
                for i, found, s in zip(active, candidates, scores):
                    scored[i].update(zip(found.docids, found.vectors))
                    if s.size and np.isnan(s).all():  # no pseudo label to learn from: the query stays where it is
                        traces[i].stop_reason = StopReason.UNSCORED
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
                    q[i], momentum_buffers[i] = sgd_step(
                        q[i],
                        grad,
                        momentum_buffers[i],
                        scale.lr(lr),
                        cfg.momentum,
                        scale.weight_decay(cfg.weight_decay),
                    )
                    traces[i].iterations += 1
                    still_active.append(i)
            active = still_active
        for i in active:
            traces[i].stop_reason = StopReason.MAX_ITERATIONS
        return rank_by_teacher(
            batch,
            index,
            vectors=q,
            cache=cache,
            depth=cfg.depth,
            hits=hits,
            lam=cfg.lam,
            smoothing=[scale.temperature(cfg.smoothing) for scale in scales],
            scored=scored if cfg.final == "union" else None,
        )


@REWRITERS.register
class TourHard(_Tour):
    """Hard pseudo labels: maximise the retriever's probability of the teacher's nucleus C_hard."""

    name = "tour-hard"
    stop_reason = StopReason.TOP1_POSITIVE

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
    def stop_reason(self) -> StopReason:
        return StopReason.TOP1_NUCLEUS if self.config.soft_stop == "nucleus" else StopReason.TOP1_ARGMAX

    def step(self, q: np.ndarray, C: np.ndarray, teacher_scores: np.ndarray, temperature: float) -> _Step:
        cfg = self.config
        probs = softmax(teacher_scores, cfg.tau)
        loss, grad = soft_loss_and_grad(q, C, probs, temperature)
        if cfg.soft_stop == "nucleus":
            stop = bool(np.any(nucleus(probs, cfg.p) == 0))
        else:
            stop = int(np.argmax(probs)) == 0
        return _Step(stop, loss, grad)
