"""The ``tour-pyserini`` console script: ``tour-pyserini {index,search,eval,compare,train-reranker,...} ...``.

Each subcommand is the same program as ``python -m tour_pyserini.<subcommand>`` (``train_reranker``
for ``train-reranker``, ``fit_ensemble`` for ``fit-ensemble``).
"""

from __future__ import annotations

import importlib
import sys

from tour_pyserini.cli_util import run_cli

SUBCOMMANDS = {  # name: (module with main(), what it does, an example)
    "index": ("tour_pyserini.index.__main__", "build a dense or BM25 index of a JSONL collection",
              "tour-pyserini index --collection collections/scifact --output indexes/scifact.minilm"),
    "search": ("tour_pyserini.search.__main__", "search an index for every topic and write a TREC run",
               "tour-pyserini search --index indexes/scifact.minilm --topics collections/scifact/topics.test.tsv "
               "--output runs/tour.trec --rewriter tour-soft --reranker bm25 --k 20"),
    "eval": ("tour_pyserini.eval.__main__", "score TREC runs against qrels or answers",
             "tour-pyserini eval --qrels qrels/scifact.test.txt --run runs/tour.trec"),
    "compare": ("tour_pyserini.compare", "compare runs with a baseline: deltas, significance tests, win/tie/loss",
                "tour-pyserini compare --qrels qrels/scifact.test.txt --baseline runs/dense.trec --run runs/tour.trec"),
    "train-reranker": ("tour_pyserini.train_reranker", "train a cross-encoder teacher on training queries",
                       "tour-pyserini train-reranker --index indexes/scifact.minilm "
                       "--topics collections/scifact/topics.train.tsv --qrels qrels/scifact.train.txt "
                       "--output models/ce"),
    "fit-ensemble": ("tour_pyserini.fit_ensemble", "fit an ensemble teacher's weights on dev training queries",
                     "tour-pyserini fit-ensemble --index indexes/scifact.minilm --topics "
                     "collections/scifact/topics.train.tsv --qrels qrels/scifact.train.txt "
                     "--dev-of models/scifact-rce --teachers cross-encoder:models/scifact-rce bm25 dense "
                     "--output models/scifact-rce/ensemble.json"),
    "train-ict": ("tour_pyserini.train_ict", "ORQA's Inverse Cloze Task: pre-train query and document encoders",
                  "tour-pyserini train-ict --collection collections/scifact --output models/orqa/scifact-ict"),
    "train-qa": ("tour_pyserini.train_qa", "ORQA's early update: fine-tune a question encoder from answer strings",
                 "tour-pyserini train-qa --index indexes/nq-oracle.minilm "
                 "--topics collections/nq-oracle/topics.train.jsonl --output models/orqa/nq-oracle-qa"),
    "ttt": ("tour_pyserini.ttt.__main__", "TTT-Embed: teacher rewards under a budget, fit reusable query states",
            "tour-pyserini ttt fit --rewards rewards.tsv --scope task --output state.safetensors"),
}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in SUBCOMMANDS:
        usage = "\n".join(f"  {name:15s} {text}\n  {'':15s} e.g. {example}" for name, (_, text, example)
                          in SUBCOMMANDS.items())  # fmt: skip
        print(f"usage: tour-pyserini <command> [options]   (tour-pyserini <command> --help for its options)\n\n"
              f"commands:\n{usage}", file=sys.stderr)  # fmt: skip
        sys.exit(0 if argv and argv[0] in ("-h", "--help") else 2)
    module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
    run_cli(module.main, argv[1:])


if __name__ == "__main__":
    main()
