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
from tour_pyserini.serve.allocation import Allocator, grant
from tour_pyserini.serve.learning import Reward, RewardsLog, StateVersions, shift_by_state
from tour_pyserini.ttt.state import State


@pytest.mark.parametrize("budget, grants", [
    (2.0, [0, 0, 0, 0, 10, 0, 0, 0, 0, 10]),  # b <= depth: every (depth / b)-th query gets depth
    (10.0, [10] * 10),
    (2.5, [0, 0, 0, 10, 0, 0, 0, 10, 0, 0]),
    (25.0, [25] * 10),  # b above depth: each query takes the whole judgments its credit holds
    (0.1, [0] * 10),
])  # fmt: skip
def test_allocation_in_arrival_order(budget, grants):
    allocator = Allocator(budget, depth=10, max_depth=100)
    assert [allocator.next("t") for _ in grants] == grants
    assert allocator.spent["t"] <= budget * len(grants) and allocator.served["t"] == len(grants)


def test_allocation_is_per_task_and_capped_by_max_depth():
    allocator = Allocator(150.0, depth=10, max_depth=100)
    assert [allocator.next("a") for _ in range(3)] == [100, 100, 100]  # the credit left above max_depth waits
    assert allocator.next("b") == 100 and allocator.credit["a"] == pytest.approx(150.0)
    assert grant(9.9, 0.1, 10, 100) == (10, 0.0)  # ten times 0.1 is a whole judgment despite rounding


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
    assert versions.latest() == (0, None)
    state = State("global", [(None, None)], np.ones((1, 4), dtype=np.float32), [3], ["t"], {}, {})
    versions.save(1, state)
    (tmp_path / "state-000002.safetensors.partial").write_bytes(b"half a state")  # a crash mid-write
    version, loaded = versions.latest()
    assert version == 1 and loaded.counts == [3]
    x = np.array([[1.0, 0, 0, 0]], dtype=np.float32)
    moved = shift_by_state(loaded, "other", ["q"], x)  # a global state moves every task's queries
    assert np.allclose(moved, (x + 0.75) / np.linalg.norm(x + 0.75))
    task_state = State("task", [("t", None)], np.ones((1, 4), dtype=np.float32), [1], ["t"], {}, {})
    assert shift_by_state(task_state, "other", ["q"], x) is x  # no residual for that task


def status(server: Server) -> dict:
    return server.get("/v1/status")[1]


@pytest.mark.slow
def test_served_queries_teach_a_state_that_serves_later_ones_and_survives_kill_9(dense_index, bm25_index,
                                                                                  mini_scifact, tmp_path):  # fmt: skip
    topics = read_topics(mini_scifact["topics"])
    args = ("--index", str(dense_index), "--teacher", "bm25", "--budget", "5", "--learn", "task", "--threads", "1",
            "--data-dir", str(tmp_path), "--no-mcp")  # fmt: skip
    learn = tmp_path / "learn"
    with Server(*args) as server:
        first = [server.search(dense_index.name, t.text, qid=t.qid, hits=10) for t in topics[:10]]
        assert [a["teacher_calls"] for a in first] == [0, 10] * 5  # b = 5, depth 10: every other query
        assert first[0]["state"] == {"version": 0, "scope": "task"} and first[1]["teacher"] == "bm25"
        learned = wait_until(lambda: (s := status(server)["learning"])["rewards_fitted"] == 5 and s)
        assert learned["version"] >= 1 and learned["rewarded_queries"] == 5 and learned["judgments"] == 50
        later = server.search(dense_index.name, topics[0].text, qid=topics[0].qid, hits=10)
        assert later["state"]["version"] == learned["version"]
        assert later["teacher_calls"] == 0  # unjudged: only the state moved it
        assert [c["score"] for c in later["candidates"]] != [c["score"] for c in first[0]["candidates"]]
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
    with open(learn / "rewards.jsonl", "a", encoding="utf-8") as f:
        f.write('{"task": "mini')  # killed mid-line
    with Server(*args) as server:
        # the rewards the last complete version had not seen are refitted at once, from that version
        resumed = wait_until(lambda: (s := status(server)["learning"])["rewards_fitted"] == 10 and s)
        assert resumed["version"] == versions[-1] + (1 if resumed["fits"] else 0)
        assert resumed["rewards_received"] == 10 and resumed["rewarded_queries"] == 10
        answer = server.search(dense_index.name, topics[25].text, hits=10)
        assert answer["state"]["version"] == resumed["version"]
        server.stop(signal.SIGTERM)
    assert (learn / "rewards.jsonl").read_text(encoding="utf-8").count("\n") == 10  # the torn line was cut
