"""Online TTT-Embed in the server: the budget's allocation in arrival order, the rewards log, versioned states
swapped in as they are fitted, and what a kill -9 leaves."""

from __future__ import annotations

import json
import signal
import sqlite3

import numpy as np
import pytest
from serve_server import Server, wait_until

from tour_pyserini.files.topics import read_topics
from tour_pyserini.ttt.allocation import Allocator, grant
from tour_pyserini.ttt.online import Reward, RewardsLog, StateVersions, shift_by_state
from tour_pyserini.ttt.state import State


@pytest.mark.parametrize(
    "budget, grants",
    [
        (2.0, [0, 0, 0, 0, 10, 0, 0, 0, 0, 10]),  # b <= depth: every (depth / b)-th query gets depth
        (10.0, [10] * 10),
        (2.5, [0, 0, 0, 10, 0, 0, 0, 10, 0, 0]),
        (25.0, [25] * 10),  # b above depth: each query takes the whole judgments its credit holds
        (0.1, [0] * 10),
    ],
)
def test_allocation_in_arrival_order(budget, grants):
    allocator = Allocator(budget, depth=10, max_depth=100)
    assert [allocator.next("t") for _ in grants] == grants
    assert allocator.spent["t"] <= budget * len(grants) and allocator.served["t"] == len(grants)


def test_allocation_is_per_task_and_capped_by_max_depth():
    allocator = Allocator(150.0, depth=10, max_depth=100)
    assert [allocator.next("a") for _ in range(3)] == [100, 100, 100]  # the credit left above max_depth waits
    assert allocator.next("b") == 100 and allocator.credit["a"] == pytest.approx(150.0)
    assert grant(9.9, 0.1, 10, 100) == (10, 0.0)  # ten times 0.1 is a whole judgment despite rounding


def test_a_grant_judged_by_nobody_is_not_spent_and_the_next_query_has_it():
    allocator = Allocator(2.0, depth=10, max_depth=100)
    grants = [allocator.next("t") for _ in range(5)]
    assert grants[-1] == 10 and allocator.spent["t"] == 10
    allocator.refund("t", 10)  # the data directory was full, or the teacher failed
    assert allocator.spent["t"] == 0 and allocator.next("t") == 12  # the refunded credit and this query's 2


def test_rewards_log_drops_a_torn_last_line(tmp_path):
    log = RewardsLog(tmp_path / "rewards.jsonl")
    log.append([Reward("t", "q1", "one", {"d1": 1.0, "d2": 0.5}), Reward("t", "q2", "two", {"d3": 2.0})])
    with open(log.path, "a", encoding="utf-8") as f:
        f.write('{"task": "t", "qid": "q3", "que')  # killed while writing
    assert [r.qid for r in log.read()] == ["q1", "q2"]
    assert log.path.read_text(encoding="utf-8").endswith("}\n")  # the torn line is gone from the file
    log.append([Reward("t", "q3", "three", {"d1": 0.0})])
    assert [r.qid for r in log.read()] == ["q1", "q2", "q3"]


def test_state_versions_ignore_a_half_written_one(tmp_path):
    versions = StateVersions(tmp_path)
    assert list(versions.loadable()) == []
    state = State("global", [(None, None)], np.ones((1, 4), dtype=np.float32), [3], ["t"], {}, {})
    assert versions.save(1, state, None)
    (tmp_path / "state-000002.safetensors.partial").write_bytes(b"half a state")  # a crash mid-write
    [(version, loaded)] = versions.loadable()
    assert version == 1 and loaded.counts == [3]
    x = np.array([[1.0, 0, 0, 0]], dtype=np.float32)
    moved = shift_by_state(loaded, "other", ["q"], x)  # a global state moves every task's queries
    assert np.allclose(moved, (x + 0.75) / np.linalg.norm(x + 0.75))
    task_state = State("task", [("t", None)], np.ones((1, 4), dtype=np.float32), [1], ["t"], {}, {})
    assert shift_by_state(task_state, "other", ["q"], x) is x  # no residual for that task


def status(server: Server) -> dict:
    return server.get("/v1/status")[1]


