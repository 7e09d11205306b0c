"""tour-pyserini serve: search indexes over HTTP (Pyserini 2.x's /v1 routes) and MCP, with query rewriters,
and optionally learn a TTT-Embed state online from the judgments a budget buys.

Routes: GET /v1/{index}/search?query=...&hits=10[&rewriter=tour-soft&teacher=bm25&depth=20], GET
/v1/{index}/doc/{docid}, GET /v1/indexes, GET /v1/status; the explorer page at /explore; OpenAPI at /docs and
/openapi.json; MCP (streamable HTTP) at /mcp/. An index is named by its directory's base name (or by its name in
--config). With keys (--api-keys, or api_keys in --config) every route but the page and the API's description
needs one, as X-API-Key: KEY or Authorization: Bearer KEY; an address other than loopback needs keys, or
--public. SIGTERM or Ctrl-C stops taking requests, finishes those in flight, and exits.
"""

from __future__ import annotations

import argparse
import logging
import socket
from dataclasses import replace
from pathlib import Path

from tour_pyserini.commands.flags import (
    ArgumentParser,
    add_encoder_runtime_flags,
    add_param_flags,
    add_teacher_flags,
    config_from_flags,
    teacher_flags,
)
from tour_pyserini.errors import UserError
from tour_pyserini.numbers import Number, mass, positive_float, positive_int
from tour_pyserini.serve.access import AccessConfig
from tour_pyserini.serve.engine import ServeConfig
from tour_pyserini.serve.requests import RequestLimits
from tour_pyserini.serve.service import ServiceLimits
from tour_pyserini.ttt.allocation import JUDGE_DEPTH, MAX_DEPTH
from tour_pyserini.ttt.magnitude import CROSS_VALIDATED
from tour_pyserini.ttt.state import SCOPES

log = logging.getLogger(__name__)

port_number = Number(int, "in [0, 65535]", lambda v: 0 <= v <= 65535)

MAX_REQUEST_BYTES = 4 * 1024 * 1024  # a request line this long still reaches the app, which refuses it in one line


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(
        prog="tour-pyserini serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--index",
        action="append",
        default=[],
        metavar="DIR",
        help="an index built by `index` (dense or BM25); repeat for more",
    )
    ap.add_argument(
        "--config",
        metavar="FILE",
        help="Pyserini's YAML server config: 'indexes' (name: directory) "
        "served beside --index, 'api_keys' accepted beside --api-keys",
    )
    ap.add_argument(
        "--teacher",
        action="append",
        default=[],
        metavar="SPEC",
        help="a teacher requests may name (teacher=SPEC): bm25, ensemble:FILE, cross-encoder:PATH, ...; "
        "repeat for more. The first one judges for --budget",
    )
    ap.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; another needs keys, or --public)",
    )
    ap.add_argument("--port", type=port_number, default=8000, help="port (0: a free one; the address is printed)")
    add_access_flags(ap.add_argument_group("who may use the server"))
    ap.add_argument(
        "--data-dir",
        default="serve-data",
        metavar="DIR",
        help="where the teachers' score stores "
        "(scores/) and online learning's states and rewards (learn/) are kept across restarts",
    )
    ap.add_argument("--state", metavar="FILE", help="a TTT-Embed state (ttt fit) that rewriter=ttt-embed searches with")
    add_policy_flags(ap.add_argument_group("the server's policy and online TTT-Embed"))
    ap.add_argument("--qrels", help="relevance judgments: the explorer marks relevant documents of --topics queries")
    ap.add_argument("--topics", help="example queries the explorer offers (their qids find --qrels)")
    ap.add_argument(
        "--threads",
        type=positive_int,
        help="torch threads (encoder, cross-encoder teacher); default: torch's own, as the search command",
    )
    ap.add_argument("--device", default="cpu", help="where the encoder and a cross-encoder teacher run")
    add_param_flags(ap.add_argument_group("queueing and batching"), ServiceLimits)
    ap.add_argument("--no-mcp", action="store_true", help="serve no MCP tools")
    add_encoder_runtime_flags(ap.add_argument_group("query encoder (of every dense index)"))
    add_teacher_flags(ap)
    return ap


