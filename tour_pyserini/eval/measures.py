"""Qrels-based evaluation through ir-measures, with ``trec_eval -c`` semantics."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_METRICS = ("nDCG@10", "R@100", "RR@10")


@dataclass
class Evaluation:
    """Per-query values and means of some metrics for one run."""

    per_query: dict[str, dict[str, float]]  # metric -> qid -> value
    means: dict[str, float]
    num_queries: int


def parse_metrics(names: list[str] | tuple[str, ...]):
    import ir_measures

    measures = []
    for name in names:
        try:
            measures.append(ir_measures.parse_measure(name))
        except (NameError, ValueError, TypeError) as e:
            raise ValueError(f"unknown metric {name!r} ({e})") from None
    return measures


def evaluate(qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], metrics=DEFAULT_METRICS) -> Evaluation:
    """Evaluate ``run`` against ``qrels``; every qrels query counts, missing ones score 0 (``trec_eval -c``).

    Queries of the run that have no judgements are ignored, as trec_eval ignores them.
    """
    import ir_measures

    measures = parse_metrics(list(metrics))
    if not set(qrels) & set(run):
        raise ValueError("the qrels and the run have no query in common (check the topics and qrels files)")
    per_query = {str(m): dict.fromkeys(qrels, 0.0) for m in measures}
    judged_run = {qid: docs for qid, docs in run.items() if qid in qrels}
    for metric in ir_measures.iter_calc(measures, qrels, judged_run):
        per_query[str(metric.measure)][metric.query_id] = float(metric.value)
    means = {name: sum(values.values()) / len(values) for name, values in per_query.items()}
    return Evaluation(per_query, means, len(qrels))
