"""python -m tour_pyserini.answer: read each question's top-k passages of a run and write one answer per question.

Any Hugging Face extractive QA model is a ``--reader`` (a local directory, a hub id in the cache, or one
``train-reader`` made). Output: JSON lines ``{"qid", "answer", "docid", "score"}``, scored by
``eval --predictions FILE --answers TOPICS``. Written as runs are: locked while it runs, resumed after
an interrupt (Ctrl-C keeps the finished questions), renamed into place only when complete.

    python -m tour_pyserini.answer --run runs/nq-oracle.minilm.trec --topics collections/nq-oracle/topics.test.jsonl \\
        --collection collections/nq-oracle --reader models/nq-oracle-reader --k 10 --output runs/nq.answers.jsonl
"""

from __future__ import annotations

import argparse
import sys
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path

from tour_pyserini.answer import ReaderOptions, resolve_reader_precision
from tour_pyserini.commands.flags import ArgumentParser, CollectionName, add_param_flags, config_from_flags
from tour_pyserini.commands.outputs import check_output
from tour_pyserini.devices import check_device
from tour_pyserini.numbers import positive_int
from tour_pyserini.runtime import AUTO, RUNTIME_CHOICES, RUNTIME_PRECISIONS, resolve_runtime


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(
        prog="python -m tour_pyserini.answer", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--run", required=True, help="TREC run of the questions over --collection")
    ap.add_argument("--topics", required=True, help="the questions (any topics file; answers are not needed)")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--collection", action=CollectionName, help="the collection holding the run's passages: its name or directory"
    )
    where.add_argument("--index", help="index directory whose document store holds the run's passages")
    ap.add_argument("--reader", required=True, help="extractive QA model: directory or Hugging Face id")
    ap.add_argument("--output", required=True, help="predictions file to write (JSON lines)")
    ap.add_argument(
        "--precision",
        choices=RUNTIME_PRECISIONS,
        default="auto",
        help="the reader's arithmetic: auto (default: the fastest within the reader's bounds, bf16 where "
        "native through torch or OpenVINO, fp32 through ONNX Runtime), fp32, bf16 (torch's autocast, "
        "OpenVINO's hint) where the CPU multiplies in bfloat16, int8 (--runtime onnx)",
    )
    ap.add_argument(
        "--runtime",
        choices=RUNTIME_CHOICES,
        default=AUTO,
        help="what runs the reader: auto (default: openvino where it can, else torch), torch, or (the "
        "runtime extra; a local model directory) onnx or openvino, exported once and cached beside its "
        "weights",
    )
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument(
        "--questions-per-batch",
        type=positive_int,
        default=16,
        help="questions read, and written, together (the unit an interrupted run resumes at)",
    )
    ap.add_argument("--no-resume", action="store_true", help="start over even if a partial output exists")
    add_param_flags(ap, ReaderOptions)
    return ap


def main(argv: list[str] | None = None) -> None:
    from tqdm import tqdm

    from tour_pyserini.answer import Reader, check_reader, questions_to_read
    from tour_pyserini.files.predictions import PredictionWriter
    from tour_pyserini.files.runs import read_run
    from tour_pyserini.files.topics import read_topics
    from tour_pyserini.index.docstore import open_passages

    args = parser().parse_args(argv)
    device = check_device(args.device)
    runtime = resolve_runtime(args.runtime, device, args.reader, "--runtime", f"the reader {args.reader}")
    precision = resolve_reader_precision(args.precision, runtime, device)
    options = config_from_flags(ReaderOptions, args, precision=precision, runtime=runtime, device=device)
    output = check_output(args.output)
    signature = {
        "run": str(Path(args.run).resolve()),
        "topics": str(Path(args.topics).resolve()),
        "reader": args.reader,
        "options": asdict(options),
        "questions_per_batch": args.questions_per_batch,
    }
    # the output is locked (or refused, if another command writes it) before any input is read or model loads
    writer = PredictionWriter(output, signature, resume=not args.no_resume)
    try:
        with writer, ExitStack() as stack:
            topics = read_topics(args.topics)
            run = read_run(args.run)
            docstore = open_passages(stack, index=args.index, collection=args.collection)
            questions = questions_to_read(run, topics, docstore, options.k, args.run, args.index or args.collection)
            check_reader(args.reader, max_length=options.max_length, stride=options.stride, runtime=options.runtime)
            todo = [q for q in questions if q.qid not in writer.done]
            if writer.done:
                print(
                    f"resuming {output}: {len(writer.done)} of {len(questions)} questions already answered",
                    file=sys.stderr,
                )
            reader = Reader(args.reader, options)
            step = args.questions_per_batch
            with tqdm(total=len(todo), unit="q", desc="answer") as bar:
                for i in range(0, len(todo), step):
                    writer.write_batch(reader.read(todo[i : i + step]))
                    bar.update(len(todo[i : i + step]))
    except KeyboardInterrupt:
        if not writer.done:
            raise KeyboardInterrupt("answer stopped before any question finished; nothing was written") from None
        raise KeyboardInterrupt(
            f"answer stopped: {writer.partial} keeps {len(writer.done)} answered questions; "
            "run the same command again to resume"
        ) from None
    print(f"wrote {output}: {len(questions)} answers ({options.rule} rule, k {options.k})")
