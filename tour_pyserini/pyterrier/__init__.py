"""PyTerrier transformers over the toolkit's searchers, rewriters and teachers (docs/pyterrier.md).

``pip install 'tour-pyserini[pyterrier]'``. Frames are PyTerrier's: queries in (``qid``, ``query``), results out
(the query columns, ``docno``, ``score``, ``rank`` from 0), dense ones with ``query_vec`` as pyterrier-dr names it::

    retriever = Retriever("indexes/scifact.minilm")
    pipeline = retriever >> tour(teacher="bm25", depth=20)

:class:`Retriever` searches an index built by ``tour-pyserini index``; :class:`Rewrite` (``tour``, ``rocchio``,
``average_prf``, ``rerank``, ``ttt_embed``) runs one of the rewriters over that index for each query of its input;
:class:`TeacherReranker` scores the input's documents with a teacher. Each is opened by the same planner as the
search command (:mod:`tour_pyserini.search.configure`), so a pipeline ranks as the command does. Nothing here
starts PyTerrier's own JVM: Pyserini's (through pyjnius) is the process's one, and the transformers are pure Python
around it; ``pt.Experiment`` needs no Java either.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tour_pyserini.errors import UserError

try:  # the optional extra: importing this module is what asks for it
    import pandas as pd
    import pyterrier as pt
except ImportError:
    raise UserError("tour_pyserini.pyterrier needs PyTerrier: pip install 'tour-pyserini[pyterrier]'") from None

from tour_pyserini.encoders.query import QueryEncoders
from tour_pyserini.files import read_topics
from tour_pyserini.files.runs import strictly_decreasing
from tour_pyserini.results import SearchResult, Trace
from tour_pyserini.rewriters import check_rewriter
from tour_pyserini.search.api import check_k
from tour_pyserini.search.configure import SearchConfig, open_search, plan_search
from tour_pyserini.teachers import ScoreCache

__all__ = ["Retriever", "Rewrite", "TeacherReranker", "average_prf", "rerank", "rocchio", "topics_frame", "tour",
           "ttt_embed"]  # fmt: skip


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


class Retriever(pt.Transformer):
    """Search an index built by ``tour-pyserini index`` (dense, or BM25 through Lucene) for each query of a frame.

    Input: ``qid`` and ``query`` (other query columns are kept); on a dense index, a ``query_vec`` column, when the
    input has one (an earlier stage's, e.g. pyterrier-dr's ``VectorPrf``), is searched instead of encoding
    ``query``. Output: the query columns with ``query_vec`` (dense), ``docno``, ``score``, ``rank``, and with
    ``doc_vec=True`` each hit's index vector (what pyterrier-dr's ``VectorPrf`` and ``AveragePrf`` read).
    ``num_results``: hits per query. ``config``: the other fields of
    :class:`~tour_pyserini.search.configure.SearchConfig` (``encoder``, ``device``, ``threads``, ``ef_search``,
    ``nprobe``, ``encoder_precision``, ``encoder_runtime``, ``encoded_queries``, ...), as the search command's flags.

    A :class:`Rewrite` or :class:`TeacherReranker` right after it (``retriever >> rocchio()``) searches or scores
    over the same index, sharing its opened index and query encoder.
    """

    def __init__(self, index: str | Path, *, num_results: int = 1000, doc_vec: bool = False, **config: Any):
        if pt.java.started():  # pyjnius starts one JVM per process, and Terrier's lacks Anserini's classes
            raise UserError("PyTerrier's JVM (Terrier) already runs in this process, and Pyserini's cannot start "
                            "beside it: run Terrier's Java transformers in another process")  # fmt: skip
        self.config = SearchConfig(index=str(index), **config)
        self.num_results = check_k(num_results)
        plan = plan_search(self.config)
        self.dense = plan.kind == "dense"
        if doc_vec and not self.dense:
            raise UserError(f"doc_vec: {index} is a BM25 index, which holds no document vectors")
        self.doc_vec = doc_vec
        self.opened = plan.opened  # what a stage bound to this retriever shares: the index, opened once
        self.encoders = QueryEncoders()  # and the query encoder, loaded once
        self.searcher = open_search(plan, self.encoders).searcher

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        queries = query_rows(inp, "Retriever")
        qids, texts = queries["qid"].astype(str).tolist(), queries["query"].tolist()
        if not qids:
            return results_frame(queries, [], self.doc_vec)
        if not self.dense:
            return results_frame(queries, rankings_of(self.searcher.retrieve(texts, qids, self.num_results)))
        if "query_vec" in queries.columns:
            vectors, encoded_by = query_vectors(queries), None
        else:
            vectors, encoded_by = self.searcher.encode(texts), self.searcher.query_encoder
            queries = queries.assign(query_vec=list(vectors))
        if self.doc_vec:  # Pyserini's API with return_vector: each hit with its index vector
            _, found = self.searcher.batch_search(vectors, qids, self.num_results, return_vector=True)
            rankings = [[(h.docid, h.score, h.vectors) for h in found[q]] for q in qids]
        else:
            rankings = rankings_of(self.searcher.retrieve_vectors(texts, qids, vectors, self.num_results,
                                                                  encoded_by=encoded_by))  # fmt: skip
        return results_frame(queries, rankings, self.doc_vec)

    def __rshift__(self, right):
        if isinstance(right, OverIndex) and right.index is None:  # the stage searches or scores over this index
            right = right.over(self)
        return super().__rshift__(right)

    def __repr__(self) -> str:
        return f"Retriever({self.config.index!r}, num_results={self.num_results})"


class OverIndex(pt.Transformer):
    """A stage that searches or scores over a :class:`Retriever`'s index: given one as ``index=``, or bound to
    the retriever it follows in ``retriever >> stage``."""

    index: Retriever | None = None
    opened: Any = None  # the planner's OpenSearch over the index: a searcher with the stage's rewriter, a teacher
    settings: dict  # the SearchConfig fields of the stage, over the retriever's own

    def over(self, retriever: Retriever) -> OverIndex:
        """This stage opened over ``retriever``'s index (a copy: the unbound stage may be bound elsewhere too)."""
        bound = copy.copy(self)
        bound.open_over(retriever)
        return bound

    def open_over(self, retriever: Retriever) -> None:
        """Open the stage's rewriter or teacher over ``retriever``'s index, sharing its index and query encoder."""
        if not isinstance(retriever, Retriever):
            raise UserError(f"index= takes a tour_pyserini.pyterrier.Retriever, got {type(retriever).__name__}")
        config = dataclasses.replace(retriever.config, **self.settings)
        self.opened = open_search(plan_search(config, retriever.opened), retriever.encoders)
        self.index = retriever

    def bound(self) -> Retriever:
        if self.index is None:
            raise UserError(f"{self!r} works over an index: put it right after a Retriever (retriever >> stage) or "
                            "give it index=retriever")  # fmt: skip
        return self.index


