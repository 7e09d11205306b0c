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
import tempfile
from contextlib import ExitStack, closing
from dataclasses import asdict
from pathlib import Path

from tour_pyserini.commands.flags import ArgumentParser, add_config_flags
from tour_pyserini.commands.outputs import check_output
from tour_pyserini.devices import PRECISIONS, check_device, resolve_precision
from tour_pyserini.errors import UserError
from tour_pyserini.numbers import non_negative_float, positive_int
from tour_pyserini.reader import RULES, ReaderOptions

NUMBERS = {"k": positive_int, "max_length": positive_int, "stride": positive_int, "max_answer_length": positive_int,
           "batch_size": positive_int, "retrieval_weight": non_negative_float}  # fmt: skip
HELPS = {
    "k": "passages read per question: the run's first k",
    "max_length": "tokens per window (question and special tokens included)",
    "stride": "tokens shared by consecutive windows of a long passage",
    "max_answer_length": "longest answer span, in tokens",
    "batch_size": "windows per forward pass",
    "retrieval_weight": "w in S = w * retrieval score + span score (--rule orqa)",
}


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="python -m tour_pyserini.answer", description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--run", required=True, help="TREC run of the questions over --collection")
    ap.add_argument("--topics", required=True, help="the questions (any topics file; answers are not needed)")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--collection", help="collection directory (corpus.jsonl) holding the run's passages")
    where.add_argument("--index", help="index directory whose document store holds the run's passages")
    ap.add_argument("--reader", required=True, help="extractive QA model: directory or Hugging Face id")
    ap.add_argument("--output", required=True, help="predictions file to write (JSON lines)")
    ap.add_argument("--rule", choices=RULES, default=ReaderOptions.rule,
                    help="answer selection: orqa = best retrieval + span score over all passages (default; any QA "
                    "model); dpr = passage by selection logit, then its best span")  # fmt: skip
    ap.add_argument("--precision", choices=PRECISIONS, default="fp32", help="bf16: bfloat16 autocast")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--questions-per-batch", type=positive_int, default=16,
                    help="questions read, and written, together (the unit an interrupted run resumes at)")  # fmt: skip
    ap.add_argument("--no-resume", action="store_true", help="start over even if a partial output exists")
    add_config_flags(ap, ReaderOptions(), NUMBERS, HELPS, skip=("rule", "precision", "device"))
    return ap


def open_passages(args: argparse.Namespace, stack: ExitStack):
    from tour_pyserini.index.build import corpus_file
    from tour_pyserini.index.docstore import DocStore, read_jsonl_corpus
    from tour_pyserini.index.layout import DOCSTORE_FILE

    if args.index:
        return stack.enter_context(closing(DocStore(Path(args.index) / DOCSTORE_FILE)))
    tmp = Path(stack.enter_context(tempfile.TemporaryDirectory())) / DOCSTORE_FILE
    DocStore.build(tmp, read_jsonl_corpus(corpus_file(args.collection)))
    return stack.enter_context(closing(DocStore(tmp)))


def questions_to_read(run: dict, topics: list, docstore, k: int, run_path: str, where: str) -> list:
    """The topics the run holds, each with its first k passages; a run whose passages are not in the
    collection is refused before any model loads."""
    from tour_pyserini.reader import Passage, Question

    common = [t for t in topics if run.get(t.qid)]
    if not common:
        raise UserError(f"{run_path} and the topics have no question in common")
    heads = {t.qid: list(run[t.qid].items())[:k] for t in common}  # read_run gives rank order
    docids = sorted({d for head in heads.values() for d, _ in head})
    missing = [d for d in docids if d not in docstore]
    if missing:
        raise UserError(f"{run_path}: {len(missing)} of its {len(docids)} passages are not in {where} "
                        f"(a run over another collection?), e.g. {missing[:3]}")  # fmt: skip
    docs = {doc.docid: doc for doc in docstore.get(docids)}
    return [Question(t.qid, t.text, tuple(Passage(d, docs[d].contents, s) for d, s in heads[t.qid])) for t in common]


def main(argv: list[str] | None = None) -> None:
    from tqdm import tqdm

    from tour_pyserini.data.predictions import PredictionWriter
    from tour_pyserini.data.runs import read_run
    from tour_pyserini.data.topics import read_topics
    from tour_pyserini.reader import Reader, check_reader

    args = parser().parse_args(argv)
    device = check_device(args.device)
    flags = {k: getattr(args, k) for k in asdict(ReaderOptions()) if k not in ("precision", "device")}
    options = ReaderOptions(**flags, precision=resolve_precision(args.precision, device, "--precision"), device=device)
    options.check()
    output = check_output(args.output)
    signature = {"run": str(Path(args.run).resolve()), "topics": str(Path(args.topics).resolve()),
                 "reader": args.reader, "options": asdict(options),
                 "questions_per_batch": args.questions_per_batch}  # fmt: skip
    # the output is locked (or refused, if another command writes it) before any input is read or model loads
    writer = PredictionWriter(output, signature, resume=not args.no_resume)
    try:
        with writer, ExitStack() as stack:
            topics = read_topics(args.topics)
            run = read_run(args.run)
            docstore = open_passages(args, stack)
            questions = questions_to_read(run, topics, docstore, options.k, args.run, args.index or args.collection)
            check_reader(args.reader, max_length=options.max_length, stride=options.stride)
            todo = [q for q in questions if q.qid not in writer.done]
            if writer.done:
                print(f"resuming {output}: {len(writer.done)} of {len(questions)} questions already answered",
                      file=sys.stderr)  # fmt: skip
            reader = Reader(args.reader, options)
            step = args.questions_per_batch
            with tqdm(total=len(todo), unit="q", desc="answer") as bar:
                for i in range(0, len(todo), step):
                    writer.write_batch(reader.read(todo[i : i + step]))
                    bar.update(len(todo[i : i + step]))
    except KeyboardInterrupt:
        if not writer.done:
            raise KeyboardInterrupt("answer stopped before any question finished; nothing was written") from None
        raise KeyboardInterrupt(f"answer stopped: {writer.partial} keeps {len(writer.done)} answered questions; "
                                "run the same command again to resume") from None  # fmt: skip
    print(f"wrote {output}: {len(questions)} answers ({options.rule} rule, k {options.k})")