@pytest.mark.slow
def test_served_queries_teach_a_state_that_serves_later_ones_and_survives_kill_9(
    dense_index, bm25_index, mini_scifact, tmp_path
):
    topics = read_topics(mini_scifact["topics"])
    # query states: each moves only its own query, which the guard's held-back queries cannot tell against
    args = (
        "--index",
        str(dense_index),
        "--teacher",
        "bm25",
        "--budget",
        "5",
        "--learn",
        "query",
        "--threads",
        "1",
        "--data-dir",
        str(tmp_path),
        "--no-mcp",
        "--learn-from-anonymous",
        "--max-key-share",
        "1",
    )
    learn = tmp_path / "learn"
    with Server(*args) as server:
        first = [server.search(dense_index.name, t.text, qid=t.qid, hits=10) for t in topics[:10]]
        assert [a["teacher_calls"] for a in first] == [0, 10] * 5  # b = 5, depth 10: every other query
        assert first[0]["state"] == {"version": 0, "scope": "query"} and first[1]["teacher"] == "bm25"
        learned = wait_until(lambda: (s := status(server)["learning"])["rewards_fitted"] == 5 and s)
        assert learned["version"] >= 1 and learned["rewarded_queries"] == 5 and learned["judgments"] == 50
        assert learned["last_fit"]["held_back"] == 1 and learned["last_fit"]["served"]  # the 1st judged query
        later = server.search(dense_index.name, topics[3].text, qid=topics[3].qid, hits=10)
        assert later["state"]["version"] == learned["version"]
        assert later["teacher_calls"] == 0  # unjudged: only its state moved it
        plain = server.search(dense_index.name, topics[3].text, qid=topics[3].qid, hits=10, rewriter="none")
        assert [c["score"] for c in later["candidates"]] != [c["score"] for c in plain["candidates"]]
        for t in topics[10:20]:
            server.search(dense_index.name, t.text, qid=t.qid, hits=10)
        server.stop(signal.SIGKILL)
    lines = (learn / "rewards.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 10 and all(json.loads(line)["judgments"] for line in lines)
    versions = StateVersions(learn).versions()
    assert versions and all(State.load(learn / f"state-{v:06d}.safetensors") for v in versions)
    store = next((tmp_path / "scores").glob("*.sqlite"))
    db = sqlite3.connect(store)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    pairs = db.execute("SELECT COUNT(*) FROM scores").fetchone()[0]
    db.close()
    assert pairs == 100  # every judged pair was kept as it was paid for
    (learn / f"state-{versions[-1] + 1:06d}.safetensors.partial").write_bytes(b"torn")  # killed mid-write
    (learn / f"state-{versions[-1] + 1:06d}.safetensors").write_bytes(b"\0" * 64)  # a newer version, corrupt
    with open(learn / "rewards.jsonl", "a", encoding="utf-8") as f:
        f.write('{"task": "mini')  # killed mid-line
    with Server(*args) as server:
        # the rewards the last complete version had not seen are refitted at once, from that version
        resumed = wait_until(lambda: (s := status(server)["learning"])["rewards_fitted"] == 10 and s)
        # a new version takes the number after every file on disk, the corrupt one's too
        assert resumed["version"] == (versions[-1] + 2 if resumed["fits"] else versions[-1])
        assert resumed["rewards_received"] == 10 and resumed["rewarded_queries"] == 10
        answer = server.search(dense_index.name, topics[25].text, hits=10)
        assert answer["state"]["version"] == resumed["version"]
        server.stop(signal.SIGTERM)
    skipped = f"skipping state version {versions[-1] + 1}, which does not load"
    assert "".join(server.stderr).count(skipped) == 1  # once: not again through the root logger Pyserini sets up
    assert (learn / "rewards.jsonl").read_text(encoding="utf-8").count("\n") == 10  # the torn line was cut


def learner(
    tmp_path, vectors: dict, scope: str = "global", share: float = 1.0, failing: list | None = None, rule: str = "cv"
):
    """An OnlineLearner over synthetic vectors: ``vectors`` maps query texts and docids to their vectors; the ranking
    rule re-searches every vector whose name is not a query's (``q...``)."""
    from tour_pyserini.ttt.objectives import FitConfig
    from tour_pyserini.ttt.online import OnlineLearner

    search = exact_search(vectors)

    def doc_vectors(task, docids):
        if failing:
            raise failing.pop()
        return np.stack([vectors[d] for d in docids]).astype(np.float32)

    out = OnlineLearner(
        tmp_path,
        scope,
        {"name": "synthetic"},
        encode=lambda t, texts: np.stack([vectors[x] for x in texts]),
        doc_vectors=doc_vectors,
        tasks=["t"],
        fit=FitConfig(steps=100),
        max_key_share=share,
        alpha_rule=rule,
        search=search,
    )
    out.start()
    return out


def exact_search(vectors: dict):
    """The top 10 docids of each query vector among ``vectors``' documents (names not starting with ``q``)."""
    names = [n for n in vectors if not n.startswith("q")]
    D = np.stack([vectors[n] for n in names])

    def search(task, X):
        return [[names[i] for i in np.argsort(-(D @ x), kind="stable")[:10]] for x in X]

    return search


def unit(*v):
    v = np.array(v, dtype=np.float64)
    return v / np.linalg.norm(v)


@pytest.mark.parametrize("teacher_prefers_the_shift", [False, True])
def test_a_state_serves_only_if_held_back_queries_agree_with_the_teacher_as_well(tmp_path, teacher_prefers_the_shift):
    # four fitted queries pull every query towards e1; the held-back one (the first judged) has two candidates the
    # raw query orders z1 > z2, and the pull reverses them
    vectors = {
        "q": unit(1, 0, 0, 0),
        "up": unit(0, 1, 0, 0),
        "down": unit(1, 0, 0, 0),
        "z1": unit(1, -0.1, 0, 0),
        "z2": unit(1, 0.3, 0, 0),
    }
    held = {"z1": 0.0, "z2": 1.0} if teacher_prefers_the_shift else {"z1": 1.0, "z2": 0.0}
    online = learner(tmp_path, vectors)
    online.add(
        [Reward("t", "h", "q", held, "a")]
        + [Reward("t", f"q{i}", "q", {"up": 1.0, "down": 0.0}, c) for i, c in enumerate("abcd")]
    )
    status = wait_until(lambda: online.status()["fits"] and online.status())
    online.close()
    assert status["last_fit"]["held_back"] == 1
    assert status["last_fit"]["serving_agreement"] == (0.0 if teacher_prefers_the_shift else 1.0)
    assert status["last_fit"]["served"] is teacher_prefers_the_shift
    assert status["version"] == (1 if teacher_prefers_the_shift else 0)


def test_a_refit_takes_at_most_each_clients_share_and_query_states_are_their_clients(tmp_path):
    from tour_pyserini.ttt.online import per_client_cap

    assert per_client_cap({"a": 100, "b": 3, "c": 3}, 0.5) == 6 and per_client_cap({"a": 4}, 1.0) == 4
    vectors = {"q": unit(1, 0, 0, 0), "p": unit(0, 1, 0, 0), "up": unit(0, 1, 0, 0), "down": unit(1, 0, 0, 0)}
    online = learner(tmp_path, vectors, scope="query", share=0.5)
    judged = {"up": 1.0, "down": 0.0}
    online.add(
        [Reward("t", "h", "q", judged, "a")]
        + [Reward("t", f"q{i}", "q", judged, "a") for i in range(20)]
        + [Reward("t", "q0", "p", judged, "b")]
    )  # b sends a's qid with its own text
    status = wait_until(lambda: online.status()["fits"] and online.status())
    online.close()
    state = online.current[1]
    # a's fitted queries are capped to b's 1 (a share of 0.5 of two clients' queries), the most recent kept (q19,
    # the 21st judged, is held back); keys are client/qid
    assert state.provenance["online"]["rewarded queries"] == 2 and status["clients"] == 2
    assert sorted(k[1] for k in state.keys) == ["a/q18", "b/q0"]
    x = np.array([vectors["q"]])
    assert np.array_equal(online.shift("t", ["q0"], ["a"], x)[0], x)  # a's q0 was not fitted: no state
    assert not np.array_equal(online.shift("t", ["q0"], ["b"], x)[0], x)  # b's own q0 moves only for b


def test_a_fit_that_fails_is_in_the_status_and_learning_goes_on(tmp_path):
    vectors = {"q": unit(1, 0, 0, 0), "up": unit(0, 1, 0, 0), "down": unit(1, 0, 0, 0)}
    online = learner(tmp_path, vectors, scope="query", failing=[RuntimeError("the index went away")])
    judged = {"up": 1.0, "down": 0.0}
    online.add([Reward("t", "h", "q", judged), Reward("t", "q1", "q", judged)])
    failed = wait_until(lambda: online.status()["error"] and online.status())
    assert "RuntimeError: the index went away" in failed["error"] and failed["version"] == 0
    online.add(
        [
            Reward("t", "q2", "q", {"up": float("nan"), "down": float("nan")}),  # a teacher that scored nothing
            Reward("other-index", "q3", "q", judged),
            Reward("t", "q4", "q", judged),
        ]
    )
    resumed = wait_until(lambda: online.status()["version"] and online.status())
    online.close()
    assert resumed["error"] is None and resumed["rewards_received"] == 5
    assert online.current[1].provenance["online"]["rewarded queries"] == 2  # q1 and q4: q2 unscored, q3 not served


def test_pair_agreement_by_hand():
    from tour_pyserini.ttt.agreement import mean_agreement, pair_agreement

    assert pair_agreement(np.array([3.0, 2.0, 1.0]), np.array([1.0, 0.0, 0.0])) == 1.0
    assert pair_agreement(np.array([1.0, 1.0, 0.0]), np.array([2.0, 1.0, 0.0])) == pytest.approx(2.5 / 3)  # a tie: 1/2
    assert pair_agreement(np.array([0.0, 1.0]), np.array([1.0, 0.0])) == 0.0
    assert np.isnan(pair_agreement(np.array([0.0, 1.0]), np.array([1.0, 1.0])))  # the teacher orders no pair
    X = np.array([[1.0, 0.0], [0.0, 1.0]])
    Z = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert mean_agreement(X, [Z, Z], [np.array([1.0, 0.0]), np.array([1.0, 0.0])]) == 0.5  # (1 + 0) / 2


def test_a_shared_state_that_no_alpha_helps_on_held_out_queries_is_not_served(tmp_path):
    """Each rewarded query prefers a candidate in a direction of its own: cross-validation over them finds no α
    that helps the others, so the fitted state is not served and the status says what was measured."""
    rng = np.random.default_rng(0)
    vectors, rewards = {}, []
    for i in range(16):
        x = unit(*rng.standard_normal(8))
        vectors[f"q{i}"], vectors[f"up{i}"], vectors[f"down{i}"] = (
            x,
            unit(*(x + rng.standard_normal(8))),
            unit(*(x + rng.standard_normal(8))),
        )
        rewards.append(Reward("t", f"q{i}", f"q{i}", {f"up{i}": 1.0, f"down{i}": 0.0}, "a"))
    online = learner(tmp_path, vectors, scope="task")
    online.add(rewards)
    status = wait_until(lambda: online.status()["fits"] and online.status())
    online.close()
    assert status["version"] == 0 and status["states_refused"] == 1 and status["last_fit"]["served"] is False
    assert status["last_fit"]["why"].startswith("cross-validation over the rewarded queries: best held-out")


def test_a_neighbours_state_moves_a_new_query_by_the_rewarded_queries_near_it(tmp_path):
    """Queries near e1 prefer the candidate towards e2: a new query near them, never judged, is moved towards e2."""
    rng = np.random.default_rng(1)
    vectors = {"up": unit(0, 1, 0, 0), "down": unit(1, 0, 0, 0)}
    for i in range(12):
        vectors[f"q{i}"] = unit(*(np.array([1.0, 0, 0, 0]) + 0.2 * rng.standard_normal(4)))
    online = learner(tmp_path, vectors, scope="neighbours")
    online.add([Reward("t", f"q{i}", f"q{i}", {"up": 1.0, "down": 0.0}, "a") for i in range(12)])
    status = wait_until(lambda: online.status()["fits"] and online.status())
    online.close()
    assert status["version"] == 1 and status["last_fit"]["served"] and status["last_fit"]["alpha"] > 0
    state = online.current[1]
    assert state.scope == "neighbours" and state.anchors.shape == (len(state.keys), 4)
    new = np.array([unit(1, 0.05, 0, 0)])
    moved = online.shift("t", ["new"], ["b"], new)[0]
    assert moved @ vectors["up"] > new[0] @ vectors["up"] + 0.05


def test_the_server_judges_a_shared_state_by_its_re_searched_rankings(tmp_path):
    """The server's rule by default: queries near e1 prefer "up" (towards e2) to "down"; the neighbours state that
    moves them towards e2 raises "up" in held-out rewarded queries' re-searched top 10, so it is served, its α
    chosen by the ranking rule (which ``tests/test_ttt_magnitude.py`` shows keeping shorter moves where unjudged
    documents would push the judged ones down)."""
    rng = np.random.default_rng(1)
    vectors = {"up": unit(0.3, 1, 0, 0), "down": unit(1, 0, 0, 0)}
    for i in range(12):
        vectors[f"q{i}"] = unit(*(np.array([1.0, 0, 0, 0]) + 0.2 * rng.standard_normal(4)))
    online = learner(tmp_path, vectors, scope="neighbours", rule="ranking")
    online.add([Reward("t", f"q{i}", f"q{i}", {"up": 1.0, "down": 0.0}, "a") for i in range(12)])
    status = wait_until(lambda: online.status()["fits"] and online.status())
    online.close()
    assert status["alpha_rule"] == "ranking" and status["last_fit"]["served"] and status["last_fit"]["alpha"] > 0
    assert online.current[1].provenance["magnitude"]["rule"] == "ranking"


def test_a_server_learns_by_the_ranking_rule_unless_told_otherwise():
    from tour_pyserini.commands.serve import parser
    from tour_pyserini.serve.engine import ServeConfig

    assert ServeConfig.alpha_rule == "ranking" and parser().parse_args(["--index", "i"]).alpha_rule == "ranking"
    with pytest.raises(SystemExit):
        parser().parse_args(["--index", "i", "--alpha-rule", "count"])  # count does not protect unseen queries


def test_what_a_restart_learns_from_follows_the_rules_of_the_server_restarted(tmp_path):
    """States and rewards written under other flags: a state learned from a client no longer trusted, from another
    teacher's judgments or under a looser share is not served, and those rewards stay in the log, unused."""
    from tour_pyserini.ttt.objectives import FitConfig
    from tour_pyserini.ttt.online import OnlineLearner

    vectors = {"q": unit(1, 0, 0, 0), "up": unit(0, 1, 0, 0), "down": unit(1, 0, 0, 0)}
    judged = {"up": 1.0, "down": 0.0}

    def start(trusted=("a", "b"), teacher="T", share=1.0):
        return OnlineLearner(
            tmp_path,
            "query",
            {"name": "synthetic"},
            encode=lambda t, texts: np.stack([vectors[x] for x in texts]),
            doc_vectors=lambda t, docids: np.stack([vectors[d] for d in docids]).astype(np.float32),
            tasks=["t"],
            fit=FitConfig(steps=20),
            max_key_share=share,
            trusted=lambda client: client in trusted,
            teacher=teacher,
        )

    first = start()
    first.start()
    first.add([Reward("t", f"q{i}", "q", judged, c, "T") for i, c in enumerate("abab")])
    wait_until(lambda: first.status()["version"] == 1)
    first.close()
    assert first.current[1].provenance["online"]["clients"] == ["a", "b"]
    lines = (tmp_path / "rewards.jsonl").read_text().count("\n")

    second = start(trusted=("a",))  # b's key left the key file
    assert second.current == (0, None) and second.status()["rewards_received"] == 2  # a's two
    second.start()
    refitted = wait_until(lambda: second.status()["version"] and second.status())
    second.close()
    assert refitted["version"] == 2 and second.current[1].provenance["online"]["clients"] == ["a"]
    assert {k[1] for k in second.current[1].keys} == {"a/q2"}  # a's q0 is held back; b's queries are gone

    for others in ({"teacher": "U"}, {"trusted": ("a",), "share": 0.5}):  # another teacher; a tighter share
        later = start(**others)
        assert later.current == (0, None)
        later.close()
    assert start(trusted=("a",)).current[0] == 2  # the same rules: version 2 is served again
    assert (tmp_path / "rewards.jsonl").read_text().count("\n") == lines  # nothing was removed from the log
