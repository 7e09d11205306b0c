"""python -m tour_pyserini run-pyserini MODULE [ARGS...]: run one of Pyserini's own command-line tools
with this project's Java bootstrap, e.g.::

    python -m tour_pyserini run-pyserini pyserini.search.faiss --index indexes/scifact.minilm ...

Pyserini's CLIs cannot start on a machine whose default Java is older than 21, without an OpenAI key
(Pyserini 1.6.0) or without a network (Pyserini 2.x fetches its catalogue at import); this runs them
unchanged, which is how our results are checked against Pyserini's.
"""

from __future__ import annotations

import runpy
import sys

from tour_pyserini._java import import_catalogue, openai_placeholder, start_jvm
from tour_pyserini.errors import UserError


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__)
        return
    if not argv or not argv[0].startswith("pyserini"):
        raise UserError("run-pyserini needs one of Pyserini's modules first: run-pyserini pyserini.MODULE [ARGS...]")
    module, args = argv[0], argv[1:]
    start_jvm()
    sys.argv = [module, *args]
    with openai_placeholder():
        import_catalogue()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
