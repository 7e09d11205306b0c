"""Fitting an ensemble teacher's weights: the listwise likelihood of the relevant candidates on dev queries.

For query q with candidate features F_q (n_q candidates x p teachers' raw scores) and relevant set R_q,
the weights w minimise

    L(w) = mean_q [ -log sum_{d in R_q} softmax(F_q w)_d ] + l2 * ||w||^2

(the marginal likelihood the trainers use, ``losses.marginal_nll``). Its scale is free: larger weights
sharpen the softmax, so the fit also chooses how peaked the teacher's distribution is. Queries without
a relevant candidate carry no signal and are left out.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.pipeline import SearchSpec
from tour_pyserini.teachers.base import TeacherSpec


def ensemble_loss(weights, features: Sequence[np.ndarray], relevant: Sequence[np.ndarray], l2: float):
    """L(w) as a torch scalar (differentiable in ``weights``, a (p,) tensor)."""
    import torch

    from tour_pyserini.training.losses import marginal_nll

    losses = []
    for f, r in zip(features, relevant):
        scores = torch.as_tensor(f, dtype=torch.float64) @ weights
        losses.append(marginal_nll(scores[None, :], torch.as_tensor(r, dtype=torch.bool)[None, :])[0][0])
    return torch.stack(losses).mean() + l2 * (weights**2).sum()


def fit_weights(
    features: Sequence[np.ndarray], relevant: Sequence[np.ndarray], *, l2: float = 1e-4, init: Sequence[float]
) -> np.ndarray:
    """The weights minimising :func:`ensemble_loss` from ``init`` (L-BFGS), over queries with a relevant candidate."""
    import torch

    kept = [(f, r) for f, r in zip(features, relevant) if np.any(r)]
    if not kept:
        raise ValueError("no query has a relevant candidate to fit on")
    feats, rels = [f for f, _ in kept], [r for _, r in kept]
    weights = torch.tensor(list(init), dtype=torch.float64, requires_grad=True)
    opt = torch.optim.LBFGS([weights], lr=1.0, max_iter=500, tolerance_grad=1e-10, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = ensemble_loss(weights, feats, rels, l2)
        loss.backward()
        return loss

    opt.step(closure)
    return weights.detach().numpy().copy()


def relative_spec(spec: TeacherSpec, base: Path) -> str:
    """``spec`` with a path argument under ``base`` written relative to it (the file moves with its directory)."""
    if spec.argument and Path(spec.argument).exists():
        relative = os.path.relpath(Path(spec.argument).resolve(), base.resolve())
        if not relative.startswith(".."):
            return str(spec.with_argument(relative))
    return str(spec)


def fit_ensemble(
    index: str | Path | SearchSpec,
    topics,
    qrels,
    teacher_specs: Sequence[str],
    output: Path,
    *,
    depth: int = 30,
    l2: float = 1e-4,
    topics_name: str = "",
) -> dict:
    """Fit the weights of ``teacher_specs`` on ``topics`` (qrels, or None: candidates holding an answer string
    are relevant) re-ranking the dense top ``depth`` of ``index`` (a directory, or a search's configuration with
    the device and the teachers' flags); write the ensemble file ``output`` and return what it records of the fit
    (``alone``: each teacher's metric by itself; ``ensemble``; ``parts``). The teachers share the search's query
    encoder and index, as a search's teacher does."""
    from tqdm import tqdm

    from tour_pyserini.eval import evaluate
    from tour_pyserini.eval.answers import AnswerMatcher, answer_qrels
    from tour_pyserini.pipeline import build, build_teacher, plan, plan_teachers
    from tour_pyserini.teachers import ScoreRequest
    from tour_pyserini.teachers.ensemble import write_ensemble

    spec = index if isinstance(index, SearchSpec) else SearchSpec(index=str(index))
    specs = plan_teachers(teacher_specs, spec)  # every spec known before anything loads
    planned = plan(spec)
    searcher = build(planned).searcher
    metric = "nDCG@10" if qrels is not None else "Success@1"
    judged_by = "qrels" if qrels is not None else "answer strings"
    rankings = searcher.batch_search([t.text for t in topics], [t.qid for t in topics], k=depth)
    if qrels is None:
        run = {q: {h.docid: -i for i, h in enumerate(hits)} for q, hits in rankings.items()}
        qrels = answer_qrels(run, topics, AnswerMatcher(searcher.docstore), depth)
    qrels = {t.qid: qrels.get(t.qid, {}) for t in topics}  # means over the fit queries only
    candidates = [[h.docid for h in rankings[t.qid]] for t in topics]
    relevant = [np.array([qrels[t.qid].get(d, 0) > 0 for d in docids]) for t, docids in zip(topics, candidates)]
    if not any(r.any() for r in relevant):  # known from the dense search alone: no teacher has loaded yet
        raise UserError(
            f"no query of {topics_name or 'the topics'} has a relevant document ({judged_by}) in its "
            f"dense top {depth}: nothing to fit on"
        )
    teachers = [build_teacher(planned, teacher) for teacher in specs]
    features = []
    for t, docids in tqdm(list(zip(topics, candidates)), desc="score", unit="q"):
        request = ScoreRequest(t.qid, t.text, docids, searcher.docstore.get(docids))
        features.append(np.stack([teacher.score([request])[0] for teacher in teachers], axis=1))
        if np.isnan(features[-1]).any():
            silent = teacher_specs[int(np.isnan(features[-1]).any(axis=0).argmax())]
            raise UserError(
                f"teacher {silent} gave no score for a candidate of query {t.qid}: the weights are fitted "
                "on every candidate's score"
            )
    weights = fit_weights(features, relevant, l2=l2, init=[1.0] + [0.0] * (len(teachers) - 1))

    def quality(w) -> float:
        run = {t.qid: dict(zip((h.docid for h in rankings[t.qid]), f @ w)) for t, f in zip(topics, features)}
        return evaluate(qrels, run, [metric]).means[metric]

    alone = {spec: quality(np.eye(len(teachers))[i]) for i, spec in enumerate(teacher_specs)}
    fitted_on = {
        "topics": topics_name,
        "queries": len(topics),
        "depth": depth,
        "l2": l2,
        "metric": metric,
        "alone": alone,
        "ensemble": quality(weights),
    }
    parts = [(relative_spec(spec, output.parent), float(w)) for spec, w in zip(specs, weights)]
    write_ensemble(output, parts, fitted_on)
    return {**fitted_on, "parts": parts}
