"""Where ``python -m tour_pyserini.answer`` starts the ``answer`` command (``tour_pyserini.commands.answer``)."""
