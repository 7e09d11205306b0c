"""The one small interface every teacher implements, and the registry of teacher specs.

Teachers keep no state between calls. What a teacher must remember about one query during one
search (e.g. the scale the fusion teacher fixed for it) lives in ``ScoreRequest.memo``, which the
per-search :class:`~tour_pyserini.teachers.cache.ScoreCache` owns and drops with the search.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

import numpy as np

from tour_pyserini.encoders.query import QueryEncoders
from tour_pyserini.errors import UserError
from tour_pyserini.index.docstore import Document
from tour_pyserini.index.faiss_index import OpenIndexes
from tour_pyserini.numbers import Param
from tour_pyserini.registry import Registry


@dataclass(frozen=True)
class ScoreRequest:
    """Candidates of one query to be scored.

    ``docs`` holds their texts when the teacher reads text; ``memo`` is a scratch dict for this query
    that lives as long as the search that made the request (the same dict at every iteration). ``vector`` is
    the query's vector as the searcher encoded it, by ``encoded_by`` (a ``QueryEncoder``): a teacher that
    would encode the query with that same encoder takes it instead.
    """

    qid: str
    query: str
    docids: list[str]
    docs: list[Document] | None = None
    memo: dict = field(default_factory=dict, compare=False, repr=False)
    vector: np.ndarray | None = field(default=None, compare=False, repr=False)
    encoded_by: Any = field(default=None, compare=False, repr=False)

    @property
    def documents(self) -> list[Document]:
        """``docs``, which a request to a teacher that reads text carries (:class:`ScoreCache` reads them)."""
        if self.docs is None:
            raise ValueError(f"query {self.qid!r}: a teacher that reads text was asked without the candidates' texts")
        return self.docs


def with_docids(request: ScoreRequest, docids: list[str], docs: list[Document] | None = None) -> ScoreRequest:
    """``request`` for other candidates of the same query (its memo and vector kept)."""
    return replace(request, docids=docids, docs=docs)


def with_texts(request: ScoreRequest, docstore) -> ScoreRequest:
    """``request`` carrying its candidates' texts, read from ``docstore`` (a :class:`DocStore`)."""
    return replace(request, docs=docstore.get(request.docids))


# called with (index of the request, {docid: score}) for scores as soon as the teacher has them
ScoreSink = Callable[[int, dict[str, float]], None]


class Teacher(ABC):
    """Scores candidates of queries; higher is more relevant.

    A teacher spec on the command line is ``KIND`` or ``KIND:ARGUMENT`` (``cross-encoder:PATH``,
    ``bm25``, ``oracle:QRELS``, ``fusion:A+B``); each subclass is registered with
    ``@TEACHERS.register`` under its ``name`` and builds itself from the argument with :meth:`from_spec`.
    """

    name: ClassVar[str]
    usage: ClassVar[str] = ""  # how the spec is written, e.g. "cross-encoder:PATH" (default: the name alone)
    needs_text: ClassVar[bool] = True  # whether requests must carry document texts
    oracle: ClassVar[bool] = False  # reads relevance judgements: for tests and upper bounds only
    # a pair's score does not depend on the other candidates of its query, so scores may be stored and
    # reused across searches (see ScoreStore)
    pairwise: ClassVar[bool] = True
    options: ClassVar[tuple[Param, ...]] = ()  # the flags this teacher reads from TeacherContext.options

    @classmethod
    @abstractmethod
    def from_spec(cls, argument: str | None, context: TeacherContext) -> Teacher: ...

    @classmethod
    def options_read(cls, argument: str | None) -> list[Param]:
        """The flags the teacher built from ``argument`` reads: its own; a teacher made of others, theirs."""
        return list(cls.options)

    @abstractmethod
    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        """One score array per request, aligned with ``request.docids``; NaN for a pair the teacher could not
        score (an API's answer without one), which is never stored and never ranked as if judged."""

    def score_streaming(self, requests: Sequence[ScoreRequest], sink: ScoreSink) -> list[np.ndarray]:
        """:meth:`score`, also handing each score worth keeping to ``sink`` as soon as it is known, so a caller
        can keep it before the call ends (an API teacher pays per pair: an interrupted call keeps what it got).
        A pair the teacher could not score is NaN in the result and is not kept (a later call tries it again).
        Teachers that score a call at once hand their scores over at its end."""
        out = self.score(requests)
        for i, (request, scores) in enumerate(zip(requests, out)):
            sink(i, dict(zip(request.docids, np.asarray(scores, dtype=np.float64).tolist())))
        return out

    @property
    def label(self) -> str:
        """How results produced with this teacher are labelled (contains 'oracle' for oracle teachers)."""
        return self.name

    @property
    def fingerprint(self) -> str:
        """What a :class:`ScoreStore` checks before reusing stored scores: the label, unless a teacher knows more."""
        return self.label


