"""python -m tour_pyserini <command> [options]: every command-line program (``--help`` lists them)."""

from tour_pyserini.commands import main

main()
