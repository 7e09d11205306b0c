"""python -m tour_pyserini.fit_ensemble: fit an ensemble teacher's weights on dev (training) queries.

Each teacher scores the dense top ``--depth`` candidates of every topic; the weights maximise the
listwise likelihood of the relevant candidates (qrels, or without ``--qrels`` the candidates containing
an answer string); equations in docs/algorithms.md. The file written is what ``ensemble:FILE`` loads.
Fit on queries nothing else was selected on where possible; ``--dev-of MODEL`` takes the dev queries a
``train_reranker`` model recorded (never trained on).

    python -m tour_pyserini.fit_ensemble --index indexes/scifact.minilm \\
        --topics collections/scifact/topics.train.tsv --qrels qrels/scifact.train.txt \\
        --dev-of models/scifact-rce --teachers cross-encoder:models/scifact-rce bm25 dense \\
        --output models/scifact-rce/ensemble.json
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np

from tour_pyserini.cli_util import run_cli
from tour_pyserini.errors import UserError


def relative_spec(spec: str, base: Path) -> str:
    """``spec`` with a path argument under ``base`` written relative to it (the file moves with its directory)."""
    kind, sep, argument = spec.partition(":")
    if argument and Path(argument).exists():
        relative = os.path.relpath(Path(argument).resolve(), base.resolve())
        if not relative.startswith(".."):
            return f"{kind}{sep}{relative}"
    return spec


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tour_pyserini.fit_ensemble", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--index", required=True, help="dense index: candidates, texts, and the teachers' index")
    ap.add_argument("--topics", required=True, help="topics to fit on (training topics)")
    ap.add_argument("--qrels", help="their qrels (default: candidates containing an answer string are relevant)")
    ap.add_argument("--dev-of", metavar="MODEL", help="fit only on the dev queries MODEL/training.json lists")
    ap.add_argument("--teachers", nargs="+", required=True, help="teacher specs, the first one starts at weight 1")
    ap.add_argument("--depth", type=int, default=30, help="candidates per query (dense top DEPTH)")
    ap.add_argument("--l2", type=float, default=1e-4, help="L2 penalty on the weights")
    ap.add_argument("--output", required=True, help="ensemble file to write (JSON)")
    return ap


def main(argv: list[str] | None = None) -> None:
    from tour_pyserini.data import read_qrels, read_topics

    args = parser().parse_args(argv)
    if len(args.teachers) < 2:
        raise UserError("--teachers needs at least two teacher specs")
    if args.depth < 2:
        raise UserError(f"--depth must be at least 2, got {args.depth}")
    output = Path(args.output)
    if not output.parent.is_dir():
        raise UserError(f"cannot write {output}: its directory does not exist")
    topics = read_topics(args.topics)
    if args.dev_of:
        report = Path(args.dev_of) / "training.json"
        dev_qids = json.loads(report.read_text()).get("dev_qids") if report.is_file() else None
        if dev_qids is None:
            raise UserError(f"--dev-of {args.dev_of}: no training.json with dev_qids (a model train_reranker wrote)")
        dev = set(dev_qids)
        topics = [t for t in topics if t.qid in dev]
    if not topics:
        raise UserError("no topics to fit on")
    qrels = read_qrels(args.qrels) if args.qrels else None
    if qrels is None and not any(t.answers for t in topics):
        raise UserError(f"{args.topics} has no answers; give --qrels")
    fit(args, topics, qrels, output)


def fit(args: argparse.Namespace, topics, qrels, output: Path) -> None:
    from tqdm import tqdm

    from tour_pyserini.eval import evaluate
    from tour_pyserini.eval.answers import AnswerMatcher, answer_qrels
    from tour_pyserini.search import TourSearcher
    from tour_pyserini.teachers import ScoreRequest, TeacherContext, get_teacher
    from tour_pyserini.teachers.ensemble import write_ensemble
    from tour_pyserini.training.ensemble_fit import fit_weights

    context = TeacherContext(index_dir=args.index)
    teachers = [get_teacher(spec, context) for spec in args.teachers]
    searcher = TourSearcher.from_index(args.index)
    rankings = searcher.batch_search([t.text for t in topics], [t.qid for t in topics], hits=args.depth)
    if qrels is None:
        run = {q: {h.docid: -i for i, h in enumerate(hits)} for q, hits in rankings.items()}
        qrels = answer_qrels(run, topics, AnswerMatcher(searcher.docstore), args.depth)
    qrels = {t.qid: qrels.get(t.qid, {}) for t in topics}  # means over the fit queries only
    features, relevant = [], []
    for t in tqdm(topics, desc="score", unit="q"):
        docids = [h.docid for h in rankings[t.qid]]
        request = ScoreRequest(t.qid, t.text, docids, searcher.docstore.get(docids))
        features.append(np.stack([teacher.score([request])[0] for teacher in teachers], axis=1))
        relevant.append(np.array([qrels.get(t.qid, {}).get(d, 0) > 0 for d in docids]))
    weights = fit_weights(features, relevant, l2=args.l2, init=[1.0] + [0.0] * (len(teachers) - 1))
    metric = "nDCG@10" if args.qrels else "Success@1"

    def quality(w) -> float:
        run = {t.qid: dict(zip((h.docid for h in rankings[t.qid]), f @ w)) for t, f in zip(topics, features)}
        return evaluate(qrels, run, [metric]).means[metric]

    alone = {spec: quality(np.eye(len(teachers))[i]) for i, spec in enumerate(args.teachers)}
    fitted_on = {"topics": args.topics, "queries": len(topics), "depth": args.depth, "l2": args.l2,
                 "metric": metric, "alone": alone, "ensemble": quality(weights)}  # fmt: skip
    parts = [(relative_spec(spec, output.parent), float(w)) for spec, w in zip(args.teachers, weights)]
    write_ensemble(output, parts, fitted_on)
    for spec, value in alone.items():
        print(f"{spec}: {metric} {value:.4f} re-ranking the dense top {args.depth} of the {len(topics)} fit queries")
    print(f"ensemble ({', '.join(f'{s} x {w:.4g}' for s, w in parts)}): {metric} {fitted_on['ensemble']:.4f} "
          f"on the same queries (in-sample); wrote {output} (load it as ensemble:{output})")  # fmt: skip


if __name__ == "__main__":
    run_cli(main)
