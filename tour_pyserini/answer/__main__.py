"""python -m tour_pyserini.answer: the ``answer`` command (``tour_pyserini.commands.answer``), where users type it."""

from tour_pyserini.commands.answer import main
from tour_pyserini.commands.runner import run_cli

if __name__ == "__main__":
    run_cli(main)