class Rewrite(OverIndex):
    """One of the toolkit's rewriters (``tour-soft``, ``tour-hard``, ``rocchio``, ``avg-prf``, ``rerank``,
    ``ttt-embed``, ...) as a transformer: each query of its input (``qid``, ``query`` and, when present, the
    ``query_vec`` it starts from) is rewritten and searched over the whole index, as ``tour-pyserini search
    --rewriter NAME`` does; the input's documents are not read. Output: a result frame of ``num_results`` hits per
    query (default: the retriever's), the input's query columns kept.

    ``options``: the rewriter's parameters by their Python names (``depth`` is ``--depth``, ``prf_depth``, ``lr``,
    ``alpha`` ...; ``tour-pyserini search --help`` lists them), checked here. ``teacher``: a teacher spec
    (``bm25``, ``cross-encoder:PATH``, ...) for the rewriters that ask one; ``teacher_options`` (by name),
    ``teacher_max_length``, ``teacher_precision`` and ``score_store`` as the search command's flags.
    """

    def __init__(self, rewriter: str, *, teacher: str | None = None, index: Retriever | None = None,
                 num_results: int | None = None, teacher_options: Mapping[str, Any] | None = None,
                 teacher_max_length: int | None = None, teacher_precision: str | None = None,
                 score_store: str | None = None, **options: Any):  # fmt: skip
        check_rewriter(rewriter, options, teacher=teacher is not None)  # before any model loads
        self.rewriter = rewriter
        self.num_results = None if num_results is None else check_k(num_results)
        self.settings = {"rewriter": rewriter, "rewriter_options": dict(options), "teacher": teacher,
                         "teacher_options": dict(teacher_options or {}), "teacher_max_length": teacher_max_length,
                         "teacher_precision": teacher_precision, "score_store": score_store}  # fmt: skip
        if index is not None:
            self.open_over(index)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        retriever = self.bound()
        searcher = self.opened.searcher
        queries = query_rows(inp, f"rewriter {self.rewriter}")
        qids, texts = queries["qid"].astype(str).tolist(), queries["query"].tolist()
        if not qids:
            return results_frame(queries, [])
        if "query_vec" in queries.columns:
            vectors, encoded_by = query_vectors(queries), None
        else:
            vectors, encoded_by = searcher.encode(texts), searcher.query_encoder
            queries = queries.assign(query_vec=list(vectors))
        k = self.num_results or retriever.num_results
        results = searcher.retrieve_vectors(texts, qids, vectors, k, encoded_by=encoded_by)
        return results_frame(queries, rankings_of(results))

    def __repr__(self) -> str:
        options = ", ".join(f"{k}={v!r}" for k, v in self.settings["rewriter_options"].items())
        teacher = f", teacher={self.settings['teacher']!r}" if self.settings["teacher"] else ""
        return f"Rewrite({self.rewriter!r}{teacher}{', ' + options if options else ''})"