def add_access_flags(access) -> None:
    """Keys, hosts, origins, rates, the request log and the most work one request may ask."""
    access.add_argument(
        "--api-keys",
        metavar="FILE",
        help="accepted API keys, one a line (at least 16 characters); "
        "requests send one as X-API-Key: KEY or Authorization: Bearer KEY",
    )
    access.add_argument(
        "--public",
        action="store_true",
        help="serve an address other than loopback without keys, "
        "on purpose: anyone who reaches it can search and read the indexes",
    )
    access.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="a name clients reach the server by (the Host header); IP addresses, and localhost "
        "on loopback, always are",
    )
    access.add_argument(
        "--proxy",
        action="append",
        default=[],
        metavar="ADDRESS",
        help="a reverse proxy in front of the server: requests from its address are of the client its "
        "X-Forwarded-For names (for rates and the log); none by default, so no header chooses a client's address",
    )
    access.add_argument(
        "--cors",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="a web origin whose pages may call the server (e.g. https://course.example.org); none by default",
    )
    add_param_flags(access, AccessConfig)
    add_param_flags(access, RequestLimits)


def add_policy_flags(ap) -> None:
    """The budget the server's policy spends, online TTT-Embed's learning and the data directory's bound."""
    ap.add_argument(
        "--budget",
        type=positive_float,
        metavar="B",
        help="teacher judgments per served query: requests "
        "naming no rewriter follow the server's policy, the first --teacher judging and re-ranking the "
        "top candidates of the share of queries the budget pays for",
    )
    ap.add_argument(
        "--learn",
        choices=SCOPES,
        metavar="SCOPE",
        help="with --budget: keep the judgments of keyed clients' queries and refit a TTT-Embed state of "
        f"this scope ({', '.join(SCOPES)}) in the background, which moves every later query the policy "
        "serves; a state is served only if it agrees with the teacher on held-back judged queries at "
        "least as well as the one before",
    )
    ap.add_argument(
        "--learn-from-anonymous",
        action="store_true",
        help="with --learn: also learn from clients without a key (all of them one client), on purpose",
    )
    ap.add_argument(
        "--max-key-share",
        type=mass,
        default=ServeConfig.max_key_share,
        metavar="F",
        help="with --learn: the most of a refit's queries one client may give (default "
        f"{ServeConfig.max_key_share}: five clients at least; 1: no cap)",
    )
    ap.add_argument(
        "--alpha-rule",
        choices=CROSS_VALIDATED,
        default=ServeConfig.alpha_rule,
        help="with --learn: how a task, global or neighbours state's alpha is chosen by cross-validation over the "
        "rewarded queries, and so whether it is served at all: ranking (default), by held-out rewarded queries' "
        "re-searched top 10, a document no teacher judged gaining nothing; cv, by their agreement with the teacher "
        "on their judged candidates alone, which does not see the documents a move brings in",
    )
    ap.add_argument(
        "--max-data-mb",
        type=positive_float,
        metavar="MB",
        help="disk the data directory may use; past it no query is judged (requests naming a teacher "
        "get 507) (default: no limit)",
    )
    for flag, option in (("--judge-depth", JUDGE_DEPTH), ("--max-depth", MAX_DEPTH)):
        ap.add_argument(flag, type=option.type, default=option.default, help=option.described)
    ap.add_argument(
        "--refit-steps",
        type=positive_int,
        default=ServeConfig.refit_steps,
        help=f"Adam steps of a warm-started refit ({ServeConfig.refit_steps}; the first fit takes 300, as ttt fit)",
    )


def serve_config(args: argparse.Namespace, access: AccessConfig):
    """The server's :class:`ServeConfig`, checked: everything that can be refused before any model loads. Each
    index is planned as the search command plans its index (the same encoder and teacher flags); learning
    trusts the clients of ``access``'s keys."""
    from tour_pyserini.pipeline import Resources, SearchSpec, plan_index, plan_teachers
    from tour_pyserini.serve.access import fingerprint, read_server_config

    configured = read_server_config(args.config)[0] if args.config else {}
    paths = [*args.index, *configured.values()]
    if not paths:
        raise UserError("give an index to serve: --index DIR, or 'indexes' in --config")
    for path in paths:
        if not Path(path).is_dir():
            raise UserError(f"--index {path}: no such directory")
    base = SearchSpec(
        index="",
        encoder_precision=args.encoder_precision,
        encoder_runtime=args.encoder_runtime,
        teacher_max_length=args.teacher_max_length,
        teacher_precision=args.teacher_precision,
        teacher_options=teacher_flags(args),
        threads=args.threads,
        device=args.device,
    )
    teachers = plan_teachers(args.teacher, base)
    if args.learn and args.budget is None:
        raise UserError("--learn learns from the judgments --budget pays for: give --budget")
    if args.learn_from_anonymous and not args.learn:
        raise UserError("--learn-from-anonymous says whom --learn learns from: give --learn")
    if args.budget is not None and not args.teacher:
        raise UserError("--budget spends the first --teacher's judgments: give --teacher")
    if args.judge_depth > args.max_depth:
        raise UserError(f"--judge-depth {args.judge_depth} is larger than --max-depth {args.max_depth}")
    if args.state:
        from tour_pyserini.ttt.state import State

        State.load(args.state)
    if args.qrels and not args.topics:
        raise UserError("--qrels marks the relevant documents of --topics queries: give --topics")
    resources = Resources()  # what one index's pipelines open is what every index's pipelines and teachers read
    plans = tuple(plan_index(replace(base, index=path), resources) for path in paths)
    return ServeConfig(
        plans=plans,
        names={path: name for name, path in configured.items()},
        teachers=teachers,
        data_dir=args.data_dir,
        state=args.state,
        budget=args.budget,
        learn=args.learn,
        judge_depth=args.judge_depth,
        max_depth=args.max_depth,
        refit_steps=args.refit_steps,
        learn_from_anonymous=args.learn_from_anonymous,
        max_key_share=args.max_key_share,
        alpha_rule=args.alpha_rule,
        keyed_clients=frozenset(map(fingerprint, access.keys)),
        max_data_mb=args.max_data_mb,
    )


