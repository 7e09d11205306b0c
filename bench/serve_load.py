"""Load and faults of `tour-pyserini serve`, on 127.0.0.1 only, with bounded request loops.

Load: N clients (threads, each with its own connection per request) send a fixed number of distinct SciFact
claims each to a fresh server (fresh score stores: every teacher judgment is paid for) and the run records
throughput, p50/p99 latency and errors for dense search, TOUR (tour-soft, k 20) with the BM25 teacher, and
TOUR with the shipped ensemble teacher; with ``--max-batch 1`` beside the default for comparison (no batching
across clients).

Faults: a server learning online (--learn task --budget 5, BM25 teacher) is killed with SIGKILL while 8
clients load it, then restarted on the same data directory: every state version on disk must load, the
rewards log must parse (a torn last line is cut at the restart), the score store must pass SQLite's
integrity check, the index files must hash as before, and the restarted server must serve from the newest
complete version (or the next, refitted from it).

Writes runs/bench-serve-load.json. Usage: python bench/serve_load.py [--clients 1 4 16] [--requests 24]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from common import split_files

from tour_pyserini.files import read_topics
from tour_pyserini.ttt.state import State

INDEX = "indexes/scifact.minilm"
CONFIGS = {
    "dense": {},
    "tour-soft-bm25": {"rewriter": "tour-soft", "teacher": "bm25", "depth": "20"},
    "tour-soft-ensemble": {
        "rewriter": "tour-soft",
        "teacher": "ensemble:models/scifact-rce/ensemble.json",
        "depth": "20",
    },
}
TEACHERS = ["bm25", "ensemble:models/scifact-rce/ensemble.json"]
OUT = Path("runs/bench-serve-load.json")
WORK = Path("runs/serve-load")


def start(args: list[str], log: Path) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "tour_pyserini", "serve", "--port", "0", "--no-mcp", *args],
        stdout=subprocess.PIPE,
        stderr=open(log, "w"),
        text=True,
        env=env,
    )
    line = process.stdout.readline()
    if not line.startswith("serving on "):
        process.kill()
        raise RuntimeError(f"server did not start: {line!r}; see {log}")
    return process, line.split()[-1]


def request(url: str, headers: dict | None = None) -> tuple[int, float, dict | None]:
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=600) as response:
            body = json.loads(response.read())
            return response.status, time.perf_counter() - start, body
    except urllib.error.HTTPError as e:
        e.read()
        return e.code, time.perf_counter() - start, None
    except (urllib.error.URLError, ConnectionError):
        return 0, time.perf_counter() - start, None


def load(url: str, texts: list[str], params: dict, clients: int, headers: dict | None = None) -> dict:
    """``clients`` threads share ``texts`` (one request each); throughput, latency percentiles, errors."""
    urls = [
        f"{url}/v1/scifact.minilm/search?" + urllib.parse.urlencode({"query": t, "hits": 10, **params}) for t in texts
    ]
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        answers = list(pool.map(lambda u: request(u, headers), urls))
    wall = time.perf_counter() - start
    latencies = np.array([seconds for status, seconds, _ in answers if status == 200])
    return {
        "clients": clients,
        "requests": len(urls),
        "errors": sum(status != 200 for status, _, _ in answers),
        "seconds": round(wall, 3),
        "throughput_rps": round(len(urls) / wall, 2),
        "p50_ms": round(float(np.percentile(latencies, 50)) * 1000, 1) if len(latencies) else None,
        "p99_ms": round(float(np.percentile(latencies, 99)) * 1000, 1) if len(latencies) else None,
    }


def load_experiment(args: argparse.Namespace, texts: list[str]) -> list[dict]:
    rows = []
    for config in args.configs:
        params = CONFIGS[config]
        for max_batch in (64, 1):
            data = WORK / f"{config}.batch{max_batch}"
            subprocess.run(["rm", "-rf", str(data)], check=True)
            data.mkdir(parents=True)
            server_args = [
                "--index",
                INDEX,
                "--data-dir",
                str(data),
                "--threads",
                str(args.threads),
                "--max-batch",
                str(max_batch),
                *sum((["--teacher", t] for t in TEACHERS), []),
            ]
            process, url = start(server_args, data / "server.log")
            try:
                request(f"{url}/v1/scifact.minilm/search?query=warm+up&hits=10")  # models loaded and warm
                offset = 0
                for clients in args.clients:
                    batch = texts[offset : offset + clients * args.requests]  # distinct claims: nothing cached
                    offset += len(batch)
                    row = {
                        "config": config,
                        "max_batch": max_batch,
                        **load(url, batch, params, clients),
                        "command": f"tour-pyserini serve {' '.join(server_args)}",
                        "params": params,
                        "bench_command": "python bench/serve_load.py " + " ".join(sys.argv[1:]),
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            finally:
                process.terminate()
                process.wait(120)
    return rows


def access_experiment(args: argparse.Namespace, texts: list[str]) -> list[dict]:
    """The cost of the access checks: two servers at once, one open (loopback, no keys) and one with keys, a
    request log and a rate limit no client reaches; the same claims sent to each in turn, the order of the arms
    alternating round by round."""
    data = WORK / "access"
    subprocess.run(["rm", "-rf", str(data)], check=True)
    data.mkdir(parents=True)
    key = "load-bench-key-0123456789abcdef"
    (data / "api-keys.txt").write_text(key + "\n")
    common = ["--index", INDEX, "--threads", str(args.threads), "--teacher", "bm25"]
    arms = {
        "open": ([], None),
        "keys": (
            [
                "--api-keys",
                str(data / "api-keys.txt"),
                "--request-log",
                str(data / "requests.jsonl"),
                "--requests-per-minute",
                "100000",
            ],
            {"X-API-Key": key},
        ),
    }
    servers = {
        arm: start([*common, "--data-dir", str(data / arm), *extra], data / f"{arm}.log")
        for arm, (extra, _) in arms.items()
    }
    rows, offset = [], 0
    try:
        for arm, (_, url) in servers.items():
            request(f"{url}/v1/scifact.minilm/search?query=warm+up&hits=10", arms[arm][1])
        for config in ("dense", "tour-soft-bm25"):
            for clients in args.clients:
                for round_ in range(args.rounds):
                    batch = texts[offset : offset + clients * args.requests]  # the same claims for both arms
                    offset += len(batch)
                    for arm in list(arms)[:: 1 if round_ % 2 == 0 else -1]:
                        row = {
                            "config": config,
                            "access": arm,
                            "round": round_,
                            **load(servers[arm][1], batch, CONFIGS[config], clients, arms[arm][1]),
                            "command": f"tour-pyserini serve {' '.join([*common, *arms[arm][0]])}",
                            "bench_command": "python bench/serve_load.py " + " ".join(sys.argv[1:]),
                        }
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait(120)
    return rows


def sha256_of(directory: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def kill_experiment(args: argparse.Namespace, texts: list[str]) -> dict:
    data = WORK / "kill9"
    subprocess.run(["rm", "-rf", str(data)], check=True)
    data.mkdir(parents=True)
    before = sha256_of(Path(INDEX))
    server_args = [
        "--index",
        INDEX,
        "--teacher",
        "bm25",
        "--budget",
        "5",
        "--learn",
        "task",
        "--data-dir",
        str(data),
        "--threads",
        str(args.threads),
        "--learn-from-anonymous",
        "--max-key-share",
        "1",
    ]
    process, url = start(server_args, data / "server.log")
    served: list[tuple[int, float, dict | None]] = []
    stop = threading.Event()

    def client(i: int) -> None:
        for text in texts[i::8]:
            if stop.is_set():
                return
            served.append(request(f"{url}/v1/scifact.minilm/search?" + urllib.parse.urlencode({"query": text})))

    threads = [threading.Thread(target=client, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    time.sleep(args.kill_after)
    process.send_signal(signal.SIGKILL)
    process.wait(60)
    stop.set()
    for thread in threads:
        thread.join(600)
    learn = data / "learn"
    versions = sorted(int(p.name[6:12]) for p in learn.glob("state-??????.safetensors"))
    loaded = all(State.load(learn / f"state-{v:06d}.safetensors") is not None for v in versions)
    raw = (learn / "rewards.jsonl").read_bytes()
    complete = raw[: raw.rfind(b"\n") + 1].decode("utf-8").splitlines()
    parsed = all(json.loads(line)["judgments"] for line in complete)
    store = next((data / "scores").glob("*.sqlite"))
    with sqlite3.connect(store) as db:
        integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    named = [body["state"]["version"] for status, _, body in served if status == 200]
    process, url = start(server_args, data / "server.restart.log")
    try:
        after_restart = json.loads(urllib.request.urlopen(f"{url}/v1/status").read())["learning"]
        answer = request(f"{url}/v1/scifact.minilm/search?query=" + urllib.parse.quote(texts[-1]))[2]
    finally:
        process.terminate()
        process.wait(120)
    return {
        "killed_after_s": args.kill_after,
        "answered_before_kill": len(named),
        "refused_or_cut_by_kill": sum(status != 200 for status, _, _ in served),
        "versions_on_disk": versions,
        "all_versions_load": loaded,
        "partial_files": [p.name for p in learn.glob("*.partial")],
        "rewards_lines_complete": len(complete),
        "rewards_lines_parse": parsed,
        "torn_bytes": len(raw) - (raw.rfind(b"\n") + 1),
        "store_integrity": integrity,
        "index_unchanged": sha256_of(Path(INDEX)) == before,
        "highest_version_named_before_kill": max(named, default=0),
        "restart": after_restart,
        "served_after_restart_by_version": answer["state"]["version"],
        "command": f"tour-pyserini serve {' '.join(server_args)}",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    ap.add_argument("--requests", type=int, default=12, help="requests per client at each client count")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kill-after", type=float, default=8.0, help="seconds of load before the SIGKILL")
    ap.add_argument(
        "--experiments", nargs="+", default=["load", "kill9", "access"], choices=["load", "kill9", "access"]
    )
    ap.add_argument("--rounds", type=int, default=2, help="rounds of each arm in the access experiment")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    args = ap.parse_args()
    texts = [t.text for t in read_topics(split_files("scifact", "train").topics)]
    results = json.loads(OUT.read_text()) if OUT.exists() else {}
    if "load" in args.experiments:
        rows = load_experiment(args, texts)
        results["load"] = [r for r in results.get("load", []) if r["config"] not in args.configs] + rows
    if "access" in args.experiments:
        results["access"] = access_experiment(args, texts)
    if "kill9" in args.experiments:
        results["kill9"] = kill_experiment(args, texts)
        print(json.dumps(results["kill9"]), flush=True)
    if "kill9" in args.experiments:
        results["kill9"]["bench_command"] = "python bench/serve_load.py " + " ".join(sys.argv[1:])
    OUT.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
