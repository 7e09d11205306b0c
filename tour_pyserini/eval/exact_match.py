"""Exact match and token F1 of predicted answer strings, as SQuAD's, DPR's and ORQA's evaluations define them.

An answer is normalised by lower-casing it, deleting ASCII punctuation (``string.punctuation``), deleting
the articles a/an/the as whole words, and joining the remaining words with single spaces (SQuAD v1.1's
``normalize_answer``, which DPR's reader evaluation reuses). EM is 1 when the normalised prediction equals
a normalised gold answer; token F1 is the harmonic mean of the precision and recall of the bag of
normalised words. A question scores the maximum over its gold answers.

CuratedTrec's answers are regular expressions: EM is 1 when a pattern matches at the start of the raw
prediction, case-insensitively (DrQA's and ORQA's ``regex_match_score``); F1 is then EM, since a pattern
has no bag of words. A pattern that does not compile matches nothing, as there.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence

from tour_pyserini.errors import UserError
from tour_pyserini.eval.judge import Evaluation, answer_topics
from tour_pyserini.files.predictions import Prediction
from tour_pyserini.files.topics import Topic

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, no punctuation, no articles, single spaces (in that order, as SQuAD's script does it)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    """F1 of the normalised words; when either side normalises to nothing, 1 if both do (SQuAD v2's rule:
    v1.1 scores the pair "The" / "the" 0 although its EM is 1)."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def regex_match(prediction: str, pattern: str) -> float:
    try:
        compiled = re.compile(pattern, flags=re.IGNORECASE | re.UNICODE | re.MULTILINE)
    except re.error:
        return 0.0
    return float(compiled.match(prediction) is not None)


def answer_scores(prediction: str, answers: Sequence[str], regex: bool = False) -> tuple[float, float]:
    """(EM, F1) of one prediction: the maximum over the gold ``answers``."""
    if regex:
        em = max((regex_match(prediction, a) for a in answers), default=0.0)
        return em, em
    return (
        max((exact_match(prediction, a) for a in answers), default=0.0),
        max((token_f1(prediction, a) for a in answers), default=0.0),
    )


def evaluate_predictions(
    predictions: Mapping[str, Prediction],
    topics: Sequence[Topic],
    regex: bool = False,
    source: str = "the predictions",
    topics_source: str = "the topics",
) -> Evaluation:
    """EM and F1 over every topic with answers (:func:`~tour_pyserini.eval.judge.answer_topics`, ``topics_source``
    naming them); a question without a prediction scores 0, and a prediction for a question the topics do not
    hold is the user's error (predictions of another topics file)."""
    judged = answer_topics(topics, topics_source)
    known = {t.qid for t in topics}
    unknown = sorted(set(predictions) - known)
    if unknown:
        raise UserError(f"{source}: {len(unknown)} predictions for questions not in the topics, e.g. {unknown[:3]}")
    per_query: dict[str, dict[str, float]] = {"EM": {}, "F1": {}}
    for topic in judged:
        pred = predictions.get(topic.qid)
        em, f1 = answer_scores(pred.answer, topic.answers, regex) if pred else (0.0, 0.0)
        per_query["EM"][topic.qid], per_query["F1"][topic.qid] = em, f1
    means = {name: sum(values.values()) / len(values) for name, values in per_query.items()}
    return Evaluation(per_query, means, len(judged))
