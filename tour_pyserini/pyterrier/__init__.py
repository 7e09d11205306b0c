"""PyTerrier transformers over the toolkit's searchers, rewriters and teachers (docs/pyterrier.md).

``pip install 'tour-pyserini[pyterrier]'``. Frames are PyTerrier's: queries in (``qid``, ``query``), results out
(the query columns, ``docno``, ``score``, ``rank`` from 0), dense ones with ``query_vec`` as pyterrier-dr names it::

    retriever = Retriever("indexes/scifact.minilm")
    pipeline = retriever >> tour(teacher="bm25", depth=20)

:class:`Retriever` searches an index built by ``tour-pyserini index``; :class:`Rewrite` (``tour``, ``rocchio``,
``average_prf``, ``rerank``, ``ttt_embed``) runs one of the rewriters over that index for each query of its input;
:class:`TeacherReranker` scores the input's documents with a teacher. Each is opened by the same planner as the
search command (:mod:`tour_pyserini.pipeline`), so a pipeline ranks as the command does. Every option of
each is a PyTerrier parameter (``get_parameter``/``set_parameter``, what ``pt.GridScan`` and ``pt.GridSearch``
vary), checked as the command checks its flag. A stage searches or scores over the index of the retriever whose
results it reads, wherever it stands after it, and ``>>`` puts the very object in the pipeline: what a user
sets on it is what the pipeline runs. Nothing here starts PyTerrier's own JVM: Pyserini's (through pyjnius) is the
process's one, and the transformers are pure Python around it; ``pt.Experiment`` needs no Java either.
"""

from __future__ import annotations

import dataclasses
import itertools
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from tour_pyserini.errors import UserError

try:  # the optional extra: importing this module is what asks for it
    import pandas as pd
    import pyterrier as pt
except ImportError:
    raise UserError("tour_pyserini.pyterrier needs PyTerrier: pip install 'tour-pyserini[pyterrier]'") from None

from tour_pyserini.encoders import EncoderSettings
from tour_pyserini.files import read_topics
from tour_pyserini.files.runs import strictly_decreasing
from tour_pyserini.numbers import Param, non_negative_float, positive_int, probability
from tour_pyserini.pipeline import Pipeline, Plan, Resources, SearchSpec, build, plan
from tour_pyserini.results import SearchResult, Trace
from tour_pyserini.rewriters import check_rewriter, get_rewriter_class
from tour_pyserini.runtime import RUNTIME_CHOICES, RUNTIME_PRECISIONS
from tour_pyserini.teachers import ScoreCache, TeacherSpec, check_teacher_options, options_read_by, teacher_options

__all__ = [
    "Retriever",
    "Rewrite",
    "TeacherReranker",
    "average_prf",
    "rerank",
    "rocchio",
    "topics_frame",
    "tour",
    "ttt_embed",
]


def topics_frame(path: str | Path) -> pd.DataFrame:
    """A topics file the toolkit reads (TSV, JSONL, an ir_datasets name) as PyTerrier's query frame (qid, query)."""
    topics = read_topics(path)
    return pd.DataFrame({"qid": [t.qid for t in topics], "query": [t.text for t in topics]})


def query_rows(inp: pd.DataFrame, who: str) -> pd.DataFrame:
    """Each query of ``inp`` (a query frame, or a result frame: its first row per qid) with its query columns
    (``qid``, ``query``, ``query_vec``, ...), in input order."""
    missing = [c for c in ("qid", "query") if c not in inp.columns]
    if missing:
        raise UserError(f"{who} takes a frame with qid and query columns; this one lacks {', '.join(missing)}")
    return inp[list(pt.model.query_columns(inp))].drop_duplicates("qid").reset_index(drop=True)


def query_vectors(queries: pd.DataFrame) -> np.ndarray:
    return np.stack([np.asarray(v, dtype=np.float32).reshape(-1) for v in queries["query_vec"]])


def ranked_scores(scores) -> np.ndarray:
    """``scores`` (in rank order) as the search command writes them: 6 decimals, strictly decreasing
    (:func:`~tour_pyserini.files.runs.strictly_decreasing`), so that measures, which rank by score and break ties
    their own way (``pt.Experiment``'s by docno, at trec_eval's precision), see our order; NaN (a pair the teacher
    could not score, ranked last) stays NaN."""
    out = np.array(scores, dtype=np.float64)
    scored = ~np.isnan(out)
    out[scored] = strictly_decreasing(out[scored])
    return out


