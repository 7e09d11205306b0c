"""python -m tour_pyserini.index: the ``index`` command (``tour_pyserini.commands.index``), where users type it."""

from tour_pyserini.commands.index import main
from tour_pyserini.commands.runner import run_cli

if __name__ == "__main__":
    run_cli(main)
