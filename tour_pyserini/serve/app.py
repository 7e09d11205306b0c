"""The HTTP app: Pyserini 2.x's ``/v1`` routes, ``/v1/indexes`` and ``/v1/status``, the explorer page, the
OpenAPI description (``/openapi.json``, and ``/docs`` rendered here, with nothing fetched from elsewhere), and
the MCP tools under ``/mcp``.

Every refusal is one JSON line ``{"error": "..."}`` with a 4xx status; a bug is a 500 with one line too (its
traceback goes to the server's log, never to the client).
"""

from __future__ import annotations

import html
import logging
from contextlib import asynccontextmanager
from importlib import resources
from urllib.parse import unquote_to_bytes

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException

from tour_pyserini.serve.access import ANONYMOUS, STATIC_NAME, Access, AccessConfig, Keys, error
from tour_pyserini.serve.requests import BadRequest, check_utf8
from tour_pyserini.serve.service import RETRY_AFTER_SECONDS, ClientGone, Overloaded, QuotaExceeded, SearchService

log = logging.getLogger(__name__)

STATIC = resources.files("tour_pyserini.serve") / "static"


class Utf8Only:
    """ASGI middleware: a path or query string whose percent-encoded bytes are not UTF-8 is a 400."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            try:
                unquote_to_bytes(scope.get("raw_path") or b"").decode("utf-8")
                check_utf8(scope.get("query_string", b""))
            except (UnicodeDecodeError, BadRequest) as e:
                message = str(e) if isinstance(e, BadRequest) else "the path is not valid UTF-8"
                await error(400, message)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def add_error_handlers(app: FastAPI, keys: Keys) -> None:
    @app.exception_handler(BadRequest)
    async def bad_request(request, e: BadRequest):
        return error(e.status, str(e))

    @app.exception_handler(Overloaded)
    async def overloaded(request, e: Overloaded):
        return error(503, str(e), {"Retry-After": str(RETRY_AFTER_SECONDS)})

    @app.exception_handler(TimeoutError)
    async def timed_out(request, e: TimeoutError):
        return error(504, "the search did not finish within the server's timeout")

    @app.exception_handler(QuotaExceeded)
    async def over_quota(request, e: QuotaExceeded):
        return error(429, str(e), {"Retry-After": str(e.retry_after)})

    @app.exception_handler(ClientGone)
    async def client_gone(request, e: ClientGone):
        return error(499, "the client closed the connection; its search was stopped")

    @app.exception_handler(RequestValidationError)
    async def invalid(request, e: RequestValidationError):
        first = e.errors()[0] if e.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p not in ("query", "path"))
        return error(400, f"parameter {where!r}: {first.get('msg', 'invalid')}")

    @app.exception_handler(HTTPException)
    async def http_error(request, e: HTTPException):
        return error(e.status_code, str(e.detail))

    @app.exception_handler(Exception)
    async def bug(request, e: Exception):
        log.exception("internal error on %s", keys.logged(request.url.path))  # the server's log, as the request log
        return error(500, f"internal error ({type(e).__name__}); the server's log has the details")


def docs_page(spec: dict) -> str:
    """The OpenAPI description as one plain page: each route, its summary and parameters."""
    rows = []
    for path, methods in spec.get("paths", {}).items():
        for method, op in methods.items():
            params = ", ".join(f"<code>{html.escape(p['name'])}</code>" for p in op.get("parameters", []))
            rows.append(
                f"<tr><td><code>{method.upper()} {html.escape(path)}</code></td>"
                f"<td>{html.escape(op.get('summary', ''))}</td><td>{params}</td></tr>"
            )
    return (
        f"<!doctype html><meta charset=utf-8><title>{html.escape(spec['info']['title'])}</title>"
        "<style>body{font:14px sans-serif;margin:2em}td{padding:4px 8px;border-bottom:1px solid #ddd}</style>"
        f"<h1>{html.escape(spec['info']['title'])}</h1><p>Machine-readable: <a href=/openapi.json>/openapi.json"
        f"</a>. Explorer: <a href=/explore>/explore</a>.</p><table>{''.join(rows)}</table>"
    )


def caller(request: Request) -> dict:
    """Who sent ``request`` (set by :class:`~tour_pyserini.serve.access.Access`), and how to tell it has gone."""
    return {"client": getattr(request.state, "client", ANONYMOUS)}


def create_app(service: SearchService, *, mcp: bool = True, access: AccessConfig | None = None):
    """The FastAPI app around a started ``service``; it closes the service when it shuts down. ``access``: keys,
    hosts, origins, rate and request log (:mod:`tour_pyserini.serve.access`; by default loopback, no keys)."""
    mcp_app = None
    if mcp:
        from tour_pyserini.serve.mcp_tools import mcp_server

        mcp_app = mcp_server(service).http_app(path="/", stateless_http=True, json_response=True)

    @asynccontextmanager
    async def lifespan(app):
        if mcp_app is not None:
            async with mcp_app.lifespan(app):
                yield
        else:
            yield
        service.close()  # uvicorn has stopped taking requests and finished those in flight

    app = FastAPI(
        title="tour-pyserini",
        version="v1",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
        description="Pyserini's REST routes with test-time query optimisation (TOUR, TTT-Embed)",
    )
    access = access or AccessConfig()
    add_error_handlers(app, Keys(access.keys))
    app.add_middleware(Utf8Only)
    if access.cors:  # inside the access checks: a preflight passes the Host and Origin checks and is logged
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(access.cors),
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["X-API-Key", "Authorization", "Content-Type", "Mcp-Session-Id", "Mcp-Protocol-Version"],
        )
    app.add_middleware(Access, config=access)  # outermost: every request is checked and logged first

    add_page_routes(app)
    add_data_routes(app, service)
    if mcp_app is not None:
        app.mount("/mcp", mcp_app)
    return app


def add_page_routes(app: FastAPI) -> None:
    """The explorer page, its scripts and the API's description: what is served without a key."""

    @app.get("/", include_in_schema=False)
    async def root():
        return RedirectResponse("/explore")

    @app.get("/docs", include_in_schema=False)
    async def docs():
        return HTMLResponse(docs_page(app.openapi()))

    @app.get("/explore", include_in_schema=False)
    async def explore():
        return HTMLResponse((STATIC / "explorer.html").read_text(encoding="utf-8"))

    @app.get("/static/{name}", include_in_schema=False)
    async def static(name: str):
        kinds = {"js": "text/javascript", "css": "text/css"}
        # the name is checked before the file system is asked: a long one would be an OSError
        if not STATIC_NAME.fullmatch(name) or name.rpartition(".")[2] not in kinds or not (STATIC / name).is_file():
            raise BadRequest(f"no static file {name[:100]!r}", 404)
        return Response((STATIC / name).read_bytes(), media_type=kinds[name.rpartition(".")[2]])


