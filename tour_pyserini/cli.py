"""The ``tour-pyserini`` console script: ``tour-pyserini {index,search,eval,compare,train-reranker} ...``.

Each subcommand is the same program as ``python -m tour_pyserini.<subcommand>`` (``train_reranker``
for ``train-reranker``).
"""

from __future__ import annotations

import importlib
import sys

from tour_pyserini.cli_util import run_cli

SUBCOMMANDS = {  # name: (module with main(), help)
    "index": ("tour_pyserini.index.__main__", "build a dense or BM25 index of a JSONL collection"),
    "search": ("tour_pyserini.search.__main__", "search an index for every topic and write a TREC run"),
    "eval": ("tour_pyserini.eval.__main__", "score TREC runs against qrels or answers"),
    "compare": ("tour_pyserini.compare", "compare runs with a baseline: deltas, significance tests, win/tie/loss"),
    "train-reranker": ("tour_pyserini.train_reranker", "train a cross-encoder teacher on training queries"),
    "ttt": ("tour_pyserini.ttt.__main__", "TTT-Embed: teacher rewards under a budget, fit reusable query states"),
}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in SUBCOMMANDS:
        usage = "\n".join(f"  {name:15s} {text}" for name, (_, text) in SUBCOMMANDS.items())
        print(f"usage: tour-pyserini <command> [options]\n\ncommands:\n{usage}", file=sys.stderr)
        sys.exit(0 if argv and argv[0] in ("-h", "--help") else 2)
    module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
    run_cli(module.main, argv[1:])


if __name__ == "__main__":
    main()