def results_frame(queries: pd.DataFrame, rankings: list[list[tuple[str, float, Any]]], doc_vec: bool = False):
    """PyTerrier's result frame: each query's columns repeated over its hits, then docno, score
    (:func:`ranked_scores`), rank (from 0) and, with ``doc_vec``, each hit's index vector. ``rankings``: (docid,
    score, vector) per hit, per query row."""
    counts = [len(hits) for hits in rankings]
    out = queries.iloc[np.repeat(np.arange(len(queries)), counts)].reset_index(drop=True)
    hits = [hit for ranking in rankings for hit in ranking]
    out["docno"] = pd.Series([h[0] for h in hits], dtype=object)
    scores = [ranked_scores([h[1] for h in ranking]) for ranking in rankings]
    out["score"] = np.concatenate(scores) if hits else np.array([], np.float64)
    out["rank"] = np.concatenate([np.arange(n) for n in counts]) if hits else np.array([], np.int64)
    if doc_vec:
        out["doc_vec"] = pd.Series([h[2] for h in hits], dtype=object)
    return out


def rankings_of(results: list[SearchResult]) -> list[list[tuple[str, float, Any]]]:
    return [[(h.docid, h.score, h.vector) for h in r.hits] for r in results]


# where a result frame's documents come from: the key of the Retriever whose index they are of (``frame.attrs``,
# which pandas carries through the frame's copies, selections and merges), so that a stage anywhere after it in a
# pipeline searches or scores over that index
FROM = "tour_pyserini.retriever"
RETRIEVERS: weakref.WeakValueDictionary[str, Retriever] = weakref.WeakValueDictionary()
KEYS = itertools.count()


def from_retriever(frame: pd.DataFrame, retriever: Retriever) -> pd.DataFrame:
    frame.attrs[FROM] = retriever.key
    return frame


class Parametrised(pt.Transformer):
    """A transformer whose options are PyTerrier's parameters: :meth:`get_parameter` and :meth:`set_parameter` by
    name (what ``pt.GridScan`` and ``pt.GridSearch`` call), each value checked as the search command checks its
    flag; a value refused is one line and changes nothing."""

    def parameters(self) -> dict[str, Any]:
        """Every parameter by name, with its value (None: unset, its default applies)."""
        raise NotImplementedError

    def configure(self, values: Mapping[str, Any]) -> None:
        """Take ``values`` (by parameter name) over the current ones, all checked before any is taken."""
        raise NotImplementedError

    def get_parameter(self, name: str) -> Any:
        values = self.parameters()
        if name not in values:
            raise UserError(f"{self!r} has no parameter {name!r}; its parameters: {', '.join(values)}")
        return values[name]

    def set_parameter(self, name: str, value: Any) -> None:
        self.get_parameter(name)
        self.configure({name: value})


# the search command's flags of a retriever, by parameter name, each checked as the flag is
RETRIEVER_PARAMS = {
    p.name: p
    for p in (
        Param("index"),
        Param("num_results", positive_int, flag="--hits"),
        Param("doc_vec", bool),
        Param("encoder"),
        Param("encoded_queries"),
        Param("encoder_precision", choices=RUNTIME_PRECISIONS),
        Param("encoder_runtime", choices=RUNTIME_CHOICES),
        Param("threads", positive_int),
        Param("device"),
        Param("ef_search", positive_int),
        Param("nprobe", positive_int),
        Param("bm25_k1", non_negative_float),
        Param("bm25_b", probability),
    )
}
SEARCH_DEFAULTS = {f.name: f.default for f in dataclasses.fields(SearchSpec) if f.default is not dataclasses.MISSING}
RETRIEVER_DEFAULTS = {
    **{name: SEARCH_DEFAULTS.get(name) for name in RETRIEVER_PARAMS},
    "num_results": 1000,
    "doc_vec": False,
    "encoder_settings": EncoderSettings(),
}