class TeacherReranker(OverIndex):
    """A teacher (``bm25``, ``cross-encoder:PATH``, ``monot5:PATH``, ``ensemble:FILE``, ...) as a PyTerrier re-ranker:
    each document of the input's results (``qid``, ``query``, ``docno``) gets the teacher's score of (query, its
    text from the index's docstore) as ``score``, and each query's documents are sorted by it (ties keep the input's
    order; pairs the teacher could not score are NaN, ranked last), ``rank`` recomputed. Settings as :class:`Rewrite`'s.
    """

    def __init__(self, teacher: str, *, index: Retriever | None = None,
                 teacher_options: Mapping[str, Any] | None = None, teacher_max_length: int | None = None,
                 teacher_precision: str | None = None):  # fmt: skip
        self.teacher = teacher
        # no rewriter: the planner opens the teacher for its caller to ask
        self.settings = {"rewriter": None, "rewriter_options": {}, "teacher": teacher,
                         "teacher_options": dict(teacher_options or {}), "teacher_max_length": teacher_max_length,
                         "teacher_precision": teacher_precision, "score_store": None}  # fmt: skip
        if index is not None:
            self.open_over(index)

    def transform(self, inp: pd.DataFrame) -> pd.DataFrame:
        self.bound()
        missing = [c for c in ("qid", "query", "docno") if c not in inp.columns]
        if missing:
            raise UserError(f"teacher {self.teacher} re-ranks a result frame (qid, query, docno); this one lacks "
                            f"{', '.join(missing)}")  # fmt: skip
        groups = [group for _, group in inp.groupby("qid", sort=False)]
        if not groups:
            return inp.assign(score=pd.Series(dtype=np.float64), rank=pd.Series(dtype=np.int64))
        qids = [str(g["qid"].iloc[0]) for g in groups]
        cache = ScoreCache(self.opened.teacher, self.opened.searcher.docstore)
        texts = [g["query"].iloc[0] for g in groups]
        scores = cache.score(qids, texts, [g["docno"].astype(str).tolist() for g in groups], [Trace() for _ in groups])
        ranked = [g.assign(score=np.asarray(s, dtype=np.float64))
                  .sort_values("score", ascending=False, kind="stable", na_position="last")
                  for g, s in zip(groups, scores)]  # fmt: skip
        ranked = [g.assign(score=ranked_scores(g["score"])) for g in ranked]
        out = pd.concat(ranked, ignore_index=True)
        out["rank"] = np.concatenate([np.arange(len(g)) for g in ranked])
        return out

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
