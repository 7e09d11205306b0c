"""tour-pyserini serve: search indexes over HTTP (Pyserini 2.x's /v1 routes) and MCP, with query rewriters,
and optionally learn a TTT-Embed state online from the judgments a budget buys.

Routes: GET /v1/{index}/search?query=...&hits=10[&rewriter=tour-soft&teacher=bm25&k=20], GET
/v1/{index}/doc/{docid}, GET /v1/indexes, GET /v1/status; the explorer page at /explore; OpenAPI at /docs and
/openapi.json; MCP (streamable HTTP) at /mcp/. An index is named by its directory's base name. SIGTERM or
Ctrl-C stops taking requests, finishes those in flight, and exits.
"""

from __future__ import annotations

import argparse
import socket
from pathlib import Path

from tour_pyserini.commands.flags import ArgumentParser, add_encoder_runtime_flags, add_teacher_flags
from tour_pyserini.errors import UserError
from tour_pyserini.numbers import non_negative_float, non_negative_int, positive_float, positive_int
from tour_pyserini.ttt.state import SCOPES

MAX_REQUEST_BYTES = 4 * 1024 * 1024  # a request line this long still reaches the app, which refuses it in one line


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(prog="tour-pyserini serve", description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--index", required=True, action="append", metavar="DIR",
                    help="an index built by `index` (dense or BM25); repeat for more")  # fmt: skip
    ap.add_argument("--teacher", action="append", default=[], metavar="SPEC",
                    help="a teacher requests may name (teacher=SPEC): bm25, ensemble:FILE, cross-encoder:PATH, ...; "
                    "repeat for more. The first one judges for --budget")  # fmt: skip
    ap.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    ap.add_argument("--port", type=non_negative_int, default=8000, help="port (0: a free one; the address is printed)")
    ap.add_argument("--data-dir", default="serve-data", metavar="DIR", help="where the teachers' score stores "
                    "(scores/) and online learning's states and rewards (learn/) are kept across restarts")  # fmt: skip
    ap.add_argument("--state", metavar="FILE", help="a TTT-Embed state (ttt fit) that rewriter=ttt-embed searches with")
    ap.add_argument("--budget", type=positive_float, metavar="B", help="teacher judgments per served query: requests "
                    "naming no rewriter follow the server's policy, the first --teacher judging and re-ranking the "
                    "top candidates of the share of queries the budget pays for")  # fmt: skip
    ap.add_argument("--learn", choices=SCOPES, metavar="SCOPE", help="with --budget: keep those judgments and refit a "
                    f"TTT-Embed state of this scope ({', '.join(SCOPES)}) in the background, which moves every later "
                    "query the policy serves")  # fmt: skip
    ap.add_argument("--judge-depth", type=positive_int, default=10, help="judgments per judged query (10)")
    ap.add_argument("--max-depth", type=positive_int, default=100, help="most judgments one query can get (100)")
    ap.add_argument("--refit-steps", type=positive_int, default=100, help="Adam steps of a warm-started refit (100; "
                    "the first fit takes 300, as ttt fit)")  # fmt: skip
    ap.add_argument("--qrels", help="relevance judgments: the explorer marks relevant documents of --topics queries")
    ap.add_argument("--topics", help="example queries the explorer offers (their qids find --qrels)")
    ap.add_argument("--threads", type=positive_int, help="torch threads (encoder, cross-encoder teacher); default: "
                    "torch's own, as the search command")  # fmt: skip
    ap.add_argument("--device", default="cpu", help="where the encoder and a cross-encoder teacher run")
    ap.add_argument("--batch-window", type=non_negative_float, default=0.005, metavar="SECONDS",
                    help="how long the first waiting request waits for others to batch with (0.005)")  # fmt: skip
    ap.add_argument("--max-batch", type=positive_int, default=64, help="requests searched together at most (64)")
    ap.add_argument("--max-queue", type=positive_int, default=256, help="requests waiting at most; more get 503 (256)")
    ap.add_argument("--timeout", type=positive_float, default=60.0, metavar="SECONDS",
                    help="a request not answered by then gets 504 (60)")  # fmt: skip
    ap.add_argument("--no-mcp", action="store_true", help="serve no MCP tools")
    add_encoder_runtime_flags(ap.add_argument_group("query encoder (of every dense index)"))
    add_teacher_flags(ap)
    return ap