class Retriever(Parametrised):
    """Search an index built by ``tour-pyserini index`` (dense, or BM25 through Lucene) for each query of a frame.

    Input: ``qid`` and ``query`` (other query columns are kept); on a dense index, a ``query_vec`` column, when the
    input has one (an earlier stage's, e.g. pyterrier-dr's ``VectorPrf``), is searched instead of encoding
    ``query``. Output: the query columns with ``query_vec`` (dense), ``docno``, ``score``, ``rank``, and with
    ``doc_vec=True`` each hit's index vector (what pyterrier-dr's ``VectorPrf`` and ``AveragePrf`` read).
    ``num_results``: hits per query. ``config``: the search command's settings, as the fields of
    :class:`~tour_pyserini.pipeline.SearchSpec` name them (``encoder``, ``encoder_settings``, ``device``,
    ``threads``, ``ef_search``, ``nprobe``, ``encoder_precision``, ``encoder_runtime``, ``encoded_queries``,
    ``bm25_k1``, ``bm25_b``). Each is a parameter; setting one that changes the search opens it again.

    A :class:`Rewrite` or :class:`TeacherReranker` after it in a pipeline searches or scores over the same index,
    sharing its opened index and query encoder.
    """

    config: SearchSpec  # the search, as the search command's flags give it
    plan: Plan
    resources: Resources  # what a stage over this retriever shares: its index and query encoder
    searcher: Any  # TourSearcher, or Bm25Searcher for a BM25 index
    num_results: int
    doc_vec: bool

    def __init__(self, index: str | Path, *, num_results: int = 1000, doc_vec: bool = False, **config: Any):
        if pt.java.started():  # pyjnius starts one JVM per process, and Terrier's lacks Anserini's classes
            raise UserError(
                "PyTerrier's JVM (Terrier) already runs in this process, and Pyserini's cannot start "
                "beside it: run Terrier's Java transformers in another process"
            )
        self.open({"index": index, "num_results": num_results, "doc_vec": doc_vec, **config}, None)
        self.key = f"retriever-{next(KEYS)}"
        RETRIEVERS[self.key] = self

    @property
    def dense(self) -> bool:
        return self.plan.kind == "dense"

    def parameters(self) -> dict[str, Any]:
        config = {name: getattr(self.config, name) for name in RETRIEVER_DEFAULTS if hasattr(self.config, name)}
        return {**config, "num_results": self.num_results, "doc_vec": self.doc_vec}

    def configure(self, values: Mapping[str, Any]) -> None:
        self.open(values, self)

    def open(self, values: Mapping[str, Any], previous: Retriever | None) -> None:
        """Take ``values`` over ``previous``'s (None: over the defaults), checked, and open what they change: the
        plan and searcher, and the index where its knobs change (``resources``: what a stage over this retriever
        shares, its index and query encoder)."""
        if unknown := sorted(set(values) - set(RETRIEVER_DEFAULTS)):
            raise UserError(
                f"Retriever has no parameter {', '.join(unknown)}; its parameters: "
                f"{', '.join(RETRIEVER_DEFAULTS)} (a rewriter's and a teacher's are a stage's: "
                "retriever >> tour(...))"
            )
        given = {name: RETRIEVER_PARAMS[name].parse(v) if name in RETRIEVER_PARAMS else v for name, v in values.items()}
        if (settings := given.get("encoder_settings")) is not None and not isinstance(settings, EncoderSettings):
            raise UserError(f"encoder_settings takes an EncoderSettings, got {type(settings).__name__}")
        merged = {
            **(previous.parameters() if previous is not None else {}),
            **{name: RETRIEVER_DEFAULTS[name] if v is None else v for name, v in given.items()},
        }
        if merged["index"] is None:
            raise UserError("a Retriever searches an index: give it one (a directory built by tour-pyserini index)")
        num_results, doc_vec = merged.pop("num_results"), merged.pop("doc_vec")
        config = SearchSpec(**merged)
        searcher: Any = None  # TourSearcher or Bm25Searcher; a new one is built once the values are checked
        if previous is not None and config == previous.config:
            planned, resources, searcher = previous.plan, previous.resources, previous.searcher
        else:
            old = previous.config if previous is not None else None
            # the index is opened once; a Faiss knob stays set on an opened index: another knob opens it anew
            same_index = old is not None and (old.index, old.ef_search, old.nprobe) == (
                config.index,
                config.ef_search,
                config.nprobe,
            )
            resources = previous.resources if previous is not None and same_index else Resources()
            planned = plan(config, resources)
        if doc_vec and planned.kind != "dense":
            raise UserError(f"doc_vec: {config.index} is a BM25 index, which holds no document vectors")
        if searcher is None:
            searcher = build(planned).searcher
        self.config, self.plan, self.resources, self.searcher = config, planned, resources, searcher
        self.num_results, self.doc_vec = num_results, doc_vec

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        queries = query_rows(inp, "Retriever")
        qids, texts = queries["qid"].astype(str).tolist(), queries["query"].tolist()
        if not qids:
            return from_retriever(results_frame(queries, [], self.doc_vec), self)
        if not self.dense:
            results = self.searcher.retrieve(texts, qids, self.num_results)
            return from_retriever(results_frame(queries, rankings_of(results)), self)
        if "query_vec" in queries.columns:
            vectors, encoded_by = query_vectors(queries), None
        else:
            vectors, encoded_by = self.searcher.encode(texts), self.searcher.query_encoder
            queries = queries.assign(query_vec=list(vectors))
        if self.doc_vec:  # Pyserini's API with return_vector: each hit with its index vector
            _, found = self.searcher.batch_search(vectors, qids, self.num_results, return_vector=True)
            rankings = [[(h.docid, h.score, h.vectors) for h in found[q]] for q in qids]
        else:
            rankings = rankings_of(
                self.searcher.retrieve_vectors(texts, qids, vectors, self.num_results, encoded_by=encoded_by)
            )
        return from_retriever(results_frame(queries, rankings, self.doc_vec), self)

    def __repr__(self) -> str:
        return f"Retriever({self.config.index!r}, num_results={self.num_results})"


