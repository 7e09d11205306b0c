"""The one training loop: batches, the best checkpoint, staging, clipping, the schedule and the trainers' flags."""

from __future__ import annotations

import json
import random
import re

import pytest
import torch

from tour_pyserini.training.loop import LoopSettings, Trainer, epoch_batches, stream_batches


class ScriptedTask:
    """A real linear model and squared loss whose dev metric is read from ``script``, one value per evaluation;
    it records its weights at every evaluation and saves them as JSON."""

    name, metric = "toy", "dev_score"

    def __init__(self, script: list[float], fail_at: dict | None = None):
        torch.manual_seed(0)
        self.model = torch.nn.Linear(3, 1)
        self.modules = [self.model]
        self.script, self.fail_at = list(script), fail_at or {}
        self.x, self.y = torch.randn(12, 3), torch.randn(12, 1)
        self.seen: list[list[float]] = []  # the weights at each evaluation
        self.modes: list[tuple[str, bool]] = []

    def parameters(self):
        return list(self.model.parameters())

    def loss(self, batch, run):
        self.modes.append(("loss", self.model.training))
        if run.step in self.fail_at:
            raise self.fail_at[run.step]
        rows = torch.tensor(batch)
        return ((self.model(self.x[rows]) - self.y[rows]) ** 2).mean() * 1e3, {"rows": float(len(batch))}

    def evaluate(self, run):
        self.modes.append(("evaluate", self.model.training))
        self.seen.append(self.weights())
        return {self.metric: self.script.pop(0)}

    def weights(self) -> list[float]:
        return [round(v, 6) for v in torch.cat([p.detach().flatten() for p in self.model.parameters()]).tolist()]

    def save(self, where):
        (where / "weights.json").write_text(json.dumps(self.weights()))


def settings(**kw) -> LoopSettings:
    return LoopSettings(**{"steps": 6, "batch_size": 4, "lr": 1e-2, "warmup": 0.0, "eval_every": 2, "seed": 0, **kw})


def test_the_best_evaluation_is_saved_and_a_tie_keeps_the_earlier(tmp_path):
    task = ScriptedTask([0.1, 0.3, 0.5, 0.5])  # steps 0, 2, 4, 6
    report = Trainer(task, settings()).fit(list(range(12)), tmp_path / "out", {"about": 1})
    assert [h["step"] for h in report["history"]] == [0, 2, 4, 6]
    assert report["best_step"] == 4 and report["best_dev_score"] == 0.5 and report["about"] == 1
    assert json.loads((tmp_path / "out/weights.json").read_text()) == task.seen[2] != task.seen[3]
    assert json.loads((tmp_path / "out/training.json").read_text()) == report
    assert all(h["train_loss"] > 0 and h["rows"] == 4.0 for h in report["history"][1:])
    # steps run in train mode, evaluations in eval mode
    assert {mode for what, mode in task.modes if what == "loss"} == {True}
    assert {mode for what, mode in task.modes if what == "evaluate"} == {False}


@pytest.mark.parametrize(
    "initial, best_step, steps",
    [("candidate", 0, [0, 2, 4, 6]), ("reported", 6, [0, 2, 4, 6]), ("skipped", 6, [2, 4, 6])],
)
def test_step_zero_is_a_candidate_reported_only_or_skipped(initial, best_step, steps, tmp_path):
    script = [0.9, 0.1, 0.2, 0.3] if initial != "skipped" else [0.1, 0.2, 0.3]
    task = ScriptedTask(script)
    report = Trainer(task, settings(initial=initial)).fit(list(range(12)), tmp_path / "out", {})
    assert [h["step"] for h in report["history"]] == steps and report["best_step"] == best_step
    saved = json.loads((tmp_path / "out/weights.json").read_text())
    assert saved == task.seen[0 if initial == "candidate" else -1]


@pytest.mark.parametrize("error", [RuntimeError("a bug"), KeyboardInterrupt()])
def test_a_failed_or_interrupted_run_leaves_nothing_and_keeps_the_old_output(error, tmp_path):
    task = ScriptedTask([0.1, 0.2, 0.3], fail_at={3: error})
    with pytest.raises(type(error)):
        Trainer(task, settings()).fit(list(range(12)), tmp_path / "new", {})
    assert not list(tmp_path.iterdir())
    old = tmp_path / "old"
    old.mkdir()
    (old / "weights.json").write_text("kept")
    task = ScriptedTask([0.1, 0.2, 0.3], fail_at={3: error})
    with pytest.raises(type(error)):
        Trainer(task, settings()).fit(list(range(12)), old, {})
    assert [p.name for p in tmp_path.iterdir()] == ["old"] and (old / "weights.json").read_text() == "kept"


def test_gradients_are_clipped_to_max_grad_norm_unless_it_is_none():
    def norm(max_grad_norm):
        trainer = Trainer(ScriptedTask([]), settings(max_grad_norm=max_grad_norm))
        trainer.step([0, 1, 2, 3])
        return torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in trainer.task.parameters()])).item()

    assert norm(1.0) == pytest.approx(1.0, rel=1e-5) and norm(None) > 10


