"""The openai teacher against real HTTP servers on 127.0.0.1: a small deterministic one (tests/openai_server.py:
the OpenAI completions and chat endpoints, with the failures real servers have), and llama.cpp's server on the
real Gemma 3 270M where the [llm] extra is installed (tests/test_teacher_llm.py)."""

from __future__ import annotations

import logging
import math
import threading
import time

import numpy as np
import pytest
from openai_server import doc_of, start_server, unit, url

from tour_pyserini.errors import UserError
from tour_pyserini.index.docstore import Document
from tour_pyserini.teachers import ScoreRequest, ScoreStore, StoredTeacher, TeacherContext, get_teacher
from tour_pyserini.teachers.openai_api import OpenAITeacher, yes_no_log_odds
from tour_pyserini.teachers.prompts import parse_score


@pytest.fixture
def server():
    server = start_server()
    yield server
    server.shutdown()
    server.server_close()


TEXTS = [f"Abstract number {i} about topic {i % 3}." for i in range(12)]


def request(texts=TEXTS, query="what causes cancer") -> ScoreRequest:
    return ScoreRequest(
        "q1", query, [f"d{i}" for i in range(len(texts))], [Document(f"d{i}", "", t) for i, t in enumerate(texts)]
    )


def teacher(server, **options) -> OpenAITeacher:
    options = {"model": "judge-1", **options}
    return get_teacher(f"openai:{url(server)}", TeacherContext(options=options))


def test_logprobs_scores_are_the_servers_yes_no_log_odds(server, caplog):
    judge = teacher(server, concurrency=3)
    assert judge.judge == "logprobs"  # auto: the probe found log-probabilities
    with caplog.at_level(logging.INFO, logger="tour_pyserini"):
        got = judge.score([request()])[0]
    prompts = [body["prompt"] for path, body in server.requests[1:]]
    want = {doc_of(p): -3 * unit(p, "y") + 3 * unit(p, "n") for p in prompts}
    np.testing.assert_allclose(got, [want[t] for t in TEXTS], atol=1e-12)
    assert all(body["logprobs"] == 20 and body["max_tokens"] == 1 for _, body in server.requests)
    assert len(server.requests) == 1 + len(TEXTS)
    err = caplog.text
    tokens = sum(len(body["prompt"].split()) for _, body in server.requests)
    assert (
        f"openai:judge-1: {len(TEXTS)} pairs scored in {len(TEXTS) + 1} requests, tokens sent {tokens}, "
        f"received {len(TEXTS) + 1}" in err
    )


def test_yes_no_log_odds_reads_every_spelling_and_bounds_a_missing_answer():
    assert yes_no_log_odds(
        {" Yes": math.log(0.3), "yes": math.log(0.1), " No": math.log(0.2)}, ("yes", "no")
    ) == pytest.approx(math.log(0.4 / 0.2))
    # "no" is not listed: its log-probability is at most the smallest listed one
    assert yes_no_log_odds({" Yes": -0.5, " The": -4.0}, ("yes", "no")) == pytest.approx(3.5)


def test_verbalised_scores_when_the_server_gives_no_logprobs(tmp_path, caplog):
    server = start_server(logprobs=False)
    try:
        texts = TEXTS[:4] + ["GARBLE this", "FLAKY this"]
        judge = teacher(server)
        assert judge.judge == "score"
        store = ScoreStore(tmp_path / "s.sqlite", judge.fingerprint)
        with caplog.at_level(logging.INFO, logger="tour_pyserini"):
            got = StoredTeacher(judge, store).score([request(texts)])[0]
        want = [float(int(6 * unit(t, "s"))) for t in texts]
        assert got[:4].tolist() == want[:4] and got[5] == want[5]  # FLAKY: the second ask gave a score
        assert np.isnan(got[4])  # GARBLE: no score (the rewriters rank it below the scored ones)
        chats = [b for p, b in server.requests if p == "/v1/chat/completions"]
        assert len(chats) == 4 + 2 + 2  # GARBLE and FLAKY were asked twice
        assert set(store.get("what causes cancer", [f"d{i}" for i in range(6)])) == {"d0", "d1", "d2", "d3", "d5"}
        assert "1 got no score: not stored, asked again next run" in caplog.text
        # the next run asks only the pair that has no score
        before = len(server.requests)
        StoredTeacher(judge, store).score([request(texts)])
        assert len(server.requests) - before == 2
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    "reply, score",
    [
        ("4", 4.0),
        (" 4 \n", 4.0),
        ("4.0", 4.0),
        ("0", 0.0),
        ("4/5", None),
        ("about 4", None),
        ("45", None),
        ("6", None),
        ("", None),
    ],
)
def test_score_parsing_is_strict(reply, score):
    assert parse_score(reply) == score


