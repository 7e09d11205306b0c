"""python -m tour_pyserini.search: the ``search`` command (``tour_pyserini.commands.search``), where users type it."""

from tour_pyserini.commands.runner import run_cli
from tour_pyserini.commands.search import main

if __name__ == "__main__":
    run_cli(main)
