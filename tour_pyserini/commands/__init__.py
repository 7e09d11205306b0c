"""The command-line programs, one thin module each: parse flags, call the library.

``tour-pyserini <command>`` (the console script) and ``python -m tour_pyserini <command>`` run them;
``python -m tour_pyserini.index|search|eval|answer|ttt`` stay as the entry points Pyserini users type.
"""

from __future__ import annotations

import difflib
import importlib
import sys

from tour_pyserini.commands.runner import run_cli

# name: (module commands.MODULE with main(argv), what it does, an example)
SUBCOMMANDS = {
    "index": (
        "index",
        "build a dense or BM25 index of a JSONL collection",
        "tour-pyserini index --collection scifact --output indexes/scifact.minilm",
    ),
    "search": (
        "search",
        "search an index for every topic and write a TREC run",
        "tour-pyserini search --index indexes/scifact.minilm --topics scifact-test "
        "--output runs/tour.trec --rewriter tour-soft --teacher bm25 --depth 20",
    ),
    "eval": (
        "eval",
        "score TREC runs against qrels or answers",
        "tour-pyserini eval --qrels scifact-test --run runs/tour.trec",
    ),
    "compare": (
        "compare",
        "compare runs with a baseline: deltas, significance tests, win/tie/loss; or --diff",
        "tour-pyserini compare --qrels scifact-test --baseline runs/dense.trec --run runs/tour.trec",
    ),
    "regressions": (
        "regressions",
        "build, search and score the shipped configurations; check each value against regressions/NAME.yaml",
        "tour-pyserini regressions scifact",
    ),
    "experiment": (
        "experiment",
        "run a benchmark declared in experiments/NAME.yaml (resumable) and write its report",
        "tour-pyserini experiment methods --collections cranfield --teachers bm25 --budgets 10",
    ),
    "choose": (
        "choose",
        "which method for my collection: every method on your training queries at one budget, the best named",
        "tour-pyserini choose --index indexes/scifact.minilm --topics scifact-train --qrels scifact-train "
        "--teacher bm25 --budget 10",
    ),
    "train-reranker": (
        "train_reranker",
        "train a cross-encoder teacher on training queries",
        "tour-pyserini train-reranker --index indexes/scifact.minilm "
        "--topics scifact-train --qrels scifact-train "
        "--output models/ce",
    ),
    "fit-ensemble": (
        "fit_ensemble",
        "fit an ensemble teacher's weights on dev training queries",
        "tour-pyserini fit-ensemble --index indexes/scifact.minilm --topics "
        "scifact-train --qrels scifact-train "
        "--dev-of models/scifact-rce --teachers cross-encoder:models/scifact-rce bm25 dense "
        "--output models/scifact-rce/ensemble.json",
    ),
    "train-ict": (
        "train_ict",
        "ORQA's Inverse Cloze Task: pre-train query and document encoders",
        "tour-pyserini train-ict --collection scifact --output models/orqa/scifact-ict",
    ),
    "train-qa": (
        "train_qa",
        "ORQA's early update: fine-tune a question encoder from answer strings",
        "tour-pyserini train-qa --index indexes/nq-oracle.minilm "
        "--topics nq-oracle-train --output models/orqa/nq-oracle-qa",
    ),
    "train-reader": (
        "train_reader",
        "train an extractive reader from answer strings (distant supervision)",
        "tour-pyserini train-reader --run runs/nq-oracle.minilm.train.trec "
        "--topics nq-oracle-train --collection nq-oracle "
        "--output models/nq-oracle-reader",
    ),
    "train-orqa": (
        "train_orqa",
        "ORQA's joint training: question encoder and reader from answer strings",
        "tour-pyserini train-orqa --index indexes/nq-oracle.minilm --topics "
        "nq-oracle-train --reader models/nq-oracle-reader "
        "--output models/orqa/joint",
    ),
    "answer": (
        "answer",
        "read each question's top-k passages of a run with an extractive QA model; write answers",
        "tour-pyserini answer --run runs/nq.trec --topics nq-oracle-test "
        "--collection nq-oracle --reader models/nq-oracle-reader --output runs/nq.answers.jsonl",
    ),
    "ttt": (
        "ttt",
        "TTT-Embed: teacher rewards under a budget, fit reusable query states",
        "tour-pyserini ttt fit --rewards rewards.tsv --scope task --output state.safetensors",
    ),
    "serve": (
        "serve",
        "serve indexes over HTTP (Pyserini's /v1 routes) and MCP, with rewriters and online TTT-Embed",
        "tour-pyserini serve --index indexes/scifact.minilm --teacher bm25 --port 8000",
    ),
    "run-pyserini": (
        "run_pyserini",
        "run one of Pyserini's own command-line tools with this project's Java",
        "tour-pyserini run-pyserini pyserini.search.faiss --index ... --topics ...",
    ),
}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help"):
        close = difflib.get_close_matches(argv[0], SUBCOMMANDS, n=1)
        print(
            f"error: unknown command {argv[0]!r}{f' (did you mean {close[0]}?)' if close else ''}; "
            "tour-pyserini --help lists the commands",
            file=sys.stderr,
        )
        sys.exit(2)
    if not argv or argv[0] not in SUBCOMMANDS:
        usage = "\n".join(
            f"  {name:15s} {text}\n  {'':15s} e.g. {example}" for name, (_, text, example) in SUBCOMMANDS.items()
        )
        print(
            f"usage: tour-pyserini <command> [options]   (tour-pyserini <command> --help for its options)\n\n"
            f"commands:\n{usage}",
            file=sys.stderr,
        )
        sys.exit(0 if argv and argv[0] in ("-h", "--help") else 2)
    module = importlib.import_module(f"tour_pyserini.commands.{SUBCOMMANDS[argv[0]][0]}")
    run_cli(module.main, argv[1:])
