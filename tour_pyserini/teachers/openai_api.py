"""The API teacher: any OpenAI-compatible server (vLLM, llama.cpp's server, Ollama, OpenAI) judging pairs.

Two ways of judging, as servers differ. ``logprobs``: ``/completions`` on the yes/no prompt, one token,
the score the log-odds of yes and no among ``top_logprobs`` (the llm teacher's score, from the server's
arithmetic). ``score``: ``/chat/completions`` asking for the TTT-Embed paper's 0-5 relevance score, parsed
strictly; a reply that is not a score is asked once more, then the pair has no score (NaN, never 0: it is
not stored, so a later run asks again). ``auto`` tries the first and falls back to the second when the
server gives no log-probabilities (llama.cpp's chat endpoint returns none).

Each pair is one request; up to ``concurrency`` are in flight. 429 and 5xx answers, timeouts and dropped
connections are retried with exponential backoff, each wait logged once it reaches a second; ``Retry-After``
is honoured up to ``max_retry_after`` seconds, and one pair may take ``deadline`` seconds, retries included.
A refused key, a missing model or endpoint, a server that cannot be reached, a longer wait than those bounds
and a body that is not what the API defines (the server's words quoted) are one line each. Scores are
handed over as they arrive (:meth:`score_streaming`), so a score store keeps every paid pair even when the
run is interrupted.
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import logging
import math
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from urllib.parse import urlparse

import numpy as np

from tour_pyserini.errors import UserError
from tour_pyserini.numbers import Param, non_negative_float, positive_float, positive_int
from tour_pyserini.teachers.base import TEACHERS, ScoreRequest, ScoreSink, Teacher, TeacherContext
from tour_pyserini.teachers.cross_encoder import pair_text
from tour_pyserini.teachers.prompts import (
    INSTRUCTION_OPTION,
    PRESETS,
    SCORE_SYSTEM,
    SCORE_USER,
    TEMPLATE_OPTION,
    Template,
    check_instruction_read,
    instruction_option,
    parse_score,
    read_template,
)

log = logging.getLogger(__name__)

JUDGES = ("auto", "logprobs", "score")
TOP_LOGPROBS = 20
RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
LOGGED_WAIT = 1.0  # seconds: a shorter wait between tries goes unsaid
QUOTED = 80  # characters of a body the server sent, quoted in a message
RESUME = "scores already received are in the score store (--score-store): run again to resume"

MODEL_OPTION = Param(
    "model",
    str,
    help="the model an openai: teacher asks (its name on the server)",
    flag="--teacher-model",
    metavar="NAME",
)
CONCURRENCY_OPTION = Param(
    "concurrency",
    positive_int,
    4,
    "requests an openai: teacher keeps in flight, all Ray workers together",
    flag="--teacher-concurrency",
    metavar="N",
    shared=True,
)
DEADLINE_OPTION = Param(
    "deadline",
    positive_float,
    300.0,
    "seconds an openai: teacher waits for one pair's score, retries included, before the search stops in one line",
    flag="--teacher-timeout",
    metavar="SECONDS",
)
RETRY_AFTER_OPTION = Param(
    "max_retry_after",
    non_negative_float,
    60.0,
    "the longest Retry-After an openai: teacher obeys; a busy server asking for more stops the search in one line",
    flag="--teacher-max-retry-after",
    metavar="SECONDS",
)
JUDGE_OPTION = Param(
    "judge",
    str,
    "auto",
    "how an openai: teacher judges: logprobs (yes/no log-odds), score "
    "(verbalised 0-5) or auto (logprobs where the server returns them)",
    flag="--teacher-judge",
    metavar="|".join(JUDGES),
)


class Unscored(Exception):
    """A pair the server answered but gave no usable score for."""


@dataclass
class Usage:
    """What the teacher has paid for in this process."""

    pairs: int = 0
    missing: int = 0
    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


@TEACHERS.register
class OpenAITeacher(Teacher):
    """Scores pairs through an OpenAI-compatible HTTP API; ``base_url`` ends where ``/completions`` begins
    (e.g. ``http://127.0.0.1:8000/v1``). The key is ``OPENAI_API_KEY`` (none sent when it is unset)."""

    name = "openai"
    usage = "openai:BASE_URL"
    options = (
        MODEL_OPTION,
        CONCURRENCY_OPTION,
        JUDGE_OPTION,
        DEADLINE_OPTION,
        RETRY_AFTER_OPTION,
        INSTRUCTION_OPTION,
        TEMPLATE_OPTION,
    )

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        judge: str = "auto",
        concurrency: int = CONCURRENCY_OPTION.default,
        instruction: str | None = None,
        template: Template | None = None,
        max_chars: int | None = None,
        timeout: float = 60.0,
        retries: int = 5,
        backoff: float = 0.5,
        deadline: float = DEADLINE_OPTION.default,
        max_retry_after: float = RETRY_AFTER_OPTION.default,
    ):
        parsed = urlparse(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise UserError(
                f"openai teacher: {base_url!r} is not an http(s) URL (e.g. openai:http://127.0.0.1:8000/v1)"
            )
        if not model:
            raise UserError("the openai teacher needs --teacher-model NAME (the model's name on the server)")
        if judge not in JUDGES:
            raise UserError(f"--teacher-judge {judge!r}: choose one of {', '.join(JUDGES)}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.instruction = instruction_option(instruction)
        self.template = template or PRESETS["plain"]
        self.max_chars = max_chars
        self.concurrency = concurrency
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self.deadline, self.max_retry_after = deadline, max_retry_after  # seconds per pair; longest Retry-After
        self.key = os.environ.get("OPENAI_API_KEY")
        self.paid = Usage()
        self.lock = threading.Lock()
        self.reached = False  # whether the server has answered once (a refused connection then is worth retrying)
        self.judge = self.probe() if judge == "auto" else judge
        if template is not None and self.judge == "score":
            raise UserError(
                "--teacher-template: this openai teacher judges by 0-5 scores (--teacher-judge score, or "
                "auto on a server without log-probabilities), with a prompt of its own: the template "
                "would not be read"
            )
        if self.judge == "logprobs":
            check_instruction_read(self.template, instruction)

    @classmethod
    def from_spec(cls, argument: str | None, context: TeacherContext) -> OpenAITeacher:
        if not argument:
            raise UserError(
                "the openai teacher needs the server's URL: openai:BASE_URL (e.g. http://127.0.0.1:8000/v1)"
            )
        template = context.option(TEMPLATE_OPTION)
        return cls(
            argument,
            context.option(MODEL_OPTION),
            judge=context.option(JUDGE_OPTION),
            concurrency=context.option(CONCURRENCY_OPTION),
            deadline=context.option(DEADLINE_OPTION),
            max_retry_after=context.option(RETRY_AFTER_OPTION),
            instruction=context.options.get("instruction"),
            template=read_template(template) if template else None,
            max_chars=4 * context.max_length if context.max_length else None,
        )

    # -- HTTP

    def post(self, endpoint: str, body: dict, deadline: float) -> dict | None:
        """The server's JSON answer; None for a request it refused as malformed (400, 422: that pair only).
        Tries and waits end by ``deadline`` (a ``time.monotonic()`` instant), or the search stops in one line."""
        headers = {"Content-Type": "application/json"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        url = f"{self.base_url}/{endpoint}"
        data = json.dumps({"model": self.model, **body}).encode()
        attempt = 0
        while True:
            timeout = min(self.timeout, max(deadline - time.monotonic(), 0.001))
            try:
                with self.lock:
                    self.paid.requests += 1
                request = urllib.request.Request(url, data=data, headers=headers, method="POST")
                with urllib.request.urlopen(request, timeout=timeout) as response:
                    answer = json_object(response.read(), url)
                self.reached = True
                self.count_tokens(answer, url)
                return answer
            except urllib.error.HTTPError as e:
                if e.code in (401, 403):
                    raise UserError(
                        f"openai teacher: {self.base_url} refused the key ({e.code}); set OPENAI_API_KEY"
                    ) from None
                if e.code == 404:
                    raise UserError(
                        f"openai teacher: {url} answered 404: no such endpoint, or no model {self.model!r} there"
                    ) from None
                if e.code in (400, 422):
                    return None
                if e.code not in RETRY_STATUS or attempt == self.retries:
                    raise UserError(
                        f"openai teacher: {url} answered {e.code} {e.reason} ({attempt + 1} tries)"
                    ) from None
                asked = retry_after(e.headers.get("Retry-After") if e.headers else None)
                if asked is not None and asked > self.max_retry_after:
                    raise UserError(
                        f"openai teacher: {url} answered {e.code} {e.reason} and asks to wait {asked:g} s "
                        f"(Retry-After), more than --teacher-max-retry-after {self.max_retry_after:g} s; "
                        f"{RESUME}"
                    ) from None
                wait, reason = max(self.backoff * 2**attempt, asked or 0.0), f"answered {e.code} {e.reason}"
            except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
                cause = getattr(e, "reason", e)
                refused = isinstance(cause, ConnectionRefusedError)
                if refused and not self.reached:  # nothing listens there: no server to wait for
                    raise UserError(f"openai teacher: cannot reach {self.base_url} (connection refused)") from None
                if attempt == self.retries:
                    raise UserError(
                        f"openai teacher: cannot reach {self.base_url} ({cause}; {attempt + 1} tries); {RESUME}"
                    ) from None
                silent = isinstance(cause, TimeoutError)
                wait, reason = self.backoff * 2**attempt, f"gave no answer in {timeout:.3g} s" if silent else str(cause)
            if time.monotonic() + wait > deadline:
                raise UserError(
                    f"openai teacher: no score for one pair within --teacher-timeout {self.deadline:g} s "
                    f"({url} {reason}; {attempt + 1} tries); {RESUME}"
                )
            if wait >= LOGGED_WAIT or reason.startswith("gave no answer"):
                log.warning(
                    "openai teacher: %s %s; trying again in %.1f s (try %d of %d)",
                    url,
                    reason,
                    wait,
                    attempt + 2,
                    self.retries + 1,
                )
            time.sleep(wait)
            attempt += 1

    def count_tokens(self, answer: dict, url: str) -> None:
        """Add the answer's ``usage`` (absent: nothing) to what this process has paid for."""
        usage = answer.get("usage")
        if usage is None:
            return
        counts = (
            [usage.get(key) or 0 for key in ("prompt_tokens", "completion_tokens")] if isinstance(usage, dict) else None
        )
        if counts is None or not all(type(n) is int and n >= 0 for n in counts):
            raise UserError(
                f'openai teacher: {url} answered with a "usage" that is not token counts: {quote(json.dumps(usage))}'
            )
        with self.lock:
            self.paid.prompt_tokens += counts[0]
            self.paid.completion_tokens += counts[1]

    # -- judging one pair

    def completion_prompt(self, query: str, document: str) -> str:
        before, after = self.template.render(query, self.instruction)
        return before + document.strip()[: self.max_chars] + after

    def judge_logprobs(self, query: str, document: str, deadline: float) -> float:
        answer = self.post(
            "completions",
            {
                "prompt": self.completion_prompt(query, document),
                "max_tokens": 1,
                "temperature": 0,
                "logprobs": TOP_LOGPROBS,
            },
            deadline,
        )
        top = top_logprobs(answer, f"{self.base_url}/completions")
        if top is None:
            raise Unscored("no log-probabilities")
        return yes_no_log_odds(top, self.template.answers)

    def judge_score(self, query: str, document: str, deadline: float) -> float:
        user = SCORE_USER.format(instruction=self.instruction, query=query, document=document.strip()[: self.max_chars])
        body = {
            "messages": [{"role": "system", "content": SCORE_SYSTEM}, {"role": "user", "content": user}],
            "max_tokens": 4,
            "temperature": 0,
        }
        for _ in range(2):  # a reply that is not a score is asked once more
            answer = self.post("chat/completions", body, deadline)
            try:
                score = parse_score(answer["choices"][0]["message"]["content"]) if answer else None
            except (KeyError, IndexError, TypeError):
                score = None
            if score is not None:
                return score
        raise Unscored("the reply was not a 0-5 score")

    def judge_pair(self, query: str, document: str) -> float:
        judge = self.judge_logprobs if self.judge == "logprobs" else self.judge_score
        return judge(query, document, time.monotonic() + self.deadline)

    def probe(self) -> str:
        """``logprobs`` when the server returns yes/no log-probabilities for completions, else ``score``."""
        deadline = time.monotonic() + self.deadline
        try:
            answer = self.post(
                "completions",
                {
                    "prompt": self.completion_prompt("probe", "probe"),
                    "max_tokens": 1,
                    "temperature": 0,
                    "logprobs": TOP_LOGPROBS,
                },
                deadline,
            )
        except UserError as e:
            if "404" not in str(e):
                raise
            # no completions endpoint; the chat endpoint must be there (and know the model)
            self.post(
                "chat/completions", {"messages": [{"role": "user", "content": "Reply 0."}], "max_tokens": 1}, deadline
            )
            return "score"
        top = top_logprobs(answer, f"{self.base_url}/completions")
        try:
            if top is not None:
                yes_no_log_odds(top, self.template.answers)
                return "logprobs"
        except Unscored:
            pass
        return "score"

    # -- the Teacher interface

    def score_streaming(self, requests: Sequence[ScoreRequest], sink: ScoreSink) -> list[np.ndarray]:
        pairs = [(i, j, r.query, pair_text(doc)) for i, r in enumerate(requests) for j, doc in enumerate(r.documents)]
        got: dict[tuple[int, int], float] = {}
        pool = ThreadPoolExecutor(max_workers=self.concurrency)
        futures = {pool.submit(self.judge_pair, q, d): (i, j) for i, j, q, d in pairs}
        stop: BaseException | None = None  # a fatal answer or Ctrl-C: nothing more is sent, what is in flight is kept
        try:
            pending = as_completed(futures)
            while True:
                try:
                    future = next(pending)
                except StopIteration:
                    break
                except KeyboardInterrupt as e:
                    if isinstance(stop, KeyboardInterrupt):  # the second Ctrl-C does not wait
                        raise
                    stop = e
                    for f in futures:
                        f.cancel()
                    continue
                if future.cancelled():
                    continue
                i, j = futures[future]
                try:
                    got[i, j] = future.result()
                except Unscored:
                    self.paid.missing += 1
                    continue
                except UserError as e:
                    stop = stop or e
                    for f in futures:
                        f.cancel()
                    continue
                self.paid.pairs += 1
                sink(i, {requests[i].docids[j]: got[i, j]})  # kept the moment it is paid for
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            self.report()
        if stop is not None:
            raise stop
        return [np.array([got.get((i, j), np.nan) for j in range(len(r.docids))]) for i, r in enumerate(requests)]

    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        return self.score_streaming(requests, lambda i, scores: None)

    def report(self) -> None:
        u = self.paid
        missing = f" ({u.missing} got no score: not stored, asked again next run)" if u.missing else ""
        log.info(
            "%s: %d pairs scored%s in %d requests, tokens sent %d, received %d",
            self.label,
            u.pairs,
            missing,
            u.requests,
            u.prompt_tokens,
            u.completion_tokens,
        )

    @property
    def label(self) -> str:
        return f"openai:{self.model}"

    @property
    def fingerprint(self) -> str:
        """Model name, way of judging and prompt; not the URL, so a store survives a server that restarts
        on another port (the name is trusted to stand for the same weights)."""
        prompt = self.template.text if self.judge == "logprobs" else f"{SCORE_SYSTEM}\0{SCORE_USER}"
        digest = hashlib.sha256(f"{prompt}\0{self.instruction}\0{self.max_chars}".encode()).hexdigest()[:16]
        return f"{self.label} judge {self.judge} prompt {digest}"


def json_object(body: bytes, url: str) -> dict:
    """The JSON object a server answered with, or one line quoting what it sent instead."""
    text = body.decode("utf-8", errors="replace")
    try:
        answer = json.loads(text)
    except json.JSONDecodeError:
        raise UserError(f"openai teacher: {url} answered with a body that is not JSON: {quote(text)}") from None
    if not isinstance(answer, dict):
        raise UserError(f"openai teacher: {url} answered with JSON that is not an object: {quote(text)}")
    return answer


def quote(text: str) -> str:
    """The start of what a server sent, on one line."""
    return repr(text[:QUOTED]) + (f" ({len(text)} characters)" if len(text) > QUOTED else "")


def retry_after(value: str | None) -> float | None:
    """The seconds a ``Retry-After`` header asks for (a number of seconds or an HTTP date); None when it is
    absent or unreadable."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return None if math.isnan(seconds) else max(seconds, 0.0)


def top_logprobs(answer: dict | None, url: str) -> dict[str, float] | None:
    """The first generated token's alternatives, {token: log-probability}, from a completions answer (None
    when it has none); a log-probability that is not a number is one line quoting it."""
    if answer is None:
        return None
    try:
        top = answer["choices"][0]["logprobs"]["top_logprobs"][0]
    except (KeyError, IndexError, TypeError):
        return None
    if not isinstance(top, dict) or not top:
        return None
    if bad := {token: lp for token, lp in top.items() if type(lp) not in (int, float)}:
        raise UserError(f"openai teacher: {url} sent log-probabilities that are not numbers: {quote(json.dumps(bad))}")
    return top


def yes_no_log_odds(top: dict[str, float], answers: tuple[str, str]) -> float:
    """log P(yes) - log P(no), each summed over the listed tokens that read as the answer (any case, any
    spaces). An answer missing from the list has at most the smallest listed probability, which stands for
    it; a list with neither answer gives no score, nor one holding NaN or +inf (-inf is probability 0: unlisted)."""
    if any(math.isnan(lp) or lp == math.inf for lp in top.values()):
        raise Unscored("a log-probability that is NaN or infinite")
    top = {token: lp for token, lp in top.items() if lp > -math.inf}
    sides = []
    for word in answers:
        logps = [lp for token, lp in top.items() if token.strip().lower() == word]
        sides.append(math.log(sum(math.exp(lp) for lp in logps)) if logps else None)
    if sides[0] is None and sides[1] is None:
        raise Unscored("neither answer among the top log-probabilities")
    bound = min(top.values())
    return (bound if sides[0] is None else sides[0]) - (bound if sides[1] is None else sides[1])
