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
    """Per-query values and aggregates of some metrics for one run. An ir-measures metric is aggregated as
    ir-measures aggregates it (:func:`aggregate`: a sum for NumQ, NumRel, NumRet and NumRelRet, a mean for the
    others); answer metrics (Acc@k, EM, F1) are means."""

    per_query: dict[str, dict[str, float]]  # metric -> qid -> value
    means: dict[str, float]  # metric -> aggregate (the name is older than the sums)
    num_queries: int
    per_relation: dict[str, dict[str, float]] = field(default_factory=dict)  # relation -> metric -> mean (QA)


class Judge(ABC):
    """Scores runs against one set of judgements; ``qids`` are the judged queries, in order."""

    qids: list[str]

    @abstractmethod
    def per_query(self, run: Run) -> dict[str, dict[str, float]]:
        """``{metric: {qid: value}}`` over every judged query."""

    def aggregate(self, run: Run) -> dict[str, float]:
        """``{metric: aggregate over the judged queries}`` (:class:`Evaluation`)."""
        return self.evaluate(run).means

    def evaluate(self, run: Run) -> Evaluation:
        per_query = self.per_query(run)
        means = {name: sum(values.values()) / len(values) for name, values in per_query.items()}
        return Evaluation(per_query, means, len(self.qids))


def _aggregator(metric: str):
    import ir_measures
    from ir_measures.measures.base import MeanAgg

    try:
        return ir_measures.parse_measure(metric).aggregator()
    except (NameError, ValueError, TypeError, SyntaxError):  # not an ir-measures name: Acc@k, EM, F1
        return MeanAgg()


def aggregate(metric: str, values: Iterable[float]) -> float:
    """Per-query ``values`` of ``metric`` aggregated as ir-measures aggregates it: with the measure's own
    ``aggregator()`` (a sum for NumQ, NumRel, NumRet and NumRelRet; a mean for every other, NaN over no value).
    A name ir-measures does not know (Acc@k, EM, F1) is averaged."""
    agg = _aggregator(metric)
    for value in values:
        agg.add(value)
    return float(agg.result())


def is_sum(metric: str) -> bool:
    """Whether ir-measures aggregates ``metric`` by summing (a count: NumQ, NumRel, NumRet, NumRelRet)."""
    from ir_measures.measures.base import SumAgg

    return isinstance(_aggregator(metric), SumAgg)


def answer_topics(topics: Sequence[Topic], source: str = "the topics") -> list[Topic]:
    """The questions that answer scores (Acc@k, EM, F1) judge: those with answers. One without any (none given,
    or only blank ones) can be neither found nor missed, so it is skipped, as trec_eval skips a query without
    judgements, and a warning says how many (once: a command checks its topics before scoring and again as it
    scores). No question with answers is the user's error."""
    judged = [t for t in topics if t.answers]
    if not judged:
        raise UserError(f"{source}: no topic has answers (scoring answers needs topics with an 'answers' list)")
    if len(judged) < len(topics):
        warn_once(
            __name__, f"{source}: {len(topics) - len(judged)} of {len(topics)} questions have no answer and are skipped"
        )
    return judged


def parse_metrics(names: Iterable[str]):
    import ir_measures
    from ir_measures.measures.base import _NOT_PROVIDED

    measures = []
    for name in names:
        try:
            measure = ir_measures.parse_measure(name)
        except (NameError, ValueError, TypeError) as e:
            raise UserError(f"unknown metric {name!r} ({e})") from None
        for param, info in measure.SUPPORTED_PARAMS.items():  # ir-measures asserts these when it first scores
            value = measure.params.get(param, _NOT_PROVIDED)
            if value is _NOT_PROVIDED and not info.validate(value):
                example = f"{measure.NAME}@N" if param == measure.AT_PARAM else f"{measure.NAME}({param}=...)"
                raise UserError(f"metric {name!r} needs its {param} ({example})")
            if not info.validate(value):
                raise UserError(f"metric {name!r}: {param}={value!r} is not a valid {param}")
        measures.append(measure)
    return measures


def _provider(measure) -> str:
    """The name of the ir-measures provider that computes ``measure`` (the first installed one that supports it)."""
    import ir_measures

    return next(p.NAME for p in ir_measures.DefaultPipeline.providers if p.is_available() and p.supports(measure))


GDEVAL_MAX_GRADE = 4  # gdeval.pl's $MAX_JUDGMENT