def test_stop_after_ends_early_on_the_full_schedule(tmp_path):
    trainer = Trainer(ScriptedTask([0.1, 0.2, 0.3]), settings(steps=10, stop_after=3, eval_every=5))
    report = trainer.fit(list(range(12)), tmp_path / "out", {})
    assert [h["step"] for h in report["history"]] == [0, 3]  # the last step is always evaluated
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(1e-2 * 7 / 10)  # linear decay over 10 steps


def test_epochs_are_shuffled_passes_closed_by_a_short_batch():
    batches = list(epoch_batches(range(10), 4, 2, random.Random(1)))
    assert [len(b) for b in batches] == [4, 4, 2, 4, 4, 2]
    assert sorted(sum(batches[:3], [])) == sorted(sum(batches[3:], [])) == list(range(10))
    assert sum(batches[:3], []) != sum(batches[3:], [])


def test_a_stream_runs_passes_together_and_draws_as_the_trainers_did():
    rng, reference = random.Random(1), random.Random(1)
    stream = stream_batches(list(range(10)), 4, rng)
    queue, expected = [], []
    for _ in range(7):  # the queue the four stream trainers wrote out by hand
        if len(queue) < 4:
            queue = queue + reference.sample(list(range(10)), 10)
        expected.append(queue[:4])
        queue = queue[4:]
    got = [next(stream) for _ in range(7)]
    assert got == expected and all(len(b) == 4 for b in got)
    assert sorted(sum(got, [])[:8]) != list(range(8))  # passes run on: the third batch mixes two


def test_bad_settings_are_refused_before_anything_trains():
    from tour_pyserini.errors import UserError

    with pytest.raises(UserError, match="initial must be one of"):
        Trainer(ScriptedTask([]), settings(initial="best"))
    with pytest.raises(UserError, match="precision 'fp16'"):
        Trainer(ScriptedTask([]), settings(precision="fp16"))


TRAINERS = [
    ("train_ict", "ict_training.IctConfig", ["--collection", "c"]),
    ("train_qa", "early_update.QaConfig", ["--index", "i", "--topics", "t"]),
    ("train_orqa", "orqa_joint.OrqaConfig", ["--index", "i", "--topics", "t", "--reader", "r"]),
    ("train_reader", "reader.ReaderTrainConfig", ["--run", "r", "--topics", "t", "--collection", "c"]),
    ("train_reranker", "reranker.TrainConfig", ["--index", "i", "--topics", "t"]),
]


def trainer(command: str, config: str):
    """A trainer command's module and its config class."""
    import importlib

    module, name = config.split(".")
    cls = getattr(importlib.import_module(f"tour_pyserini.training.{module}"), name)
    return importlib.import_module(f"tour_pyserini.commands.{command}"), cls


@pytest.mark.parametrize("command, config, needed", TRAINERS)
def test_every_trainer_spells_precision_one_way(command, config, needed, capsys):
    from tour_pyserini.commands.flags import config_from_flags

    module, cls = trainer(command, config)
    ap = module.parser()

    def parsed(*flags: str):
        args = ap.parse_args([*needed, "--output", "o", *flags])
        return config_from_flags(cls, args, precision=args.precision)

    assert parsed().precision == cls.precision and parsed("--precision", "bf16").precision == "bf16"
    assert "--bf16" not in ap.format_help() and "--precision" in ap.format_help()


def out_of_range(kind) -> str:
    """A value the range ``kind`` refuses, as typed."""
    return next(text for text in ("0", "-1", "1", "1.5") if not kind.ok(kind(text)))


@pytest.mark.parametrize("command, config, needed", TRAINERS)
def test_every_trainer_flag_says_its_config_default_and_refuses_a_value_out_of_range_in_one_line(
    command, config, needed, tmp_path, capsys
):
    """Each config field is a flag whose help says the default the config has; a value out of its range is one
    line naming the flag from the command line (before anything is read), the parameter from the library."""
    from dataclasses import asdict

    from tour_pyserini.commands.runner import run_cli
    from tour_pyserini.errors import UserError
    from tour_pyserini.numbers import Number, params_of

    module, cls = trainer(command, config)
    helps = {a.option_strings[0]: " ".join(a.help.split()) for a in module.parser()._actions if a.option_strings}
    for name, default in asdict(cls()).items():
        assert f"(default: {default})" in helps[f"--{name.replace('_', '-')}"], name
    ranged = [(p.name, p.type) for p in params_of(cls) if isinstance(p.type, Number)]
    assert len(ranged) >= 10
    for name, kind in ranged:
        flag, bad = f"--{name.replace('_', '-')}", out_of_range(kind)
        with pytest.raises(SystemExit) as exited:
            run_cli(module.main, [*needed, "--output", str(tmp_path / "o"), flag, bad])
        err = capsys.readouterr().err
        assert (
            exited.value.code == 2
            and err.startswith(f"error: {flag} must be {kind.rule}, got ")
            and err.count("\n") == 1
        ), err
        with pytest.raises(UserError, match=f"^{name} must be {re.escape(kind.rule)}, got "):
            cls(**{name: kind(bad)}).check()
    assert not list(tmp_path.iterdir())
