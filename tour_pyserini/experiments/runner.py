"""Running an experiment's rows: each collection's topics encoded once, each method assembled by the composition
root and searched from those vectors in batches, its per-query values kept, each row stored as it finishes.

A row stored by an earlier run of the same searches (same flags, queries, hits, batch size and repeats) is reused,
so an interrupted experiment resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.files.declarations import shown
from tour_pyserini.files.experiments import NO_TEACHER, Cell, Experiment, ExperimentCollection
from tour_pyserini.pipeline import Resources, SearchSpec, build, plan

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Search:
    """What a cell's flags mean: the search system, whether a document whose id is the query's is dropped, and the
    queries the search command would search together."""

    spec: SearchSpec
    remove_query: bool
    batch_size: int


SearchOf = Callable[[tuple[str, ...], str], Search]  # (flags, index) -> the search they mean


class RowStore:
    """Rows as JSON lines (``PATH``), each with the fingerprint of the searches that made it; a row whose
    fingerprint is another's is measured again. A last line cut short (the run was killed as it wrote) is dropped."""

    def __init__(self, path: Path):
        self.path = path
        self.rows: dict[str, dict] = {}
        if not path.exists():
            return
        lines = path.read_text().splitlines(keepends=True)
        for i, line in enumerate(lines):
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                if i < len(lines) - 1:
                    raise UserError(
                        f"{path}:{i + 1}: not a stored row (remove the file, or run with --fresh)"
                    ) from None
                log.warning("%s: its last row was cut short as it was written; it is measured again", path)
                path.write_text("".join(lines[:i]))
                break
            self.rows[row["fingerprint"]] = row

    def get(self, fingerprint: str) -> dict | None:
        return self.rows.get(fingerprint)

    def add(self, row: dict) -> None:
        self.rows[row["fingerprint"]] = row
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")


def fingerprint(cell: Cell, qids: Sequence[str], hits: int, batch_size: int, repeats: int) -> str:
    """What makes a row: its cell, its searches' flags, its queries, hits, batch size and timed passes."""
    made = json.dumps([cell.key, cell.flags, cell.fit, list(qids), hits, batch_size, repeats])
    return hashlib.sha256(made.encode()).hexdigest()


def split_judge(qrels, metrics: Sequence[str], topics: Sequence, docstore):
    """The judge of a split's runs over ``topics``: its ``qrels``' metrics, or where it has none, DPR's top-k
    accuracy (``Acc@k`` among ``metrics``) of the answer strings the topics hold, found in ``docstore``'s passages."""
    if qrels is not None:
        from tour_pyserini.eval import QrelsJudge

        return QrelsJudge(qrels, metrics, qids=[t.qid for t in topics])
    from tour_pyserini.eval.answers import AnswerJudge, AnswerMatcher

    ks = [int(m.removeprefix("Acc@")) for m in metrics]
    return AnswerJudge(list(topics), AnswerMatcher(docstore), ks)


class CollectionRun:
    """One collection's judged test topics, encoded once; each cell searched from the same vectors."""

    def __init__(self, experiment: Experiment, col: ExperimentCollection, search_of: SearchOf, limit: int | None):
        from tour_pyserini.files import read_qrels, read_topics

        self.experiment, self.col, self.search_of = experiment, col, search_of
        self.resources = Resources()  # every method's pipeline shares the index, the query encoder and the teacher
        files = col.collection.split(experiment.split)
        qrels = read_qrels(files.qrels) if files.qrels else None
        self.topics = [t for t in read_topics(files.topics) if qrels is None or t.qid in qrels][:limit]
        self.texts, self.qids = [t.text for t in self.topics], [t.qid for t in self.topics]
        self.searcher = self.pipeline(experiment.search + col.search).searcher
        self.vectors = self.searcher.encode(self.texts)
        self.judge = split_judge(qrels, self.col.metrics, self.topics, self.searcher.docstore)

    def pipeline(self, flags: tuple[str, ...]):
        search = self.search_of(flags, self.col.index)
        return build(plan(search.spec, self.resources))

    def passes(self, rewriter, repeats: int) -> tuple[list, float]:
        """The results of every topic with ``rewriter`` (DART carrying its buffer in topic order), and the median
        pass's seconds (each pass starts the run afresh, so all give the same results)."""
        times, size, hits = [], self.experiment.batch_size, self.experiment.hits
        for _ in range(repeats):
            rewriter.start_run()
            start, results = time.perf_counter(), []
            for i in range(0, len(self.topics), size):
                at = slice(i, i + size)
                results += self.searcher.retrieve_vectors(
                    self.texts[at], self.qids[at], self.vectors[at], hits, rewriter=rewriter
                )
            times.append(time.perf_counter() - start)
        return results, float(np.median(times))

    def warm_up(self, flags: tuple[str, ...]) -> None:
        """One untimed pass: the first pass also pays for Faiss's and the JVM's warm-up (page cache, JIT) and loads
        the teacher, which would otherwise be charged to whichever method ran first."""
        self.passes(self.pipeline(flags).rewriter, 1)

    def run(self, cell: Cell, repeats: int) -> dict:
        if cell.fit is not None:
            from tour_pyserini.ttt.pipeline import fitted_per_query

            spec = self.search_of(cell.flags, self.col.index).spec
            teacher = build(plan(spec, self.resources, asks_teacher=True)).asked_teacher
            depth, k = cell.budget or self.experiment.hits, self.experiment.hits
            start = time.perf_counter()
            results = fitted_per_query(
                self.searcher, teacher, cell.collection, self.qids, self.texts, self.vectors, depth, k, cell.fit
            )
            return self.record(cell, results, time.perf_counter() - start, False)
        search = self.search_of(cell.flags, self.col.index)
        results, seconds = self.passes(build(plan(search.spec, self.resources)).rewriter, repeats)
        return self.record(cell, results, seconds, search.remove_query)

    def record(self, cell: Cell, results, seconds: float, remove_query: bool) -> dict:
        run = {r.qid: {h.docid: h.score for h in r.hits if not (remove_query and h.docid == r.qid)} for r in results}
        per_query = self.judge.per_query(run)
        return {
            "collection": cell.collection,
            "method": cell.method,
            "teacher": cell.teacher,
            "budget": cell.budget,
            "metrics": {m: float(np.mean(list(v.values()))) for m, v in per_query.items()},
            "ms_per_query": 1000 * seconds / len(results),
            "teacher_calls_per_query": sum(r.trace.teacher_calls for r in results) / len(results),
            "command": row_command(self.experiment, cell),
            "per_query": per_query,
        }