def _check_gdeval(measures, qrels: Mapping[str, Mapping[str, int]]) -> None:
    """ERR@k and nDCG(dcg='exp-log2')@k are computed by ir-measures' gdeval.pl, which stops on a query id that is
    not a number after its last '-', and on a grade above 4, and reads 'a-1' and 'b-1' as the same query 1 (their
    values then come back under neither id, so both would score 0): refuse such qrels in one line instead."""
    gdeval = [str(m) for m in measures if _provider(m) == "gdeval"]
    if not gdeval:
        return
    needs = (
        f"metric {', '.join(gdeval)} is computed by ir-measures' gdeval, which reads numeric query ids and "
        f"grades up to {GDEVAL_MAX_GRADE}"
    )
    for qid, docs in qrels.items():
        if not (qid.isascii() and qid.isdigit()):
            raise UserError(f"{needs}: the qrels' query {qid!r} is not a number")
        grade = max(docs.values(), default=0)
        if grade > GDEVAL_MAX_GRADE:
            raise UserError(f"{needs}: query {qid!r} has grade {grade}")


class QrelsJudge(Judge):
    """ir-measures metrics against qrels, with one ir-measures evaluator per metric built once for all runs.

    ``qids`` restricts the judged queries (e.g. to one split's topics); queries of a run that have no
    judgements are ignored, as trec_eval ignores them. :meth:`evaluate` gives for each metric what
    ``ir_measures.calc_aggregate`` gives for that metric alone, with the same qrels and run: its per-query values
    as the evaluator yields them (a query missing from the run has the measure's default, 0) and their aggregate by
    the measure's own aggregator (a sum for the counts). Accuracy yields no value for a query without a relevant
    document retrieved: such a query is absent from :attr:`Evaluation.per_query` and from the mean, as in
    ir-measures, and holds 0 in
    :meth:`per_query`, which gives every judged query a value.
    """

    def __init__(
        self,
        qrels: Mapping[str, Mapping[str, int]],
        metrics: Iterable[str] = DEFAULT_METRICS,
        qids: Iterable[str] | None = None,
    ):
        import ir_measures

        keep = set(qrels) if qids is None else set(qids) & set(qrels)
        self.qrels = {q: dict(docs) for q, docs in qrels.items() if q in keep}
        if not self.qrels:
            raise UserError("no judged query: the qrels hold none of the given queries")
        self.qids = list(self.qrels)
        self.measures = parse_metrics(metrics)
        unsupported = [str(m) for m in self.measures if not ir_measures.DefaultPipeline.supports(m)]
        if unsupported:  # a name ir-measures knows, which none of its installed providers computes (RBP, alpha_nDCG)
            raise UserError(f"metric {', '.join(unsupported)}: no installed ir-measures provider computes it")
        _check_gdeval(self.measures, self.qrels)
        # One evaluator per metric: ir-measures 0.4.3 gives some metrics other values when they are asked together.
        # Beside any other metric, Accuracy scores 0 for a query with no relevant document retrieved (alone it has
        # no value there); beside a judged_only metric, NumRet may count only the judged documents (its pytrec_eval
        # provider puts NumRet in whichever invocation comes first, in an order set by Python's string hashing).
        self._evaluators = [ir_measures.evaluator([measure], self.qrels) for measure in self.measures]

    def _metrics(self, run: Run) -> dict[str, dict[str, float]]:
        """``{metric: {qid: value}}`` as the ir-measures evaluator yields them for the judged part of ``run``."""
        if not set(self.qrels) & set(run):
            raise UserError("the qrels and the run have no query in common (check the topics and qrels files)")
        values: dict[str, dict[str, float]] = {str(m): {} for m in self.measures}
        judged_run = {qid: dict(docs) for qid, docs in run.items() if qid in self.qrels}
        for evaluator in self._evaluators:
            for metric in evaluator.iter_calc(judged_run):
                values[str(metric.measure)][metric.query_id] = float(metric.value)
        return values

    def per_query(self, run: Run) -> dict[str, dict[str, float]]:
        return {name: {qid: values.get(qid, 0.0) for qid in self.qids} for name, values in self._metrics(run).items()}

    def evaluate(self, run: Run) -> Evaluation:
        values = self._metrics(run)
        per_query = {name: {qid: by_qid[qid] for qid in self.qids if qid in by_qid} for name, by_qid in values.items()}
        aggregates = {}
        for measure in self.measures:
            agg = measure.aggregator()
            for value in per_query[str(measure)].values():
                agg.add(value)
            aggregates[str(measure)] = float(agg.result())
        return Evaluation(per_query, aggregates, len(self.qids))


def evaluate(qrels: Mapping[str, Mapping[str, int]], run: Run, metrics: Iterable[str] = DEFAULT_METRICS) -> Evaluation:
    """Evaluate one ``run`` against ``qrels`` (a :class:`QrelsJudge` used once)."""
    return QrelsJudge(qrels, metrics).evaluate(run)
