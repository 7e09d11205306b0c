"""python -m tour_pyserini.eval: the ``eval`` command (``tour_pyserini.commands.eval``), where users type it."""

from tour_pyserini.commands.eval import main
from tour_pyserini.commands.runner import run_cli

if __name__ == "__main__":
    run_cli(main)
