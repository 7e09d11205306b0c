"""One training loop for every trainer, kept apart from their models and losses (sentence-transformers' shape).

A trainer hands :class:`Trainer` a :class:`Task`: the modules that learn, the loss of one batch, how dev
is scored and how the chosen checkpoint is written. The loop owns what they share: the order of the
training items (shuffled passes, :func:`epoch_batches` or :func:`stream_batches`), AdamW with warm-up
and linear decay (``schedule.py``), gradient clipping, the precision (the task runs its forward passes
under :meth:`Run.autocast`), train and eval modes, evaluation every ``eval_every`` steps and at the last,
the best checkpoint (kept in memory; a later one must beat it), the staged output directory (an error or
Ctrl-C leaves nothing behind), the progress bar and the report, ``training.json``.
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tour_pyserini.devices import resolve_precision
from tour_pyserini.errors import UserError
from tour_pyserini.numbers import Param, non_negative_int, param, positive_float, probability

log = logging.getLogger(__name__)

INITIAL = ("candidate", "reported", "skipped")  # what step 0 (the model before training) is
LEARNING_RATE = Param("lr", positive_float, help="AdamW learning rate")  # each trainer sets its own default


@dataclass
class TrainerSettings:
    """What every trainer's config has alike, declared once: each trainer's config extends it, declares its own
    parameters, and its learning rate with ``param(DEFAULT, like=LEARNING_RATE)``."""

    warmup: float = param(0.1, probability, "fraction of the steps the learning rate warms up over")
    seed: int = param(13, non_negative_int, "random seed")
    precision: str = "fp32"  # of the forward passes: auto, fp32 or bf16 (autocast); its own flag (--precision)


@dataclass
class LoopSettings:
    steps: int  # optimiser steps the schedule spans
    batch_size: int  # training items per step
    lr: float
    warmup: float  # fraction of the steps the learning rate warms up over
    eval_every: int  # evaluate every this many steps, and at the last
    seed: int  # of the random stream the batches and the task's draws come from
    precision: str = "fp32"  # auto, fp32 or bf16 (autocast)
    max_grad_norm: float | None = 1.0  # gradients are clipped to this norm; None: not clipped
    epochs: int = 0  # that many shuffled passes, each closed by a shorter batch; 0: passes follow each other
    stop_after: int = 0  # stop after this many steps (0: at ``steps``); the schedule still spans ``steps``
    initial: str = "candidate"  # step 0 is evaluated and may be kept, only evaluated ("reported"), or "skipped"

    def check(self) -> None:
        if self.initial not in INITIAL:
            raise UserError(f"initial must be one of {', '.join(INITIAL)}, got {self.initial!r}")
        if min(self.steps, self.batch_size, self.eval_every) < 1 or self.stop_after < 0 or self.epochs < 0:
            raise UserError("steps, batch_size and eval_every must be positive, stop_after and epochs at least 0")

    @classmethod
    def of(cls, config, **settings) -> LoopSettings:
        """The settings a trainer's ``config`` names alike (steps, batch_size, lr, warmup, eval_every, seed,
        precision), with ``settings`` for the rest."""
        same = ("steps", "batch_size", "lr", "warmup", "eval_every", "seed", "precision")
        return cls(**{name: getattr(config, name) for name in same}, **settings)

    @property
    def last(self) -> int:
        return min(self.steps, self.stop_after) if self.stop_after else self.steps


@dataclass
class Run:
    """What the loop hands a task at each step and evaluation: its random stream, its precision, the step."""

    rng: random.Random
    bf16: bool
    step: int = 0  # the step being computed (1 for the first); 0 before training

    def autocast(self):
        from tour_pyserini.training.schedule import autocast

        return autocast(self.bf16)


class Task(Protocol):
    """A trainer's part: its models and losses. ``evaluate`` runs in eval mode under ``torch.inference_mode``."""

    name: str  # the progress bar's label
    metric: str  # the key of ``evaluate``'s result that chooses the checkpoint: higher is better
    modules: list  # the torch modules that learn; their best state is what ``save`` writes

    def parameters(self) -> list:
        """What AdamW moves: parameters, or parameter groups (dicts, with their own ``lr`` where they differ)."""

    def loss(self, batch: list, run: Run):
        """The loss of one batch of training items (a scalar tensor), and figures to report of it (a dict,
        averaged over the steps between evaluations)."""

    def evaluate(self, run: Run) -> dict[str, float]:
        """The dev metrics, ``metric`` among them."""

    def save(self, directory: Path) -> None:
        """Write the model as it is now (the chosen checkpoint) into ``directory``."""


def epoch_batches(items: Sequence, size: int, epochs: int, rng: random.Random) -> Iterator[list]:
    """``epochs`` passes over ``items``, each shuffled anew and cut into batches of ``size`` (its last one shorter)."""
    for _ in range(epochs):
        order = list(items)
        rng.shuffle(order)
        for i in range(0, len(order), size):
            yield order[i : i + size]


def stream_batches(items: Sequence, size: int, rng: random.Random) -> Iterator[list]:
    """Batches of ``size`` from shuffled passes over ``items`` that follow each other without a break."""
    queue: list = []
    while True:
        if len(queue) < size:
            queue = queue + rng.sample(list(items), len(items))
        batch, queue = queue[:size], queue[size:]
        yield batch


