"""The server's searches as MCP tools (fastmcp), named and with arguments as Pyserini 2.x's MCP server has them:
``search``, ``get_document``, ``list_indexes``, ``get_index``, ``fuse_search_results``, ``get_qrels`` and
``eval_hits``; served over streamable HTTP under ``/mcp/`` by the same process.

A tool answers what the REST route answers; a refused request, and an argument of the wrong type, is a tool
error of one line.
"""

from __future__ import annotations

from typing import Any

from tour_pyserini.serve.access import ANONYMOUS
from tour_pyserini.serve.requests import BadRequest
from tour_pyserini.serve.service import ClientGone, Overloaded, QuotaExceeded, SearchService

# Pyserini's eval_hits metrics (trec_eval's ndcg_cut, recall, map and recip_rank at the cutoff) as ir-measures names
EVAL_METRICS = {"ndcg": "nDCG@{}", "recall": "R@{}", "map": "AP@{}", "recip_rank": "RR@{}"}
MAX_CUTOFF = 10_000
# Pyserini's index types, as list_indexes takes them, and ours
INDEX_TYPES = {"faiss": "dense", "tf": "bm25", "dense": "dense", "bm25": "bm25"}


def caller() -> dict:
    """Who calls the tool (the client the access check left in the HTTP request's state), and how to tell that it
    has disconnected, so that its search stops at its next step as a REST search does."""
    from fastmcp.server.dependencies import get_http_request

    request = get_http_request()
    return {"client": getattr(request.state, "client", ANONYMOUS), "gone": request.is_disconnected}


def one_line_arguments():
    """fastmcp middleware: an argument that does not validate is one line naming it (not pydantic's report)."""
    from fastmcp.exceptions import ToolError, ValidationError
    from fastmcp.server.middleware import Middleware

    class OneLine(Middleware):
        async def on_call_tool(self, context, call_next):
            try:
                return await call_next(context)
            except ValidationError as e:
                errors = e.__cause__.errors() if hasattr(e.__cause__, "errors") else []
                if not errors:
                    raise ToolError(str(e).splitlines()[0]) from None
                where = ".".join(str(p) for p in errors[0].get("loc", ()))
                raise ToolError(f"argument {where!r}: {errors[0].get('msg', 'invalid')}") from None

    return OneLine()


def mcp_server(service: SearchService):
    from fastmcp import FastMCP

    mcp = FastMCP("tour-pyserini")
    mcp.add_middleware(one_line_arguments())

    add_search(mcp, service)
    add_lookups(mcp, service)
    return mcp


async def answer(call):
    """The service's answer, or its refusal as a tool error of one line."""
    from fastmcp.exceptions import ToolError

    try:
        return await call
    except (BadRequest, Overloaded, QuotaExceeded, ClientGone) as e:
        raise ToolError(str(e) or "the client closed the connection") from None
    except TimeoutError:
        raise ToolError("the search did not finish within the server's timeout") from None


def checked(call, *args):
    """``call(*args)``, a refusal raised as a tool error of one line."""
    from fastmcp.exceptions import ToolError

    try:
        return call(*args)
    except BadRequest as e:
        raise ToolError(str(e)) from None