@dataclass(frozen=True)
class TeacherContext:
    """What a teacher spec may refer to: the dense index it scores candidates of, reading limits, and what the
    search has already opened (its query encoders, its dense indexes), which a teacher shares instead of loading
    another copy."""

    index_dir: str | None = None
    max_length: int | None = None  # tokens of query + document a model-based teacher reads
    device: str = "cpu"  # where a model-based teacher runs
    precision: str | None = None  # a cross-encoder's arithmetic (fp32, bf16); None: the teacher's default
    options: Mapping[str, Any] = field(default_factory=dict)  # values of the flags teachers declare, by name
    encoders: QueryEncoders = field(default_factory=QueryEncoders, compare=False, repr=False)
    indexes: OpenIndexes = field(default_factory=OpenIndexes, compare=False, repr=False)

    def option(self, declared: Param) -> Any:
        """The value given for a teacher's parameter, else its declared default."""
        value = self.options.get(declared.name)
        return declared.default if value is None else value


TEACHERS: Registry[type[Teacher]] = Registry("teacher", "tour_pyserini.teachers")


def teacher_options() -> list[Param]:
    """Every flag the teachers declare, once each (teachers sharing a flag declare it as the same option)."""
    seen: dict[str, Param] = {}
    for cls in TEACHERS.all().values():
        for option in cls.options:
            if seen.setdefault(option.option, option) != option:
                raise TypeError(f"teachers declare {option.option} differently: {seen[option.option]} and {option}")
    return list(seen.values())


@dataclass(frozen=True)
class TeacherSpec:
    """A teacher as its spec names it, ``kind[:argument]``: the registered ``kind`` (bm25, cross-encoder,
    ensemble, ...) and its ``argument`` (a path, a URL, a file, a fusion's parts; None when there is none). The
    one place a spec's text is split."""

    kind: str
    argument: str | None = None

    @classmethod
    def parse(cls, spec: str | TeacherSpec) -> TeacherSpec:
        if isinstance(spec, TeacherSpec):
            return spec
        kind, _, argument = spec.partition(":")
        return cls(kind, argument or None)

    def __str__(self) -> str:
        return self.kind if self.argument is None else f"{self.kind}:{self.argument}"

    def with_argument(self, argument: str) -> TeacherSpec:
        return TeacherSpec(self.kind, argument)

    def teacher_class(self) -> type[Teacher]:
        """The registered teacher of this kind; an unknown kind is one line listing the known ones."""
        teachers = TEACHERS.all()
        if self.kind not in teachers:
            raise UserError(
                f"unknown teacher {str(self)!r}; choose one of: {', '.join(teachers)} (e.g. cross-encoder:PATH)"
            )
        return teachers[self.kind]


def options_read_by(spec: str | TeacherSpec) -> list[Param]:
    """The flags the teacher ``spec`` names reads (:meth:`Teacher.options_read`); every teacher's for a name no
    teacher has (refused later, with the teacher list)."""
    parsed = TeacherSpec.parse(spec)
    cls = TEACHERS.all().get(parsed.kind)
    return teacher_options() if cls is None else cls.options_read(parsed.argument)


def get_teacher(spec: str | TeacherSpec, context: TeacherContext | None = None) -> Teacher:
    """Build the teacher a spec names; an unknown name gets an error listing the known ones."""
    parsed = TeacherSpec.parse(spec)
    return parsed.teacher_class().from_spec(parsed.argument, context or TeacherContext())