def serve_config(args: argparse.Namespace):
    """The server's :class:`ServeConfig`, checked: everything that can be refused before any model loads."""
    from tour_pyserini.devices import check_device
    from tour_pyserini.encoders.exported import check_exportable
    from tour_pyserini.encoders.query import resolve_query_precision
    from tour_pyserini.index.layout import index_kind
    from tour_pyserini.index.query_side import query_encoder_spec
    from tour_pyserini.serve.engine import ServeConfig
    from tour_pyserini.teachers import available_teachers, check_teacher_options

    encoders = {}
    for path in args.index:
        if not Path(path).is_dir():
            raise UserError(f"--index {path}: no such directory")
        if index_kind(path) == "dense":
            encoders[path] = query_encoder_spec(path)
            check_exportable(encoders[path], args.encoder_runtime)
    for spec in args.teacher:
        if spec.partition(":")[0] not in available_teachers():
            raise UserError(f"--teacher {spec}: unknown teacher; choose one of: {', '.join(available_teachers())}")
        check_teacher_options(spec, teacher_option_values(args))
    if args.learn and args.budget is None:
        raise UserError("--learn learns from the judgments --budget pays for: give --budget")
    if args.budget is not None and not args.teacher:
        raise UserError("--budget spends the first --teacher's judgments: give --teacher")
    if args.judge_depth > args.max_depth:
        raise UserError(f"--judge-depth {args.judge_depth} is larger than --max-depth {args.max_depth}")
    if args.state:
        from tour_pyserini.ttt.state import State

        State.load(args.state)
    if args.qrels and not args.topics:
        raise UserError("--qrels marks the relevant documents of --topics queries: give --topics")
    check_device(args.device)
    return ServeConfig(indexes=tuple(args.index), teachers=tuple(args.teacher), data_dir=args.data_dir,
                       state=args.state, budget=args.budget, learn=args.learn, judge_depth=args.judge_depth,
                       max_depth=args.max_depth, refit_steps=args.refit_steps, threads=args.threads,
                       device=args.device, teacher_options=teacher_option_values(args),
                       encoder_precision=resolve_query_precision(args.encoder_precision, args.device,
                                                                 args.encoder_runtime),
                       encoder_runtime=args.encoder_runtime, encoders=encoders)  # fmt: skip


def teacher_option_values(args: argparse.Namespace) -> dict:
    from tour_pyserini.teachers import teacher_options

    return {o.name: getattr(args, o.dest) for o in teacher_options() if getattr(args, o.dest, None) is not None}


def listening_socket(host: str, port: int) -> socket.socket:
    """Bound before any model loads, so a port in use is one line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise UserError(f"cannot listen on {host}:{port} ({e.strerror})") from None
    return sock


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    config = serve_config(args)
    from tour_pyserini.serve.service import SearchService, ServiceLimits

    limits = ServiceLimits(window=args.batch_window, max_batch=args.max_batch, max_queue=args.max_queue,
                           timeout=args.timeout)  # fmt: skip
    relevance = topics = None
    if args.topics:
        from tour_pyserini.files import read_qrels, read_topics

        topics = read_topics(args.topics)
        relevance = read_qrels(args.qrels) if args.qrels else None
    sock = listening_socket(args.host, args.port)
    service = SearchService(config, limits, relevance=relevance, topics=topics)
    try:
        service.start()
        serve(service, sock, mcp=not args.no_mcp, timeout=args.timeout)
    finally:
        service.close()
        sock.close()


def serve(service, sock: socket.socket, *, mcp: bool, timeout: float) -> None:
    import uvicorn

    from tour_pyserini.serve.app import create_app

    app = create_app(service, mcp=mcp)
    sock.listen(2048)
    host, port = sock.getsockname()[:2]
    print(f"serving on http://{f'[{host}]' if ':' in host else host}:{port}", flush=True)
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=int(timeout) + 5,
                            h11_max_incomplete_event_size=MAX_REQUEST_BYTES)  # fmt: skip
    uvicorn.Server(config).run(sockets=[sock])