def add_search(mcp, service: SearchService) -> None:
    """Pyserini's ``search`` tool, with the rewriters and their options."""
    from fastmcp.exceptions import ToolError

    @mcp.tool()
    async def search(
        query: str,
        index: str,
        hits: int = 10,
        parse: bool = True,
        rewriter: str = "",
        teacher: str = "",
        depth: int = 0,
        k1: float | None = None,
        b: float | None = None,
        max_doc_length: int | None = None,
        k: int = 0,
        options: dict[str, str | int | float | bool] | None = None,
    ) -> dict:
        """Search one of the server's indexes (list_indexes names them); returns the top ``hits`` candidates
        with docid, score, rank and document, as Pyserini's REST route does.

        Args:
            query: the query text
            index: index name, from list_indexes
            hits: number of results (default 10)
            parse: true: each document's title and text; false: the document as stored (one JSON string)
            rewriter: "" for the server's default; "tour-soft" or "tour-hard" to optimise the query vector at test
                time with the teacher's judgments (TOUR), "rerank", "rocchio", ... (list_indexes names them)
            teacher: one of the server's teachers (list_indexes names them), for rewriters that ask one
            depth: candidates the teacher judges per iteration (0: the rewriter's default)
            k1: BM25's k1 for this search (BM25 indexes only)
            b: BM25's b for this search (BM25 indexes only)
            max_doc_length: each document's text cut to this many characters
            k: the old name of depth (it will be removed in the next release)
            options: the rewriter's other options by their REST names, e.g. {"iterations": 2, "lr": 0.5}
        """
        optional = {
            "rewriter": rewriter,
            "teacher": teacher,
            "depth": depth or None,
            "k": k or None,
            "k1": k1,
            "b": b,
            "max_doc_length": max_doc_length,
        }
        params = {"query": query, "hits": str(hits), "parse": str(parse).lower()}
        params |= {name: str(value) for name, value in optional.items() if value not in ("", None)}
        for name, value in (options or {}).items():
            if name in params or name in ("query", "index", "hits", "parse", "qid", "trace"):
                raise ToolError(f"argument 'options': {name[:40]!r} is an argument of its own, not a rewriter option")
            params[name] = str(value).lower() if isinstance(value, bool) else str(value)
        return await answer(service.search(index, params, **caller()))


def add_lookups(mcp, service: SearchService) -> None:
    """Pyserini's other tools: documents, indexes, fusion, qrels and evaluation."""
    from fastmcp.exceptions import ToolError

    @mcp.tool()
    async def get_document(docid: str, index: str, parse: bool = True) -> dict:
        """The full text of a document by its docid, from one of the server's indexes (parse: false gives the
        document as stored, one JSON string)."""
        return await answer(service.document(index, docid, {"parse": str(parse).lower()}))

    @mcp.tool()
    def list_indexes(index_type: str = "") -> list[dict]:
        """The indexes this server searches: name, kind (dense or bm25), documents, teachers and rewriters;
        index_type ("dense" or "bm25"; Pyserini's "faiss" and "tf" too) keeps those of one kind."""
        if index_type and index_type not in INDEX_TYPES:
            raise ToolError(f"index_type must be one of {', '.join(INDEX_TYPES)}, got {index_type[:40]!r}")
        found = service.indexes()["indexes"]
        return [i for i in found if not index_type or i["kind"] == INDEX_TYPES[index_type]]

    @mcp.tool()
    def get_index(index_name: str) -> dict[str, Any]:
        """What list_indexes says of one index: kind, documents, teachers, rewriters, the policy."""
        return checked(service.index_info, index_name)

    @mcp.tool()
    def fuse_search_results(hits1: list[dict[str, Any]], hits2: list[dict[str, Any]], k: int = 10) -> list[dict]:
        """Fuse two result lists (each [{"docid": ..., "score": ...}], as search returns candidates) by Pyserini's
        normalised average: each list's scores centred and divided by their range, a missing document taking
        its list's lowest score, the two added; the top k, best first."""
        return checked(service.fuse, hits1, hits2, k)

    @mcp.tool()
    def get_qrels(index_name: str, query_id: str) -> dict[str, int]:
        """The relevance judgments of one query ({docid: grade}), from the qrels the server was started with."""
        return checked(service.qrels_of, index_name, query_id)

    @mcp.tool()
    def eval_hits(index_name: str, metric: str, query_id: str, hits: dict[str, float], cutoff: int = 10) -> float:
        """One query's hits ({docid: score}) scored against the server's qrels: metric ndcg, recall, map or
        recip_rank at the cutoff (trec_eval's ndcg_cut, recall, map and recip_rank, as Pyserini's tool)."""
        if metric not in EVAL_METRICS:
            raise ToolError(f"metric must be one of {', '.join(EVAL_METRICS)}, got {metric[:40]!r}")
        if not 1 <= cutoff <= MAX_CUTOFF:  # trec_eval's code aborts the process on a cutoff of 0
            raise ToolError(f"cutoff must be in [1, {MAX_CUTOFF}], got {cutoff}")
        return checked(service.eval_hits, index_name, EVAL_METRICS[metric].format(cutoff), query_id, hits)