@pytest.mark.parametrize("status", [429, 503])
def test_busy_servers_are_retried_with_backoff(status):
    server = start_server(fail_next=3, fail_status=status)
    try:
        judge = OpenAITeacher(url(server), "judge-1", judge="logprobs", backoff=0.01)
        scores = judge.score([request(TEXTS[:2])])[0]
        assert np.isfinite(scores).all() and len(server.requests) == 2 + 3
        server.fail_next = 10
        with pytest.raises(UserError, match=f"answered {status} .* \\(3 tries\\)"):
            OpenAITeacher(url(server), "judge-1", judge="logprobs", backoff=0.01, retries=2).score([request()])
    finally:
        server.shutdown()
        server.server_close()


def test_requests_in_flight_stay_within_the_concurrency():
    server = start_server(delay=0.05)
    try:
        OpenAITeacher(url(server), "judge-1", judge="logprobs", concurrency=3).score([request()])
        assert server.max_in_flight == 3
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_run_stopped_by_a_dead_server_resumes_without_paying_twice(tmp_path):
    port = free_port()
    server = start_server(port, delay=0.02)
    judge = OpenAITeacher(url(server), "judge-1", judge="logprobs", concurrency=2, retries=1, backoff=0.01)
    store = ScoreStore(tmp_path / "s.sqlite", judge.fingerprint)

    def kill_after(n: int) -> None:
        while len(server.requests) < n:
            time.sleep(0.005)
        server.shutdown()
        server.server_close()

    killer = threading.Thread(target=kill_after, args=(5,))
    killer.start()
    with pytest.raises(UserError, match="cannot reach .* run again to resume"):
        StoredTeacher(judge, store).score([request()])
    killer.join()
    kept = store.get("what causes cancer", request().docids)
    assert 3 <= len(kept) < len(TEXTS)  # what was paid for before the server died is kept
    again = start_server(port)
    try:
        got = StoredTeacher(judge, store).score([request()])[0]
        assert len(again.requests) == len(TEXTS) - len(kept)  # no pair paid twice
        assert not {doc_of(b["prompt"]) for _, b in again.requests} & {TEXTS[int(d[1:])] for d in kept}
        fresh = OpenAITeacher(url(again), "judge-1", judge="logprobs").score([request()])[0]
        np.testing.assert_allclose(got, fresh, atol=1e-12)
    finally:
        again.shutdown()
        again.server_close()


def test_bad_input_is_one_line(server):
    closed = free_port()
    rows = [
        ("openai", {"model": "judge-1"}, "the openai teacher needs the server's URL: openai:BASE_URL"),
        ("openai:localhost:8000", {"model": "judge-1"}, "is not an http(s) URL"),
        (f"openai:{url(server)}", {}, "the openai teacher needs --teacher-model NAME"),
        (f"openai:{url(server)}", {"model": "judge-1", "judge": "vibes"}, "--teacher-judge 'vibes': choose one of"),
        (f"openai:{url(server)}", {"model": "other"}, "answered 404: no such endpoint, or no model 'other' there"),
        (
            f"openai:{url(server)}",
            {"model": "judge-1", "judge": "score", "template": "plain"},
            "--teacher-template: this openai teacher judges by 0-5 scores",
        ),
        (f"openai:http://127.0.0.1:{closed}/v1", {"model": "judge-1"}, "cannot reach http://127.0.0.1"),
    ]
    for spec, options, message in rows:
        with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
            get_teacher(spec, TeacherContext(options=options))


