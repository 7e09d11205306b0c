"""python -m tour_pyserini.ttt: the ``ttt`` command (``tour_pyserini.commands.ttt``), where users type it."""

from tour_pyserini.commands.runner import run_cli
from tour_pyserini.commands.ttt import main

if __name__ == "__main__":
    run_cli(main)
