"""The composition root: the one place a search system (index, query encoder, rewriter, teacher, score store) is
assembled, whichever face asks for it: the command line, the server (REST and MCP), the Python API, the PyTerrier
transformers, the commands that search to train, and the benchmarks.

``spec`` (what is wanted, :class:`SearchSpec`) -> :func:`plan` (every check, once, before anything loads) ->
:func:`build` (every object made, once per process through :class:`Resources`) -> :meth:`Pipeline.run`::

    from tour_pyserini.pipeline import SearchSpec, build, plan

    pipeline = build(plan(SearchSpec("indexes/scifact.minilm", rewriter="tour-soft", teacher="bm25")))
    results = pipeline.run(["vitamin D and bone density"], ["q1"], k=10)
"""

from __future__ import annotations

from tour_pyserini.pipeline.build import Pipeline, TeacherInfo, build, build_teacher
from tour_pyserini.pipeline.plan import Plan, plan, plan_index, plan_teachers
from tour_pyserini.pipeline.resources import Resources
from tour_pyserini.pipeline.spec import SearchSpec

__all__ = [
    "Pipeline",
    "Plan",
    "Resources",
    "SearchSpec",
    "TeacherInfo",
    "build",
    "build_teacher",
    "plan",
    "plan_index",
    "plan_teachers",
]