def test_a_refused_key_is_one_line(monkeypatch):
    server = start_server(key="sk-right")
    try:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
        with pytest.raises(UserError, match="refused the key \\(401\\); set OPENAI_API_KEY"):
            teacher(server)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-right")
        assert teacher(server).judge == "logprobs"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            {"body": "<html><body>502 Bad Gateway</body></html>"},
            "answered with a body that is not JSON: '<html><body>502",
        ),
        ({"body": "[1, 2]"}, "answered with JSON that is not an object: '[1, 2]'"),
        ({"body": "null"}, "answered with JSON that is not an object: 'null'"),
        ({"logprob": "abc"}, """sent log-probabilities that are not numbers: '{" Yes": "abc"}'"""),
        ({"usage": "lots"}, """answered with a "usage" that is not token counts: '"lots"'"""),
    ],
)
def test_a_body_the_api_does_not_define_is_one_line_quoting_it(settings, message):
    server = start_server(**settings)
    try:
        with pytest.raises(UserError) as error:
            OpenAITeacher(url(server), "judge-1", judge="logprobs").score([request(TEXTS[:2])])
        assert message in str(error.value) and "\n" not in str(error.value)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    "settings, judge",
    [
        ({"body": "{}"}, "logprobs"),
        ({"body": "{}"}, "score"),
        ({"logprobs": False}, "logprobs"),  # log-probabilities asked of a server without them
        ({"answers": (" Maybe", " Perhaps")}, "logprobs"),  # top log-probabilities that never name yes or no
        ({"logprob": float("nan"), "answers": (" Yes", " Perhaps")}, "logprobs"),  # a NaN for the only answer named
    ],
)
def test_pairs_a_server_gives_no_score_for_are_nan_and_never_stored(settings, judge, tmp_path):
    server = start_server(**settings)
    try:
        judge = OpenAITeacher(url(server), "judge-1", judge=judge)
        store = ScoreStore(tmp_path / "s.sqlite", judge.fingerprint)
        got = StoredTeacher(judge, store).score([request(TEXTS[:3])])[0]
        assert np.isnan(got).all()  # not made-up descending scores
        assert store.get("what causes cancer", request(TEXTS[:3]).docids) == {}
    finally:
        server.shutdown()
        server.server_close()


def test_a_store_holding_null_scores_from_an_older_version_is_read_and_those_pairs_scored_again(server, tmp_path):
    import sqlite3

    judge = OpenAITeacher(url(server), "judge-1", judge="logprobs")
    path = tmp_path / "s.sqlite"
    ScoreStore(path, judge.fingerprint).close()
    with sqlite3.connect(path) as db:  # what a server's NaN became in a store an older version wrote
        db.executemany(
            "INSERT INTO scores VALUES (?, ?, ?)",
            [("what causes cancer", "d0", None), ("what causes cancer", "d1", float("inf"))],
        )
    store = ScoreStore(path, judge.fingerprint)
    got = StoredTeacher(judge, store).score([request(TEXTS[:3])])[0]
    fresh = OpenAITeacher(url(server), "judge-1", judge="logprobs").score([request(TEXTS[:3])])[0]
    np.testing.assert_allclose(got, fresh)
    assert len(server.requests) == 3 + 3  # every pair asked, the NULL and the infinity too
    assert set(store.get("what causes cancer", ["d0", "d1", "d2"])) == {"d0", "d1", "d2"}


@pytest.mark.slow
def test_waits_are_bounded_said_and_settable(caplog):
    import logging

    caplog.set_level(logging.WARNING)
    silent = start_server(delay=5.0)  # a server that never answers in time
    try:
        start = time.monotonic()
        with pytest.raises(
            UserError,
            match=r"no score for one pair within --teacher-timeout 1.5 s \(.* gave no "
            r"answer in 0.3 s; 2 tries\); scores already received",
        ):
            teacher = OpenAITeacher(url(silent), "judge-1", judge="logprobs", timeout=0.3, deadline=1.5)
            teacher.score([request(TEXTS[:1])])
        assert time.monotonic() - start < 2.5
        assert "gave no answer in 0.3 s; trying again in 0.5 s (try 2 of 6)" in caplog.text
    finally:
        silent.shutdown()
        silent.server_close()
    busy = start_server(fail_next=1, fail_status=429, retry_after="100000")
    try:
        start = time.monotonic()
        with pytest.raises(
            UserError,
            match=r"answered 429 Too Many Requests and asks to wait 100000 s \(Retry-After\),"
            r" more than --teacher-max-retry-after 60 s",
        ):
            OpenAITeacher(url(busy), "judge-1", judge="logprobs").score([request(TEXTS[:1])])
        assert time.monotonic() - start < 1
        busy.fail_next, busy.retry_after = 1, "1.2"  # obeyed, and said
        teacher = get_teacher(
            f"openai:{url(busy)}",
            TeacherContext(options={"model": "judge-1", "judge": "logprobs", "deadline": 30.0, "max_retry_after": 2.0}),
        )
        assert (teacher.deadline, teacher.max_retry_after) == (30.0, 2.0)
        assert np.isfinite(teacher.score([request(TEXTS[:1])])[0]).all()
        assert "answered 429 Too Many Requests; trying again in 1.2 s (try 2 of 6)" in caplog.text
    finally:
        busy.shutdown()
        busy.server_close()
