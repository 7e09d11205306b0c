"""Answer-string evaluation for open-domain QA: DPR's top-k retrieval accuracy.

A passage "has an answer" when, after NFD normalisation, the uncased token sequence of an answer
occurs in the uncased tokens of the passage text (DrQA's SimpleTokenizer, as DPR and Pyserini's
``pyserini.eval.evaluate_dpr_retrieval`` use it), or, in regex mode (CuratedTrec), when an answer
pattern matches case-insensitively. As in Pyserini, only the passage text is matched, not its title, and the text
is the one Pyserini's ``convert_trec_run_to_dpr_retrieval_run`` reads from a BM25 index's ``contents`` (a newline
inside it a space: :func:`~tour_pyserini.index.corpus.pyserini_field`), so regular expressions match alike too.
Top-k accuracy of a query is 1 when any of its first k passages has an answer.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from functools import cached_property

from tour_pyserini._java import import_pyserini
from tour_pyserini.errors import UserError
from tour_pyserini.eval.judge import Evaluation, Judge, answer_topics
from tour_pyserini.files.topics import Topic
from tour_pyserini.index.corpus import pyserini_field
from tour_pyserini.index.docstore import DocStore


def _normalize(text: str) -> str:
    return unicodedata.normalize("NFD", text)


class AnswerMatcher:
    """Decides whether passages contain answers; tokenised passages are cached by docid."""

    def __init__(self, docstore: DocStore, regex: bool = False):
        self.docstore = docstore
        self.regex = regex
        self._words: dict[str, list[str]] = {}

    @cached_property
    def _dpr(self):
        return import_pyserini("pyserini.eval.evaluate_dpr_retrieval")

    @cached_property
    def _tokenizer(self):
        return self._dpr.SimpleTokenizer()

    def _tokens(self, text: str) -> list[str]:
        return self._tokenizer.tokenize(_normalize(text)).words(uncased=True)

    def has_answer(self, docid: str, text: str, answers: Sequence[str]) -> bool:
        text = pyserini_field(text)
        if self.regex:
            return any(self._dpr.regex_match(_normalize(text), _normalize(a)) for a in answers)
        words = self._words.get(docid)
        if words is None:
            words = self._words[docid] = self._tokens(text)
        for answer in answers:
            tokens = self._tokens(answer)
            n = len(tokens)
            if any(words[i : i + n] == tokens for i in range(len(words) - n + 1)):
                return True
        return False

    def first_answer_rank(self, docids: Sequence[str], answers: Sequence[str], depth: int) -> int | None:
        """1-based rank of the first passage with an answer among the first ``depth``, or None."""
        head = list(docids[:depth])
        for rank, doc in enumerate(self.docstore.get(head), 1):
            if self.has_answer(doc.docid, doc.text, answers):
                return rank
        return None


class AnswerJudge(Judge):
    """DPR top-k accuracy (``Acc@k``) of runs over every topic with answers (:func:`answer_topics`), with one
    matcher for all runs; ``source`` names the topics in messages.

    EntityQuestions topics carry a relation: the evaluation then also holds the mean per relation.
    """

    def __init__(
        self,
        topics: Sequence[Topic],
        matcher: AnswerMatcher,
        topk: Sequence[int] = (1, 5, 20, 100),
        source: str = "the topics",
    ):
        self.topics = answer_topics(topics, source)
        self.qids = [t.qid for t in self.topics]
        self.all_qids = {t.qid for t in topics}  # those without answers too: a run may hold them
        self.matcher, self.topk = matcher, list(topk)

    def per_query(self, run: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
        if not set(self.qids) & set(run):
            raise UserError("the topics and the run have no query in common")
        depth = max(self.topk)
        per_query: dict[str, dict[str, float]] = {f"Acc@{k}": {} for k in self.topk}
        for topic in self.topics:
            ranked = sorted(run.get(topic.qid, {}).items(), key=lambda item: -item[1])
            rank = self.matcher.first_answer_rank([d for d, _ in ranked], topic.answers, depth) if ranked else None
            for k in self.topk:
                per_query[f"Acc@{k}"][topic.qid] = float(rank is not None and rank <= k)
        return per_query

    def evaluate(self, run: Mapping[str, Mapping[str, float]]) -> Evaluation:
        evaluation = super().evaluate(run)
        for relation in sorted({t.relation for t in self.topics if t.relation}):
            qids = [t.qid for t in self.topics if t.relation == relation]
            evaluation.per_relation[relation] = {
                name: sum(values[q] for q in qids) / len(qids) for name, values in evaluation.per_query.items()
            }
        return evaluation


def answer_accuracy(
    run: Mapping[str, Mapping[str, float]],
    topics: Sequence[Topic],
    matcher: AnswerMatcher,
    topk: Sequence[int] = (1, 5, 20, 100),
) -> Evaluation:
    """DPR top-k accuracy of one ``run`` (an :class:`AnswerJudge` used once)."""
    return AnswerJudge(topics, matcher, topk).evaluate(run)


def answer_qrels(
    run: Mapping[str, Mapping[str, float]], topics: Sequence[Topic], matcher: AnswerMatcher, depth: int
) -> dict[str, dict[str, int]]:
    """``{qid: {docid: has_answer}}`` for the first ``depth`` passages of each query: qrels for Success@k."""
    qrels: dict[str, dict[str, int]] = {}
    for topic in topics:
        ranked = sorted(run.get(topic.qid, {}).items(), key=lambda item: -item[1])[:depth]
        docs = matcher.docstore.get([d for d, _ in ranked])
        qrels[topic.qid] = {doc.docid: int(matcher.has_answer(doc.docid, doc.text, topic.answers)) for doc in docs}
    return qrels
