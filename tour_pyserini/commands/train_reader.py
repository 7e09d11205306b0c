"""python -m tour_pyserini train-reader: an extractive reader trained from answer strings (distant supervision).

The method and its options: ``tour_pyserini.training.reader`` (whose docstring is ``--help``).
"""

from __future__ import annotations

import argparse
from contextlib import ExitStack

from tour_pyserini.answer import questions_to_read
from tour_pyserini.commands.answer_training import add_answer_training_flags, answered_questions
from tour_pyserini.commands.flags import (
    ArgumentParser,
    CollectionName,
    add_trainer_flags,
    trainer_config,
)
from tour_pyserini.index.docstore import open_passages
from tour_pyserini.training import reader as reader_training
from tour_pyserini.training.reader import ReaderTrainConfig, train


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(
        prog="python -m tour_pyserini train-reader",
        description=reader_training.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ap.add_argument("--run", required=True, help="a retriever's TREC run of the training questions")
    ap.add_argument("--topics", required=True, help="training questions with answers (any DPR-style topics file)")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--collection", action=CollectionName, help="the collection holding the run's passages: its name or directory"
    )
    where.add_argument("--index", help="index directory whose document store holds the run's passages")
    ap.add_argument("--output", required=True, help="reader directory to write")
    ap.add_argument("--init", help="encoder to start from (default: the bundled MiniLM; any BERT-like directory)")
    add_answer_training_flags(ap)
    add_trainer_flags(ap, ReaderTrainConfig)
    return ap


def main(argv: list[str] | None = None) -> None:
    from tour_pyserini.encoders import bundled_model_dir
    from tour_pyserini.encoders.spec import check_model
    from tour_pyserini.eval.answers import AnswerMatcher
    from tour_pyserini.files.runs import read_run
    from tour_pyserini.files.staging import locked_output_directory

    ap = parser()
    args, config = trainer_config(ap, argv, ReaderTrainConfig)  # refused before any model loads
    with ExitStack() as stack:
        output = stack.enter_context(locked_output_directory(args.output, args.overwrite))
        topics = answered_questions(args, "distant supervision needs them")
        init = args.init or str(bundled_model_dir())
        check_model("encoder", init)
        run = read_run(args.run)
        docstore = open_passages(stack, index=args.index, collection=args.collection)
        questions = questions_to_read(run, topics, docstore, config.k, args.run, args.index or args.collection)
        report = train(questions, topics, AnswerMatcher(docstore), output, init, config)
    print(
        f"best dev EM {report['best_dev_em']:.4f} at step {report['best_step']} ({report['seconds']:.0f} s); "
        f"reader in {output} (answer --reader {output})"
    )
