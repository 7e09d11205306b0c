"""python -m tour_pyserini train-ict: Inverse Cloze Task pre-training of a dense retriever on any corpus.

The method and its options: ``tour_pyserini.training.ict_training`` (whose docstring is ``--help``).
"""

from __future__ import annotations

import argparse

from tour_pyserini.commands.flags import (
    ArgumentParser,
    CollectionName,
    add_trainer_flags,
    trainer_config,
)
from tour_pyserini.encoders import DEFAULT_ENCODER, EncoderSpec
from tour_pyserini.training import ict_training
from tour_pyserini.training.ict_training import IctConfig, train


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(
        prog="python -m tour_pyserini train-ict",
        description=ict_training.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument(
        "--collection", action=CollectionName, required=True, help="a collection: its name, directory or .jsonl file"
    )
    ap.add_argument("--output", required=True, help="directory to write (OUTPUT/query and OUTPUT/document)")
    ap.add_argument(
        "--init",
        default=DEFAULT_ENCODER,
        help="encoder to start from: the bundled MiniLM or a local HuggingFace directory",
    )
    ap.add_argument("--tied", action="store_true", help="one encoder for queries and blocks")
    ap.add_argument("--overwrite", action="store_true", help="replace --output if it exists")
    add_trainer_flags(ap, IctConfig)
    return ap


def main(argv: list[str] | None = None) -> None:
    from tour_pyserini.files.staging import locked_output_directory
    from tour_pyserini.index.corpus import check_corpus, corpus_file

    ap = parser()
    args, config = trainer_config(ap, argv, IctConfig)  # refused before any model loads
    check_corpus(corpus_file(args.collection))  # a missing or malformed corpus fails before any model loads
    with locked_output_directory(args.output, args.overwrite) as output:
        EncoderSpec.resolve(args.init)  # an unknown encoder directory, likewise
        report = train(args.collection, output, args.init, config, tied=args.tied)
    where = output if args.tied else f"{output}/query and {output}/document"
    print(
        f"best held-out accuracy {report['best_held_out_accuracy']:.4f} at step {report['best_step']} "
        f"({report['seconds']:.0f} s); encoders in {where}"
    )
