"""python -m tour_pyserini train-reranker: train a cross-encoder teacher on training queries.

The method and its options: ``tour_pyserini.training.reranker`` (whose docstring is ``--help``).
"""

from __future__ import annotations

import argparse

from tour_pyserini.commands.flags import (
    ArgumentParser,
    add_trainer_flags,
    trainer_config,
)
from tour_pyserini.errors import UserError
from tour_pyserini.training import reranker
from tour_pyserini.training.reranker import TrainConfig, train


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(
        prog="python -m tour_pyserini train-reranker",
        description=reranker.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--index", required=True, help="dense index: candidates and document texts")
    ap.add_argument("--topics", required=True, help="training topics")
    ap.add_argument(
        "--qrels",
        help="qrels of the training topics (default: positives are the candidates "
        "containing one of the topic's answers)",
    )
    ap.add_argument("--exclude-texts-from", metavar="TOPICS", help="drop training topics whose text is in these")
    ap.add_argument("--output", required=True, help="model directory to write")
    ap.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    ap.add_argument("--base-model", help="local HuggingFace encoder directory (default: the bundled MiniLM)")
    ap.add_argument(
        "--extra-topics",
        metavar="TOPICS",
        help="another collection's training questions, mixed into "
        "every step (--extra-per-step at a time); never in the dev split",
    )
    ap.add_argument("--extra-index", metavar="DIR", help="the dense index of --extra-topics' collection")
    ap.add_argument("--extra-qrels", metavar="QRELS", help="qrels of --extra-topics (default: their answer strings)")
    add_trainer_flags(ap, TrainConfig)
    return ap


def main(argv: list[str] | None = None) -> None:
    from tour_pyserini.encoders import bundled_model_dir
    from tour_pyserini.files import read_qrels, read_topics
    from tour_pyserini.files.staging import locked_output_directory

    ap = parser()
    args, config = trainer_config(ap, argv, TrainConfig)  # refused before any model loads
    if bool(args.extra_topics) != bool(args.extra_index):
        raise UserError("--extra-topics and --extra-index go together")
    if args.extra_topics and config.pseudo != "none":
        raise UserError("--pseudo and --extra-topics are measured one at a time: give one of them")
    with locked_output_directory(args.output, args.overwrite):
        topics = read_topics(args.topics)
        if args.exclude_texts_from:
            held_out = {t.text for t in read_topics(args.exclude_texts_from)}
            topics = [t for t in topics if t.text not in held_out]
        if args.qrels is None and not any(t.answers for t in topics):
            raise UserError(f"{args.topics} has no answers; give --qrels")
        questions = None
        if args.extra_topics:
            extra_qrels = read_qrels(args.extra_qrels) if args.extra_qrels else None
            extra_topics = read_topics(args.extra_topics)
            if extra_qrels is None and not any(t.answers for t in extra_topics):
                raise UserError(f"{args.extra_topics} has no answers; give --extra-qrels")
            questions = (args.extra_index, extra_topics, extra_qrels)
        report = train(
            args.index,
            topics,
            read_qrels(args.qrels) if args.qrels else None,
            args.output,
            args.base_model or str(bundled_model_dir()),
            config,
            questions=questions,
        )
    metric = report["dev_metric"]
    first = report["history"][0][f"dev_{metric}"]
    print(
        f"best dev {metric} {report[f'best_dev_{metric}']:.4f} (step 0: {first:.4f}); "
        f"model in {args.output} (load it as cross-encoder:{args.output})"
    )