def add_data_routes(app: FastAPI, service: SearchService) -> None:
    """Pyserini's ``/v1`` routes, the listings and the explorer's data."""

    @app.get("/v1/indexes", summary="The indexes served, their kinds, sizes, teachers and rewriters")
    async def indexes():
        return service.indexes()

    @app.get("/v1/status", summary="Queue, batches, the budget spent, and online learning's state version")
    async def status():
        return service.status()

    @app.get("/v1/topics", summary="The example queries the server was started with (--topics)")
    async def topics():
        return {"api": "v1", "topics": [{"qid": t.qid, "text": t.text} for t in service.topics]}

    @app.get("/v1/{index}/search", summary="Search an index (Pyserini's route), optionally with a query rewriter")
    async def search(
        request: Request,
        index: str,
        query: str | None = None,
        hits: str | None = None,
        parse: str | None = None,
        rewriter: str | None = None,
        teacher: str | None = None,
        depth: str | None = None,
        qid: str | None = None,
        trace: str | None = None,
    ):
        return await service.search(index, dict(request.query_params), **caller(request), gone=request.is_disconnected)

    # {docid:path}: a docid may hold "/", sent as %2F (which the server decodes, as Pyserini's does)
    @app.get("/v1/{index}/doc/{docid:path}", summary="A document by its docid (Pyserini's route)")
    async def document(request: Request, index: str, docid: str, parse: str | None = None):
        return await service.document(index, docid, dict(request.query_params))

    @app.get("/v1/{index}/explain", summary="TOUR's iterations on one query, for the explorer page")
    async def explain(request: Request, index: str, query: str | None = None):
        return await service.explain(index, dict(request.query_params), **caller(request), gone=request.is_disconnected)
