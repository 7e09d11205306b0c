"""Evaluation of runs: qrels metrics through ir-measures.

``python -m tour_pyserini.eval --qrels Q --run R [R ...] --metrics nDCG@10 R@100`` prints a table.
"""

from tour_pyserini.eval.measures import DEFAULT_METRICS, Evaluation, evaluate

__all__ = ["DEFAULT_METRICS", "Evaluation", "evaluate"]
