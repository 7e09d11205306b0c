"""python -m tour_pyserini fit-ensemble: fit an ensemble teacher's weights on dev (training) queries.

Each teacher scores the dense top ``--depth`` candidates of every topic; the weights maximise the
listwise likelihood of the relevant candidates (qrels, or without ``--qrels`` the candidates containing
an answer string); equations in docs/algorithms.md. The file written is what ``ensemble:FILE`` loads.
Fit on queries nothing else was selected on where possible; ``--dev-of MODEL`` takes the dev queries a
``train_reranker`` model recorded (never trained on).

    python -m tour_pyserini fit-ensemble --index indexes/scifact.minilm \\
        --topics collections/scifact/topics.train.tsv --qrels qrels/scifact.train.txt \\
        --dev-of models/scifact-rce --teachers cross-encoder:models/scifact-rce bm25 dense \\
        --output models/scifact-rce/ensemble.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tour_pyserini.commands.flags import ArgumentParser, add_teacher_flags, teacher_flags
from tour_pyserini.commands.outputs import check_output, staged_output
from tour_pyserini.errors import UserError
from tour_pyserini.numbers import at_least, non_negative_float
from tour_pyserini.pipeline import SearchSpec
from tour_pyserini.training.ensemble_fit import fit_ensemble


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(
        prog="python -m tour_pyserini fit-ensemble",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--index", required=True, help="dense index: candidates, texts, and the teachers' index")
    ap.add_argument("--topics", required=True, help="topics to fit on (training topics)")
    ap.add_argument("--qrels", help="their qrels (default: candidates containing an answer string are relevant)")
    ap.add_argument("--dev-of", metavar="MODEL", help="fit only on the dev queries MODEL/training.json lists")
    ap.add_argument("--teachers", nargs="+", required=True, help="teacher specs, the first one starts at weight 1")
    ap.add_argument("--depth", type=at_least(2), default=30, help="candidates per query (dense top DEPTH)")
    ap.add_argument("--l2", type=non_negative_float, default=1e-4, help="L2 penalty on the weights")
    ap.add_argument("--output", required=True, help="ensemble file to write (JSON)")
    ap.add_argument("--device", default="cpu", help="where the query encoder and model-based teachers run")
    add_teacher_flags(ap.add_argument_group("teachers (each reads the flags it declares)"))
    return ap


def main(argv: list[str] | None = None) -> None:
    from tour_pyserini.files import read_qrels, read_topics

    args = parser().parse_args(argv)
    if len(args.teachers) < 2:
        raise UserError("--teachers needs at least two teacher specs")
    output = check_output(args.output)
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
    if qrels is not None and not any(grade > 0 for t in topics for grade in qrels.get(t.qid, {}).values()):
        raise UserError(
            f"no query of {args.topics}{' (its --dev-of queries)' if args.dev_of else ''} has a relevant "
            f"document in {args.qrels}: nothing to fit on"
        )
    # the candidates through torch, as the dense member encodes them (one encoding serves both)
    search = SearchSpec(
        index=args.index,
        device=args.device,
        teacher_max_length=args.teacher_max_length,
        teacher_precision=args.teacher_precision,
        teacher_options=teacher_flags(args),
        encoder_runtime="torch",
    )
    with staged_output(output) as staged:  # beside the output: the specs are written relative to its directory
        fitted = fit_ensemble(
            search, topics, qrels, args.teachers, staged, depth=args.depth, l2=args.l2, topics_name=args.topics
        )
    for spec, value in fitted["alone"].items():
        print(
            f"{spec}: {fitted['metric']} {value:.4f} re-ranking the dense top {args.depth} of the {len(topics)} "
            "fit queries"
        )
    parts = ", ".join(f"{s} x {w:.4g}" for s, w in fitted["parts"])
    print(
        f"ensemble ({parts}): {fitted['metric']} {fitted['ensemble']:.4f} on the same queries (in-sample); "
        f"wrote {output} (load it as ensemble:{output})"
    )
