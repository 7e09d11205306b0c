"""A small deterministic OpenAI-compatible server on 127.0.0.1 (the completions and chat endpoints, with
the failures real servers have, and bodies no server should send), for the openai teacher's tests."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def unit(text: str, salt: str) -> float:
    """A deterministic number in [0, 1) from a text."""
    return int(hashlib.sha256(f"{salt}{text}".encode()).hexdigest()[:8], 16) / 2**32


def doc_of(prompt: str) -> str:
    return re.search(r"Document>?: (.*)", prompt).group(1)


class FakeOpenAI(BaseHTTPRequestHandler):
    """/v1/completions gives " Yes"/" No" log-probabilities that depend on the prompt; /v1/chat/completions
    gives a digit, or "maybe" for a document saying GARBLE (always) or FLAKY (the first time).

    Misbehaviours, as server settings: ``body`` (text) is the whole answer of both endpoints; ``answers``
    are the tokens the log-probabilities name instead of " Yes" and " No"; ``logprob`` replaces the first
    one's value (a string, NaN); ``usage`` replaces the token counts; ``retry_after`` is the header of a
    failing answer; ``delay`` holds every answer back."""

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):
        server = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with server.lock:
            server.requests.append((self.path, body))
            server.in_flight += 1
            server.max_in_flight = max(server.max_in_flight, server.in_flight)
            self.counted = True
            failing = server.fail_next > 0
            server.fail_next -= failing
        try:
            time.sleep(server.delay)
            if server.key and self.headers.get("Authorization") != f"Bearer {server.key}":
                return self.answer(401, {"error": "bad key"})
            if body.get("model") != "judge-1":
                return self.answer(404, {"error": "no such model"})
            if failing:
                return self.answer(server.fail_status, {"error": "busy"}, {"Retry-After": server.retry_after})
            if server.body is not None:
                return self.answer(200, server.body)
            if self.path == "/v1/completions":
                prompt = body["prompt"]
                yes, no = server.answers
                top = {yes: -3 * unit(prompt, "y"), no: -3 * unit(prompt, "n"), " Maybe": -5.0}
                if server.logprob is not None:
                    top[yes] = server.logprob
                logprobs = {"top_logprobs": [top]} if server.logprobs else None
                choice = {"text": " Yes", "logprobs": logprobs}
                usage = {"prompt_tokens": len(prompt.split()), "completion_tokens": 1}
                return self.answer(200, {"choices": [choice], "usage": server.usage or usage})
            if self.path == "/v1/chat/completions":
                user = body["messages"][-1]["content"]
                document = doc_of(user)
                with server.lock:
                    flaky = "FLAKY" in document and document not in server.seen
                    server.seen.add(document)
                reply = "maybe" if "GARBLE" in document or flaky else str(int(6 * unit(document, "s")))
                return self.answer(
                    200,
                    {
                        "choices": [{"message": {"role": "assistant", "content": reply}}],
                        "usage": {"prompt_tokens": len(user.split()), "completion_tokens": 1},
                    },
                )
            return self.answer(404, {"error": "no such endpoint"})
        finally:
            self.done()

    def done(self) -> None:
        """This request is no longer in flight: said before its answer is written, since a client may send its next
        request the moment it reads this one's answer, before this thread would otherwise count it done."""
        if getattr(self, "counted", False):
            self.counted = False
            with self.server.lock:
                self.server.in_flight -= 1

    def answer(self, status: int, body: dict | str, headers: dict | None = None):
        data = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.done()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


def start_server(port: int = 0, **settings) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", port), FakeOpenAI)
    server.daemon_threads = True
    server.lock, server.requests, server.seen = threading.Lock(), [], set()
    server.in_flight = server.max_in_flight = 0
    settings = {
        "delay": 0.0,
        "key": None,
        "logprobs": True,
        "fail_next": 0,
        "fail_status": 503,
        "retry_after": "0",
        "body": None,
        "answers": (" Yes", " No"),
        "logprob": None,
        "usage": None,
        **settings,
    }
    for name, value in settings.items():
        setattr(server, name, value)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def url(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1"
