"""Evaluation of runs: a :class:`Judge` built once from qrels (ir-measures) or answer strings (DPR accuracy).

``python -m tour_pyserini.eval --qrels Q --run R [R ...] --metrics nDCG@10 R@100`` prints a table.
"""

from tour_pyserini.eval.judge import DEFAULT_METRICS, Evaluation, Judge, QrelsJudge, evaluate

__all__ = ["DEFAULT_METRICS", "Evaluation", "Judge", "QrelsJudge", "evaluate"]
