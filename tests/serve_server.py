"""A real `tour-pyserini serve` process on 127.0.0.1 (a free port), for the serving tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class Server:
    """``python -m tour_pyserini serve ARGS --port 0``, started and read until it prints its address."""

    def __init__(self, *args: str, startup: float = 180.0):
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
        self.args = args
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tour_pyserini", "serve", "--port", "0", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stderr: list[str] = []
        threading.Thread(target=lambda: self.stderr.extend(self.process.stderr), daemon=True).start()
        self.url = self.wait_for_address(startup)

    def wait_for_address(self, startup: float) -> str:
        found: list[str] = []
        reader = threading.Thread(target=lambda: found.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(startup)
        line = found[0] if found else ""
        if not line.startswith("serving on "):
            self.kill()
            raise RuntimeError(f"the server did not start: {line!r}\n{''.join(self.stderr)[-3000:]}")
        return line.split()[-1]

    def get(self, path: str, timeout: float = 120.0, headers: dict | None = None, **params) -> tuple[int, dict, dict]:
        """Status, JSON body and headers of GET ``path`` with ``params`` (an error status is returned too)."""
        query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
        url = f"{self.url}{path}" + (f"?{query}" if query else "")
        return get_url(url, timeout, headers)

    def search(self, index: str, query: str, headers: dict | None = None, **params) -> dict:
        status, body, _ = self.get(f"/v1/{index}/search", headers=headers, query=query, **params)
        assert status == 200, body
        return body

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.kill()


def get_url(url: str, timeout: float = 120.0, headers: dict | None = None) -> tuple[int, dict, dict]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=timeout) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as e:
        body = e.read()
        return e.code, json.loads(body), dict(e.headers)


def wait_until(condition, timeout: float = 60.0, every: float = 0.2):
    """The first truthy value of ``condition()`` within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s")


def http_run(server: Server, index: str, topics, params: dict, hits: int) -> dict[str, dict[str, float]]:
    """Every topic searched over HTTP at once, from 8 clients: the rankings as a run."""

    def one(topic):
        body = server.search(index, topic.text, qid=topic.qid, hits=hits, **params)
        return topic.qid, {c["docid"]: c["score"] for c in body["candidates"]}

    with ThreadPoolExecutor(8) as pool:
        return dict(pool.map(one, topics))
