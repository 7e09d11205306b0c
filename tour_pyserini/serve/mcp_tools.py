"""The server's searches as MCP tools (fastmcp), named as Pyserini 2.x's MCP server names them: ``search``,
``get_document``, ``list_indexes``; served over streamable HTTP under ``/mcp/`` by the same process.

A tool answers what the REST route answers; a refused request is a tool error with the same one line.
"""

from __future__ import annotations

from tour_pyserini.serve.access import ANONYMOUS
from tour_pyserini.serve.requests import BadRequest
from tour_pyserini.serve.service import ClientGone, Overloaded, QuotaExceeded, SearchService


def caller() -> dict:
    """Who calls the tool: the client the access check left in the HTTP request's state."""
    from fastmcp.server.dependencies import get_http_request

    state = get_http_request().state
    return {"client": getattr(state, "client", ANONYMOUS), "keyed": getattr(state, "keyed", False)}


def mcp_server(service: SearchService):
    from fastmcp import FastMCP
    from fastmcp.exceptions import ToolError

    mcp = FastMCP("tour-pyserini")

    async def answer(call):
        try:
            return await call
        except (BadRequest, Overloaded, QuotaExceeded, ClientGone) as e:
            raise ToolError(str(e) or "the client closed the connection") from None
        except TimeoutError:
            raise ToolError("the search did not finish within the server's timeout") from None

    @mcp.tool()
    async def search(query: str, index: str, hits: int = 10, rewriter: str = "", teacher: str = "",
                     k: int = 0) -> dict:  # fmt: skip
        """Search one of the server's indexes (list_indexes names them); returns the top ``hits`` candidates
        with docid, score, rank and document, as Pyserini's REST route does.

        Args:
            query: the query text
            index: index name, from list_indexes
            hits: number of results (default 10)
            rewriter: "" for the server's default; "tour-soft" or "tour-hard" to optimise the query vector at test
                time with the teacher's judgments (TOUR), "rerank", "rocchio", ... (list_indexes names them)
            teacher: one of the server's teachers (list_indexes names them), for rewriters that ask one
            k: candidates the teacher judges per iteration (0: the rewriter's default)
        """
        params = {"query": query, "hits": str(hits)}
        params |= {name: value for name, value in (("rewriter", rewriter), ("teacher", teacher)) if value}
        if k:
            params["k"] = str(k)
        return await answer(service.search(index, params, **caller()))

    @mcp.tool()
    async def get_document(docid: str, index: str) -> dict:
        """The full text of a document by its docid, from one of the server's indexes."""
        return await answer(service.document(index, docid))

    @mcp.tool()
    def list_indexes() -> list[dict]:
        """The indexes this server searches: name, kind (dense or bm25), documents, teachers and rewriters."""
        return service.indexes()["indexes"]

    return mcp