# a stage's own parameters, as the search command's flags
TEACHER = Param("teacher")
TEACHER_MAX_LENGTH = Param("teacher_max_length", positive_int)
TEACHER_PRECISION = Param("teacher_precision", choices=RUNTIME_PRECISIONS)
REWRITER = Param("rewriter")
NUM_RESULTS = Param("num_results", positive_int, flag="--hits")
SCORE_STORE = Param("score_store")


class OverIndex(Parametrised):
    """A stage that searches or scores over a :class:`Retriever`'s index: the one given as ``index=``, else the one
    whose results it reads (the retriever before it in the pipeline: its mark on its results travels through what
    stands between them, as long as that keeps the frame's ``attrs``, as pandas' operations do). Its parameters:
    ``index``, its own (:attr:`own`), ``teacher_options`` and each option the teacher reads by its name (``runtime``,
    ``model``, ...), and a rewriter's options by their names."""

    own: ClassVar[tuple[Param, ...]]
    settings: dict[str, Any]  # index and own values (None: unset), rewriter_options and teacher_options (set ones)

    def __init__(self, **values: Any):
        self.settings = {
            "index": None,
            **{p.name: None for p in self.own},
            "rewriter_options": {},
            "teacher_options": {},
        }
        self.opened_over: dict[str, tuple] = {}  # by retriever: (config, its teacher part, OpenSearch, rewriter)
        self.configure(values)

    def rewriter_options(self, settings: Mapping[str, Any]) -> dict[str, Param]:
        """The options of the stage's rewriter under ``settings``, by name (none for a teacher alone)."""
        return {}

    def check(self, settings: dict[str, Any]) -> Any:
        """Refuse ``settings`` that the search command would refuse, before anything loads; what the check made
        (a rewriter's config)."""

    def search_settings(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        """The fields of :class:`~tour_pyserini.pipeline.SearchSpec` the stage sets over its retriever's."""
        raise NotImplementedError

    def parameters(self) -> dict[str, Any]:
        s = self.settings
        values = {
            "index": s["index"],
            **{p.name: s[p.name] for p in self.own},
            "teacher_options": dict(s["teacher_options"]),
        }
        values.update(self.option_values())
        if s["teacher"]:
            values.update({p.name: s["teacher_options"].get(p.name, p.default) for p in options_read_by(s["teacher"])})
        return values

    def option_values(self) -> dict[str, Any]:
        return {}

    def configure(self, values: Mapping[str, Any]) -> None:
        s = {
            **self.settings,
            "rewriter_options": dict(self.settings["rewriter_options"]),
            "teacher_options": dict(self.settings["teacher_options"]),
        }
        own = {p.name: p for p in self.own}
        for name in ("index", "teacher_options", *own):
            if name in values:
                s[name] = values[name]
        s.update({name: p.parse(s[name]) for name, p in own.items()})
        if s["index"] is not None and not isinstance(s["index"], Retriever):
            raise UserError(f"index= takes a tour_pyserini.pyterrier.Retriever, got {type(s['index']).__name__}")
        if not isinstance(s["teacher_options"] or {}, Mapping):
            raise UserError(f"teacher_options takes a mapping, got {type(s['teacher_options']).__name__}")
        s["teacher_options"] = dict(s["teacher_options"] or {})
        declared, teachers = self.rewriter_options(s), {p.name: p for p in teacher_options()}
        unknown = []
        for name, value in values.items():
            if name in ("index", "teacher_options", *own):
                continue
            target = "rewriter_options" if name in declared else "teacher_options" if name in teachers else None
            if target is None:
                unknown.append(name)
            else:
                s[target][name] = value
        if unknown:
            names = ", ".join(["index", *own, "teacher_options", *declared])
            raise UserError(
                f"option(s) {', '.join(unknown)} do not apply to {self.describe(s)}; its parameters: "
                f"{names} and the teacher's options"
            )
        if stray := sorted(set(s["teacher_options"]) - set(teachers)):
            raise UserError(
                f"teacher_options: {', '.join(stray)} is no teacher's option (they are {', '.join(teachers)})"
            )
        for options, params in (("rewriter_options", declared), ("teacher_options", teachers)):
            s[options] = {n: params[n].parse(v) if n in params else v for n, v in s[options].items() if v is not None}
        if s["teacher"] is not None:
            TeacherSpec.parse(s["teacher"]).teacher_class()  # a kind no teacher has: one line, the teachers listed
        check_teacher_options(s["teacher"], s["teacher_options"])
        rewriter_config = self.check(s)
        if s["index"] is not None:  # opened now, as the search command opens before it searches
            self.open_over(s["index"], s)
        self.settings, self.rewriter_config = s, rewriter_config

    def describe(self, settings: Mapping[str, Any]) -> str:
        return type(self).__name__

    def retriever(self, inp: pd.DataFrame) -> Retriever:
        """The retriever the stage works over: its ``index=``, else the one whose results ``inp`` holds."""
        if self.settings["index"] is not None:
            return self.settings["index"]
        found = RETRIEVERS.get(inp.attrs.get(FROM, ""))
        if found is None:
            raise UserError(
                f"{self!r} works over an index: put it after a Retriever in the pipeline (retriever >> "
                "... >> stage), or give it index=retriever"
            )
        return found

    asks_teacher: ClassVar[bool] = False  # the stage asks its teacher itself (no rewriter asks it)

    def open_over(self, retriever: Retriever, settings: Mapping[str, Any]) -> Pipeline:
        """The stage's pipeline over ``retriever``'s index, built once per retriever and settings; it shares the
        retriever's index and query encoder, and a change of the rewriter's options alone keeps the teacher."""
        spec = dataclasses.replace(retriever.config, **self.search_settings(settings))
        known = self.opened_over.get(retriever.key)
        if known is None or known[0] != spec:
            known = spec, build(plan(spec, retriever.resources, asks_teacher=self.asks_teacher))
            self.opened_over[retriever.key] = known
        return known[1]

    def searching(self, inp: pd.DataFrame) -> tuple[Retriever, Pipeline]:
        """The retriever the input frame ``inp`` came from, and the stage's pipeline over it."""
        retriever = self.retriever(inp)
        return retriever, self.open_over(retriever, self.settings)


class Rewrite(OverIndex):
    """One of the toolkit's rewriters (``tour-soft``, ``tour-hard``, ``rocchio``, ``avg-prf``, ``rerank``,
    ``ttt-embed``, ...) as a transformer: each query of its input (``qid``, ``query`` and, when present, the
    ``query_vec`` it starts from) is rewritten and searched over the whole index, as ``tour-pyserini search
    --rewriter NAME`` does; the input's documents are not read. Output: a result frame of ``num_results`` hits per
    query (default: the retriever's), the input's query columns kept.

    ``options``: the rewriter's parameters by their Python names (``depth`` is ``--depth``, ``prf_depth``, ``lr``,
    ``alpha`` ...; ``tour-pyserini search --help`` lists them), and the teacher's (``runtime`` is
    ``--teacher-runtime``, ...), checked here. ``teacher``: a teacher spec (``bm25``, ``cross-encoder:PATH``, ...)
    for the rewriters that ask one; ``teacher_options`` (by name), ``teacher_max_length``, ``teacher_precision``
    and ``score_store`` as the search command's flags. Each, and ``rewriter``, is a parameter.
    """

    own = (REWRITER, TEACHER, NUM_RESULTS, TEACHER_MAX_LENGTH, TEACHER_PRECISION, SCORE_STORE)

    def __init__(
        self,
        rewriter: str,
        *,
        teacher: str | None = None,
        index: Retriever | None = None,
        num_results: int | None = None,
        teacher_options: Mapping[str, Any] | None = None,
        teacher_max_length: int | None = None,
        teacher_precision: str | None = None,
        score_store: str | None = None,
        **options: Any,
    ):
        super().__init__(
            rewriter=rewriter,
            teacher=teacher,
            index=index,
            num_results=num_results,
            teacher_options=teacher_options,
            teacher_max_length=teacher_max_length,
            teacher_precision=teacher_precision,
            score_store=score_store,
            **options,
        )

    @property
    def rewriter(self) -> str:
        return self.settings["rewriter"]

    @property
    def num_results(self) -> int | None:
        return self.settings["num_results"]

    def rewriter_options(self, settings: Mapping[str, Any]) -> dict[str, Param]:
        return {p.name: p for p in get_rewriter_class(settings["rewriter"]).options}

    def check(self, settings: dict[str, Any]) -> Any:
        return check_rewriter(
            settings["rewriter"], settings["rewriter_options"], teacher=settings["teacher"] is not None
        )[1]

    def option_values(self) -> dict[str, Any]:  # the config's values: None where the default is another's (a preset)
        return {p.name: getattr(self.rewriter_config, p.name) for p in get_rewriter_class(self.rewriter).options}

    def search_settings(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "rewriter": settings["rewriter"],
            "rewriter_options": dict(settings["rewriter_options"]),
            "teacher": settings["teacher"],
            "teacher_options": dict(settings["teacher_options"]),
            "teacher_max_length": settings["teacher_max_length"],
            "teacher_precision": settings["teacher_precision"],
            "score_store": settings["score_store"],
        }

    def describe(self, settings: Mapping[str, Any]) -> str:
        return f"--rewriter {settings['rewriter']}"

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        retriever, pipeline = self.searching(inp)
        searcher, rewriter = pipeline.searcher, pipeline.rewriter
        queries = query_rows(inp, f"rewriter {self.rewriter}")
        qids, texts = queries["qid"].astype(str).tolist(), queries["query"].tolist()
        if not qids:
            return from_retriever(results_frame(queries, []), retriever)
        if "query_vec" in queries.columns:
            vectors, encoded_by = query_vectors(queries), None
        else:
            vectors, encoded_by = searcher.encode(texts), searcher.query_encoder
            queries = queries.assign(query_vec=list(vectors))
        k = self.num_results or retriever.num_results
        results = searcher.retrieve_vectors(texts, qids, vectors, k, rewriter=rewriter, encoded_by=encoded_by)
        return from_retriever(results_frame(queries, rankings_of(results)), retriever)

    def __repr__(self) -> str:
        s = self.settings
        given = {
            **({"num_results": s["num_results"]} if s["num_results"] else {}),
            **s["rewriter_options"],
            **s["teacher_options"],
        }
        options = "".join(f", {k}={v!r}" for k, v in given.items())
        teacher = f", teacher={s['teacher']!r}" if s["teacher"] else ""
        return f"Rewrite({self.rewriter!r}{teacher}{options})"


class TeacherReranker(OverIndex):
    """A teacher (``bm25``, ``cross-encoder:PATH``, ``monot5:PATH``, ``ensemble:FILE``, ...) as a PyTerrier re-ranker:
    each document of the input's results (``qid``, ``query``, ``docno``) gets the teacher's score of (query, its
    text from the index's docstore) as ``score``, and each query's documents are sorted by it (ties keep the input's
    order; pairs the teacher could not score are NaN, ranked last), ``rank`` recomputed. Settings (and parameters)
    as :class:`Rewrite`'s teacher's.
    """

    own = (TEACHER, TEACHER_MAX_LENGTH, TEACHER_PRECISION)
    asks_teacher = True

    def __init__(
        self,
        teacher: str,
        *,
        index: Retriever | None = None,
        teacher_options: Mapping[str, Any] | None = None,
        teacher_max_length: int | None = None,
        teacher_precision: str | None = None,
        **options: Any,
    ):
        super().__init__(
            teacher=teacher,
            index=index,
            teacher_options=teacher_options,
            teacher_max_length=teacher_max_length,
            teacher_precision=teacher_precision,
            **options,
        )

    @property
    def teacher(self) -> str:
        return self.settings["teacher"]

    def check(self, settings: dict[str, Any]) -> None:
        if settings["teacher"] is None:
            raise UserError("TeacherReranker needs a teacher (a spec such as bm25 or cross-encoder:PATH)")
        return None

    def search_settings(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "rewriter": "none",
            "rewriter_options": {},
            "teacher": settings["teacher"],
            "teacher_options": dict(settings["teacher_options"]),
            "teacher_max_length": settings["teacher_max_length"],
            "teacher_precision": settings["teacher_precision"],
            "score_store": None,
        }

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        retriever, pipeline = self.searching(inp)
        missing = [c for c in ("qid", "query", "docno") if c not in inp.columns]
        if missing:
            raise UserError(
                f"teacher {self.teacher} re-ranks a result frame (qid, query, docno); this one lacks "
                f"{', '.join(missing)}"
            )
        groups = [group for _, group in inp.groupby("qid", sort=False)]
        if not groups:
            out = inp.assign(score=pd.Series(dtype=np.float64), rank=pd.Series(dtype=np.int64))
            return from_retriever(out, retriever)
        qids = [str(g["qid"].iloc[0]) for g in groups]
        cache = ScoreCache(pipeline.asked_teacher, pipeline.searcher.docstore)
        texts = [g["query"].iloc[0] for g in groups]
        scores = cache.score(qids, texts, [g["docno"].astype(str).tolist() for g in groups], [Trace() for _ in groups])
        ranked = [
            g.assign(score=np.asarray(s, dtype=np.float64)).sort_values(
                "score", ascending=False, kind="stable", na_position="last"
            )
            for g, s in zip(groups, scores)
        ]
        ranked = [g.assign(score=ranked_scores(g["score"])) for g in ranked]
        out = pd.concat(ranked, ignore_index=True)
        out["rank"] = np.concatenate([np.arange(len(g)) for g in ranked])
        return from_retriever(out, retriever)

    def __repr__(self) -> str:
        return f"TeacherReranker({self.teacher!r})"


def tour(teacher: str, *, hard: bool = False, **options: Any) -> Rewrite:
    """TOUR (``tour-soft``; ``tour-hard`` with ``hard=True``) with ``teacher``: ``tour(teacher="bm25", depth=20)``."""
    return Rewrite("tour-hard" if hard else "tour-soft", teacher=teacher, **options)


def rocchio(**options: Any) -> Rewrite:
    """Rocchio PRF on dense vectors, as Pyserini's: ``rocchio(prf_depth=5, topk=3, bottomk=1)``."""
    return Rewrite("rocchio", **options)


def average_prf(**options: Any) -> Rewrite:
    """Average PRF on dense vectors, as Pyserini's: ``average_prf(prf_depth=3)``."""
    return Rewrite("avg-prf", **options)


def rerank(teacher: str, **options: Any) -> Rewrite:
    """Re-ranking the retriever's top ``depth`` by ``teacher`` (optionally mixed with the retriever, ``lam``)."""
    return Rewrite("rerank", teacher=teacher, **options)


def ttt_embed(state: str | Path, task: str | None = None, **options: Any) -> Rewrite:
    """Searching with a TTT-Embed state (``tour-pyserini ttt fit``): each query it covers moved to unit(x + α v)."""
    return Rewrite("ttt-embed", state=str(state), task=task, **options)
