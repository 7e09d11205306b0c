"""python -m tour_pyserini train-orqa: ORQA's joint training of the question encoder and the reader.

The method and its options: ``tour_pyserini.training.orqa_joint`` (whose docstring is ``--help``).
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
from tour_pyserini.training import orqa_joint
from tour_pyserini.training.orqa_joint import OrqaConfig, train


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(
        prog="python -m tour_pyserini train-orqa",
        description=orqa_joint.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--index", required=True, help="dense index: the frozen block vectors and their texts")
    ap.add_argument("--topics", required=True, help="training questions with answers")
    ap.add_argument("--reader", required=True, help="extractive QA model to start the reader from (train-reader's)")
    ap.add_argument("--output", required=True, help="directory to write: OUTPUT/query and OUTPUT/reader")
    ap.add_argument(
        "--init",
        help="question encoder to start from (default: the encoder that built the index; after ICT, its OUTPUT/query)",
    )
    add_answer_training_flags(ap)
    add_trainer_flags(ap, OrqaConfig)
    return ap


def main(argv: list[str] | None = None) -> None:
    from tour_pyserini.answer import check_reader
    from tour_pyserini.encoders import EncoderSpec
    from tour_pyserini.files.staging import locked_output_directory

    ap = parser()
    args, config = trainer_config(ap, argv, OrqaConfig)  # refused before any model loads
    index_dir, meta = dense_index_with_encoder(args.index, "joint training retrieves from a dense one")
    topics = answered_questions(args, "joint training needs them")
    with locked_output_directory(args.output, args.overwrite) as output:
        init = args.init or meta.encoder["name"]
        EncoderSpec.resolve(init)
        check_reader(args.reader, max_length=config.max_length, stride=config.stride)
        report = train(index_dir, topics, output, init, args.reader, config)
    print(
        f"best dev EM {report['best_dev_em']:.4f} at step {report['best_step']} ({report['seconds']:.0f} s); "
        f"search --encoder {output}/query, then answer --reader {output}/reader "
        f"--retrieval-weight {report['retrieval_weight']:g}"
    )
