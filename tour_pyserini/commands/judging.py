"""The judgement flags ``eval`` and ``compare`` share: qrels or answers, and what each of them needs."""

from __future__ import annotations

import argparse

from tour_pyserini.commands.flags import CollectionName
from tour_pyserini.eval.judge import DEFAULT_METRICS
from tour_pyserini.eval.scoring import Judgements
from tour_pyserini.numbers import positive_int


def add_judgement_arguments(ap: argparse.ArgumentParser, required: bool = True) -> None:
    mode = ap.add_mutually_exclusive_group(required=required)
    mode.add_argument("--qrels", help="TREC qrels file")
    mode.add_argument("--answers", metavar="TOPICS", help="topics with answers (e.g. JSON lines with 'answers')")
    ap.add_argument("--metrics", nargs="+", default=list(DEFAULT_METRICS), help="ir-measures names (--qrels)")
    ap.add_argument("--collection", action=CollectionName, help="the collection: its name or directory (--answers)")
    ap.add_argument("--index", help="index directory whose document store holds the passages (--answers)")
    ap.add_argument("--topk", type=positive_int, nargs="+", default=[1, 5, 20, 100], help="k of Acc@k (--answers)")
    ap.add_argument("--regex", action="store_true", help="answers are regular expressions (CuratedTrec)")


def judgements(args: argparse.Namespace) -> Judgements:
    return Judgements(
        qrels=args.qrels,
        answers=args.answers,
        metrics=tuple(args.metrics),
        collection=args.collection,
        index=args.index,
        topk=tuple(args.topk),
        regex=args.regex,
    )
