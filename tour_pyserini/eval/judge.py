"""The judge: built once from qrels or from answer strings, then scores any number of runs.

``eval``, ``compare`` and the benchmarks all score runs through a :class:`Judge`, so they cannot
disagree. A run is ``{qid: {docid: score}}``; every judged query counts, and one missing from the run
scores 0 (``trec_eval -c``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from tour_pyserini.errors import UserError, warn_once
from tour_pyserini.files.topics import Topic

DEFAULT_METRICS = ("nDCG@10", "R@100", "RR@10")

Run = Mapping[str, Mapping[str, float]]


@dataclass
class Evaluation:
    """Per-query values and means of some metrics for one run."""

    per_query: dict[str, dict[str, float]]  # metric -> qid -> value
    means: dict[str, float]
    num_queries: int
    per_relation: dict[str, dict[str, float]] = field(default_factory=dict)  # relation -> metric -> mean (QA)


class Judge(ABC):
    """Scores runs against one set of judgements; ``qids`` are the judged queries, in order."""

    qids: list[str]

    @abstractmethod
    def per_query(self, run: Run) -> dict[str, dict[str, float]]:
        """``{metric: {qid: value}}`` over every judged query."""

    def aggregate(self, run: Run) -> dict[str, float]:
        """``{metric: mean over the judged queries}``."""
        return self.evaluate(run).means

    def evaluate(self, run: Run) -> Evaluation:
        per_query = self.per_query(run)
        means = {name: sum(values.values()) / len(values) for name, values in per_query.items()}
        return Evaluation(per_query, means, len(self.qids))


def answer_topics(topics: Sequence[Topic], source: str = "the topics") -> list[Topic]:
    """The questions that answer scores (Acc@k, EM, F1) judge: those with answers. One without any (none given,
    or only blank ones) can be neither found nor missed, so it is skipped, as trec_eval skips a query without
    judgements, and a warning says how many (once: a command checks its topics before scoring and again as it
    scores). No question with answers is the user's error."""
    judged = [t for t in topics if t.answers]
    if not judged:
        raise UserError(f"{source}: no topic has answers (scoring answers needs topics with an 'answers' list)")
    if len(judged) < len(topics):
        warn_once(__name__, f"{source}: {len(topics) - len(judged)} of {len(topics)} questions have no answer and "
                            "are skipped")  # fmt: skip
    return judged


def parse_metrics(names: Iterable[str]):
    import ir_measures

    measures = []
    for name in names:
        try:
            measures.append(ir_measures.parse_measure(name))
        except (NameError, ValueError, TypeError) as e:
            raise UserError(f"unknown metric {name!r} ({e})") from None
    return measures


class QrelsJudge(Judge):
    """ir-measures metrics against qrels, with one ir-measures evaluator built for all runs.

    ``qids`` restricts the judged queries (e.g. to one split's topics); queries of a run that have no
    judgements are ignored, as trec_eval ignores them.
    """

    def __init__(self, qrels: Mapping[str, Mapping[str, int]], metrics: Iterable[str] = DEFAULT_METRICS,
                 qids: Iterable[str] | None = None):  # fmt: skip
        import ir_measures

        keep = set(qrels) if qids is None else set(qids) & set(qrels)
        self.qrels = {q: dict(docs) for q, docs in qrels.items() if q in keep}
        if not self.qrels:
            raise UserError("no judged query: the qrels hold none of the given queries")
        self.qids = list(self.qrels)
        self.measures = parse_metrics(metrics)
        self._evaluator = ir_measures.evaluator(self.measures, self.qrels)

    def per_query(self, run: Run) -> dict[str, dict[str, float]]:
        if not set(self.qrels) & set(run):
            raise UserError("the qrels and the run have no query in common (check the topics and qrels files)")
        per_query = {str(m): dict.fromkeys(self.qids, 0.0) for m in self.measures}
        judged_run = {qid: dict(docs) for qid, docs in run.items() if qid in self.qrels}
        for metric in self._evaluator.iter_calc(judged_run):
            per_query[str(metric.measure)][metric.query_id] = float(metric.value)
        return per_query


def evaluate(qrels: Mapping[str, Mapping[str, int]], run: Run, metrics: Iterable[str] = DEFAULT_METRICS) -> Evaluation:
    """Evaluate one ``run`` against ``qrels`` (a :class:`QrelsJudge` used once)."""
    return QrelsJudge(qrels, metrics).evaluate(run)
