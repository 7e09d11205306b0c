"""What the eval and compare commands share: judgements from qrels or answers, per-query scores of runs."""

from __future__ import annotations

import logging
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.eval.judge import DEFAULT_METRICS, Judge, QrelsJudge
from tour_pyserini.files.collections import Collection
from tour_pyserini.files.qrels import read_qrels
from tour_pyserini.files.runs import read_run
from tour_pyserini.files.topics import read_topics
from tour_pyserini.index.docstore import DocStore, open_passages

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Judgements:
    """Where a run's judgements come from: ``qrels`` (ir-measures ``metrics``) or ``answers`` (topics with
    answer strings; Acc@``topk`` over the passages of ``collection`` or of ``index``'s document store)."""

    qrels: str | None = None
    answers: str | None = None
    metrics: tuple[str, ...] = tuple(DEFAULT_METRICS)
    collection: str | None = None
    index: str | None = None
    topk: tuple[int, ...] = (1, 5, 20, 100)
    regex: bool = False  # answers are regular expressions (CuratedTrec)

    @classmethod
    def of(cls, collection: Collection, split: str) -> Judgements:
        """How a split of a registered collection is judged: its qrels and metrics, or its answers with Acc@k for
        each ``Acc@k`` of its metrics."""
        files = collection.split(split)
        if files.qrels is not None:
            return cls(qrels=str(files.qrels), metrics=collection.metrics)
        topk = [m.removeprefix("Acc@") for m in collection.metrics]
        if not all(k.isdigit() and int(k) > 0 for k in topk):
            raise UserError(f"collection {collection.name}: judged by answers, its metrics are Acc@k only")
        return cls(answers=str(files.topics), collection=str(collection.directory), topk=tuple(map(int, topk)))


def passages(judgements: Judgements, stack: ExitStack) -> DocStore:
    """The passages answer strings are looked for in."""
    if not (judgements.index or judgements.collection):
        raise UserError("--answers needs --collection DIR or --index DIR for the passage texts")
    return open_passages(stack, index=judgements.index, collection=judgements.collection)


def open_judge(judgements: Judgements, stack: ExitStack) -> Judge:
    """The judge that qrels or answers (with their passages) ask for."""
    if not judgements.answers:
        if not judgements.qrels:
            raise UserError("runs are judged by --qrels or --answers: give one")
        return QrelsJudge(read_qrels(judgements.qrels), list(judgements.metrics))
    from tour_pyserini.eval.answers import AnswerJudge, AnswerMatcher

    matcher = AnswerMatcher(passages(judgements, stack), regex=judgements.regex)
    return AnswerJudge(read_topics(judgements.answers), matcher, list(judgements.topk), judgements.answers)


def _some(qids) -> str:
    qids = list(qids)
    return ", ".join(qids[:3]) + (", ..." if len(qids) > 3 else "")


def check_queries(path: str, run: dict, judge: Judge, judgements: Judgements) -> None:
    """Refuse a run none of whose queries is judged (in one line, naming both files and a few ids of each), and, in
    answers mode, say how many of the topics' questions the run leaves out (they count as 0) and how many of its
    queries are not questions of the topics (not scored; Pyserini's convert_trec_run_to_dpr_retrieval_run stops on
    such a query). A run of other topics numbered alike (DPR's NQ test and NQ-open both number their 3,610
    questions 0..3609, in different orders) can only be seen by these counts."""
    source = judgements.answers or judgements.qrels
    common = [q for q in judge.qids if q in run]
    if not common:
        kind = "topics" if judgements.answers else "qrels"
        raise UserError(
            f"{path} and {source} have no query in common (the run's {len(run)}: {_some(run)}; the "
            f"{kind}' {len(judge.qids)}: {_some(judge.qids)}): a run of other topics?"
        )
    if not judgements.answers:
        return
    from tour_pyserini.eval.answers import AnswerJudge

    if not isinstance(judge, AnswerJudge):  # the judge of other judgements than these answers
        raise ValueError(f"answers {judgements.answers} are judged by an AnswerJudge, not a {type(judge).__name__}")
    if len(common) < len(judge.qids):
        log.warning(
            "%s: %d of the %d questions of %s are not in the run and count as 0 (is it a run of these topics?)",
            path,
            len(judge.qids) - len(common),
            len(judge.qids),
            source,
        )
    unknown = [q for q in run if q not in judge.all_qids]
    if unknown:
        log.warning(
            "%s: %d of its %d queries (%s) are not questions of %s and are not scored",
            path,
            len(unknown),
            len(run),
            _some(unknown),
            source,
        )


def score_runs(judgements: Judgements, run_paths, answer_qrels_out: str | None = None) -> tuple[dict, list[str]]:
    """Each run's :class:`Evaluation` ({path: Evaluation}) and the judged qids, in qrels or answers mode."""
    runs = {path: read_run(path) for path in run_paths}  # malformed runs fail before any judging
    for path, run in runs.items():
        if not run:  # trec_eval refuses an empty results file ("Cannot read results file")
            raise UserError(f"{path}: no results (the run holds no line)")
    with ExitStack() as stack:
        judge = open_judge(judgements, stack)
        for path, run in runs.items():
            check_queries(path, run, judge, judgements)
        results = {path: judge.evaluate(run) for path, run in runs.items()}
        if isinstance(judge, QrelsJudge):
            judged = {d for docs in judge.qrels.values() for d in docs}
            for path, run in runs.items():
                if not any(d in judged for docs in run.values() for d in docs):
                    log.warning(
                        "%s shares no document with %s, so every query scores 0 (a run of another collection?)",
                        path,
                        judgements.qrels,
                    )
        if answer_qrels_out:
            from tour_pyserini.eval.answers import AnswerJudge, answer_qrels

            if not judgements.answers or not isinstance(judge, AnswerJudge):  # open_judge: answers give one
                raise UserError("--write-answer-qrels needs --answers")

            qrels = answer_qrels(next(iter(runs.values())), judge.topics, judge.matcher, max(judgements.topk))
            lines = "".join(f"{q} 0 {d} {rel}\n" for q, docs in qrels.items() for d, rel in docs.items())
            Path(answer_qrels_out).write_text(lines)
    return results, judge.qids


def score_predictions(paths: list[str], answers: str | None, regex: bool) -> tuple[dict, list[str]]:
    """EM and F1 of each predictions file against the answers of the topics file ``answers``, and the qids."""
    from tour_pyserini.eval.exact_match import evaluate_predictions
    from tour_pyserini.eval.judge import answer_topics
    from tour_pyserini.files.predictions import read_predictions
    from tour_pyserini.files.topics import read_topics

    if not answers:
        raise UserError("--predictions needs --answers TOPICS (the gold answers)")
    topics = read_topics(answers)
    qids = [t.qid for t in answer_topics(topics, answers)]  # no answers at all is said before predictions are read
    predictions = {path: read_predictions(path) for path in paths}  # every file is read before any scoring
    # every topic, so that a prediction for a question skipped for want of answers is not refused as unknown
    results = {path: evaluate_predictions(preds, topics, regex, path, answers) for path, preds in predictions.items()}
    return results, qids