def row_command(experiment: Experiment, cell: Cell) -> str:
    """The search command that writes the run of ``cell`` (a fitted state has none: the experiment's)."""
    if cell.fit is not None:
        return f"tour-pyserini experiment {experiment.name}"
    col = experiment.collections[cell.collection]
    topics = shown(col.collection.split(experiment.split).topics)
    flags = " ".join(shlex.quote(f) for f in ("--hits", str(experiment.hits), *cell.flags))
    output = f"runs/{experiment.name}/{cell.collection}.trec"
    return f"python -m tour_pyserini.search --index {col.index} --topics {topics} {flags} --output {output}"


def run_experiment(
    experiment: Experiment,
    cells: dict[str, list[Cell]],
    search_of: SearchOf,
    store: RowStore,
    *,
    limit: int | None = None,
    repeats: int = 1,
) -> list[dict]:
    """The rows of ``cells`` (by collection), measured or reused from ``store``, in order, with a progress bar."""
    from tqdm import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    rows: list[dict] = []
    bar = tqdm(total=sum(map(len, cells.values())), desc=experiment.name, unit="row")
    with bar, logging_redirect_tqdm([logging.getLogger("tour_pyserini")]):  # each row's line above the bar
        for name, mine in cells.items():
            rows += run_collection(experiment, name, mine, search_of, store, bar, limit, repeats)
    return rows


def run_collection(
    experiment: Experiment,
    name: str,
    cells: list[Cell],
    search_of: SearchOf,
    store: RowStore,
    bar,
    limit: int | None,
    repeats: int,
) -> list[dict]:
    """The rows of one collection; plain search and each teacher are warmed up only where a row is measured."""
    col = experiment.collections[name]
    run, warmed, rows = None, False, []
    teachers_warmed: set[str] = set()
    for cell in cells:
        bar.set_postfix_str(f"{name} {cell.method} {cell.teacher.split(':')[0]} {cell.budget or ''}".strip())
        if run is None:
            run = CollectionRun(experiment, col, search_of, limit)
        key = fingerprint(cell, run.qids, experiment.hits, experiment.batch_size, repeats)
        row = store.get(key)
        if row is None:
            if not warmed:
                run.warm_up(experiment.search + col.search)
                warmed = True
            if cell.teacher != NO_TEACHER and cell.teacher not in teachers_warmed and experiment.warm_up:
                run.warm_up(experiment.warm_up_flags(name, cell.teacher))
                teachers_warmed.add(cell.teacher)
            row = {**run.run(cell, repeats), "fingerprint": key}
            store.add(row)
        log.info(row_line(row))
        rows.append(row)
        bar.update()
    return rows


def row_line(row: dict) -> str:
    return (
        f"{row['collection']:9s} {row['method']:10s} {row['teacher'][:28]:28s} {row['budget'] or '-':>4} "
        + " ".join(f"{m} {v:.4f}" for m, v in row["metrics"].items())
        + f"  {row['ms_per_query']:8.1f} ms/q {row['teacher_calls_per_query']:6.1f} calls/q"
    )
