"""python -m tour_pyserini train-qa: ORQA's early update, a question encoder fine-tuned from answer strings.

The method and its options: ``tour_pyserini.training.early_update`` (whose docstring is ``--help``).
"""

from __future__ import annotations

import argparse

from tour_pyserini.commands.answer_training import (
    add_answer_training_flags,
    answered_questions,
    dense_index_with_encoder,
)
from tour_pyserini.commands.flags import (
    ArgumentParser,
    add_trainer_flags,
    trainer_config,
)
from tour_pyserini.training import early_update
from tour_pyserini.training.early_update import QaConfig, train


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(
        prog="python -m tour_pyserini train-qa",
        description=early_update.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--index", required=True, help="dense index: the frozen block vectors and their texts")
    ap.add_argument("--topics", required=True, help="training questions with answers (any DPR-style topics file)")
    ap.add_argument("--output", required=True, help="question-encoder directory to write")
    ap.add_argument(
        "--init",
        help="question encoder to start from (default: the encoder that built the index; after ICT, its OUTPUT/query)",
    )
    add_answer_training_flags(ap)
    add_trainer_flags(ap, QaConfig)
    return ap


def main(argv: list[str] | None = None) -> None:
    from tour_pyserini.encoders import EncoderSpec
    from tour_pyserini.files.staging import locked_output_directory

    ap = parser()
    args, config = trainer_config(ap, argv, QaConfig)  # refused before any model loads
    index_dir, meta = dense_index_with_encoder(args.index, "the early update needs a dense one")
    topics = answered_questions(args, "the early update needs answer strings")
    with locked_output_directory(args.output, args.overwrite) as output:
        init = args.init or meta.encoder["name"]
        EncoderSpec.resolve(init)  # an unknown encoder directory fails before any model loads
        report = train(index_dir, topics, output, init, config)
    print(
        f"best dev Acc@1 {report['best_dev_acc@1']:.4f} at step {report['best_step']} ({report['seconds']:.0f} s); "
        f"question encoder in {output} (search --index {index_dir} --encoder {output})"
    )