def access_config(args: argparse.Namespace) -> AccessConfig:
    """Keys, hosts, origins, rate and log, checked: a non-loopback address without keys is refused unless
    --public says it on purpose."""
    from tour_pyserini.files.staging import open_writable
    from tour_pyserini.serve.access import host_rule, is_loopback, read_api_keys, read_server_config

    keys = [
        *(read_api_keys(args.api_keys) if args.api_keys else []),
        *(read_server_config(args.config)[1] if args.config else []),
    ]
    if not keys and not is_loopback(args.host):
        if not args.public:
            raise UserError(
                f"--host {args.host} is reachable from other machines: give --api-keys FILE (or "
                "api_keys in --config), or --public to serve everyone on purpose"
            )
        log.warning(
            "serving %s without API keys (--public): anyone who reaches it can search, read the indexes "
            "and spend the teachers' judgments",
            args.host,
        )
    for origin in args.cors:
        if not origin.startswith(("http://", "https://")) or origin.count("/") != 2:
            raise UserError(f"--cors {origin}: give a web origin, as http(s)://name[:port] without a path")
    if args.request_log:
        open_writable(Path(args.request_log), "--request-log").close()
    return config_from_flags(
        AccessConfig, args, keys=tuple(keys), hosts=host_rule(args.host, args.allowed_host), cors=tuple(args.cors)
    )


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
    access = access_config(args)  # first: a key file that holds no key is refused before anything else is read
    config = serve_config(args, access)
    from tour_pyserini.files.staging import open_locked
    from tour_pyserini.serve.service import SearchService

    limits, requests = config_from_flags(ServiceLimits, args), config_from_flags(RequestLimits, args)
    relevance = topics = None
    if args.topics:
        from tour_pyserini.files import read_qrels, read_topics

        topics = read_topics(args.topics)
        relevance = read_qrels(args.qrels) if args.qrels else None
    try:
        Path(config.data_dir).mkdir(parents=True, exist_ok=True)
    except OSError as e:  # a file of that name, a read-only parent
        raise UserError(f"--data-dir {config.data_dir}: cannot use it as a directory ({e.strerror})") from None
    # one server per data directory: two would write the same state versions and logs; the kernel frees the lock
    # of a killed server
    lock = open_locked(
        Path(config.data_dir) / "serve.lock", "--data-dir", holder="another server uses this data directory"
    )
    sock = listening_socket(args.host, args.port)
    service = SearchService(config, limits, requests=requests, relevance=relevance, topics=topics)
    try:
        service.start()
        serve(service, sock, mcp=not args.no_mcp, timeout=limits.timeout, access=access, proxies=args.proxy)
    finally:
        service.close()
        sock.close()
        lock.close()


def serve(service, sock: socket.socket, *, mcp: bool, timeout: float, access: AccessConfig, proxies: list[str]) -> None:
    import uvicorn

    from tour_pyserini.serve.app import create_app
    from tour_pyserini.serve.connections import BoundedH11Protocol

    app = create_app(service, mcp=mcp, access=access)
    sock.listen(2048)
    host, port = sock.getsockname()[:2]
    print(f"serving on http://{f'[{host}]' if ':' in host else host}:{port}", flush=True)
    config = uvicorn.Config(
        app,
        log_level="warning",
        timeout_graceful_shutdown=int(timeout) + 5,
        h11_max_incomplete_event_size=MAX_REQUEST_BYTES,
        http=BoundedH11Protocol,
        log_config=None,
        # a client's address is the connection's unless it came through a --proxy, whose X-Forwarded-For names it:
        # rates are per address, and a header any local process can send must not choose it
        proxy_headers=bool(proxies),
        forwarded_allow_ips=",".join(proxies) or None,
    )
    uvicorn.Server(config).run(sockets=[sock])