def state_of(modules: list) -> list[dict]:
    return [{k: v.detach().clone() for k, v in m.state_dict().items()} for m in modules]


@dataclass
class Checkpoint:
    step: int
    value: float
    state: list[dict]  # each module's state dict


def better(value: float, best: Checkpoint | None) -> bool:
    """Whether a dev value replaces the best checkpoint so far: only by beating it (ties keep the earlier)."""
    return best is None or value > best.value


class Trainer:
    """Trains a :class:`Task`: an optimiser step per batch, evaluations, the best checkpoint saved, staged."""

    def __init__(self, task: Task, settings: LoopSettings, rng: random.Random | None = None):
        from tour_pyserini.training.schedule import optimizer

        settings.check()
        self.task, self.settings = task, settings
        self.precision = resolve_precision(settings.precision, "cpu", "precision")
        self.run = Run(rng or random.Random(settings.seed), self.precision == "bf16")
        self.optimizer, self.scheduler = optimizer(
            task.parameters(), lr=settings.lr, steps=settings.steps, warmup_fraction=settings.warmup
        )

    def step(self, batch: list) -> tuple[float, dict]:
        """One optimiser step on ``batch``: (its loss, the figures the task reports of it)."""
        import torch

        for module in self.task.modules:
            module.train()
        loss, figures = self.task.loss(batch, self.run)
        self.optimizer.zero_grad()
        loss.backward()
        if self.settings.max_grad_norm is not None:
            params = [p for group in self.optimizer.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(params, self.settings.max_grad_norm)
        self.optimizer.step()
        self.scheduler.step()
        return float(loss.detach()), figures

    def evaluate(self) -> dict[str, float]:
        import torch

        for module in self.task.modules:
            module.eval()
        with torch.inference_mode():
            return self.task.evaluate(self.run)

    def fit(self, items: Sequence, output: str | Path, about: dict, what: str = "the model") -> dict:
        """Train on ``items`` and write the best checkpoint and ``training.json`` (``about`` and the loop's
        record) to ``output``, which appears only whole; returns the report."""
        from tqdm import tqdm
        from tqdm.contrib.logging import logging_redirect_tqdm

        from tour_pyserini.files.staging import staged_directory

        s, start = self.settings, time.perf_counter()
        history, best, batches = [], None, self.batches(items)
        shown = logging.getLogger("tour_pyserini")  # where a command shows the log: through the bar's writes
        with staged_directory(output, what) as tmp, logging_redirect_tqdm([shown] if shown.handlers else []):
            if s.initial != "skipped":
                history.append(self.record(0, start, {}))
                if s.initial == "candidate":
                    best = Checkpoint(0, history[0][self.task.metric], state_of(self.task.modules))
            losses, figures = [], []
            with tqdm(total=s.last, desc=self.task.name, unit="step") as bar:
                for step, batch in zip(range(1, s.last + 1), batches):
                    self.run.step = step
                    loss, figure = self.step(batch)
                    losses.append(loss)
                    figures.append(figure)
                    bar.update()
                    bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
                    if step % s.eval_every and step != s.last:
                        continue
                    history.append(
                        self.record(step, start, {"train_loss": sum(losses) / len(losses), **mean_figures(figures)})
                    )
                    losses, figures = [], []
                    if better(history[-1][self.task.metric], best):
                        best = Checkpoint(step, history[-1][self.task.metric], state_of(self.task.modules))
            if best is None:  # only when epochs of batches ran out before an evaluation
                raise ValueError(f"no checkpoint was evaluated: {s.epochs} epochs end before step {s.last}")
            for module, state in zip(self.task.modules, best.state):
                module.load_state_dict(state)
            self.task.save(tmp)
            report = {
                **about,
                "precision": self.precision,
                "history": history,
                "best_step": best.step,
                f"best_{self.task.metric}": best.value,
                "seconds": round(time.perf_counter() - start, 1),
            }
            (tmp / "training.json").write_text(json.dumps(report, indent=2) + "\n")
        return report

    def batches(self, items: Sequence) -> Iterator[list]:
        s = self.settings
        if not items:
            raise UserError("nothing to train on")
        if s.epochs:
            return epoch_batches(items, s.batch_size, s.epochs, self.run.rng)
        return stream_batches(items, s.batch_size, self.run.rng)

    def record(self, step: int, start: float, training: dict) -> dict:
        """The history entry of an evaluation at ``step``, logged as one line."""
        metrics = self.evaluate()
        entry = {"step": step, **training, **metrics, "seconds": round(time.perf_counter() - start, 1)}
        shown = ", ".join(f"{k} {v:.4f}" for k, v in {**metrics, **training}.items())
        log.info(f"step {step}: {shown}")
        return entry


def mean_figures(figures: list[dict]) -> dict[str, float]:
    """Each figure's mean over the steps since the last evaluation."""
    names = dict.fromkeys(k for f in figures for k in f)
    return {k: math.fsum(f[k] for f in figures if k in f) / sum(k in f for f in figures) for k in names}
