"""TTT-Embed end to end on a planted shift: the answer is known, so the commands a user runs must find it.

A copy of the fixture's dense index has each judged query's relevant documents replaced by
unit(x_q + γu), x_q the query's own encoding and u one unit direction orthogonal to every query. Plain
search then ranks a relevant document by x_q·z = 1/√(1+γ²) below the query's ordinary neighbours, and a
query moved along u finds it again: unit(x_q + γu) scores it 1, the most a cosine can. Rewards from the
oracle, a task state fitted on 80% of the queries and searched with on the other 20% must therefore
recover u and bring those unseen queries' relevant documents back to the top; and so must the server's online
learner, fed the same queries as a stream.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from tour_pyserini.commands.search import main as search_main
from tour_pyserini.commands.ttt import main as ttt_main
from tour_pyserini.eval.judge import evaluate
from tour_pyserini.files import read_qrels, read_topics
from tour_pyserini.files.runs import read_run
from tour_pyserini.ttt.state import State

pytestmark = pytest.mark.slow

GAMMA = 3.0  # a relevant document scores 1/√10 ≈ 0.32 for plain search: below the top 10, inside the top 100
SEED = 0


def planted_index(source, out, queries: np.ndarray, qids: list[str], qrels, seed: int = SEED) -> np.ndarray:
    """A copy of the dense index ``source`` in ``out`` (same docids, document store and encoder metadata)
    whose relevant documents are moved along one direction u; returns u.

    u is drawn at random, then made orthogonal to every query and to the mean document, so that the plant
    is exactly x_q·z = 1/√(1+γ²) and u·z = γ/√(1+γ²) for each relevant z of x_q, and no query or the
    documents' common direction points along u before the shift. A document relevant to several queries
    is planted from the first of them.
    """
    import faiss

    from tour_pyserini.index.faiss_index import FaissIndexSpec, build, read_vectors

    vectors, docids = read_vectors(source)
    vectors = vectors.astype(np.float64)
    basis, _ = np.linalg.qr(np.column_stack([queries.T, vectors.mean(0)]))
    u = np.random.default_rng(seed).standard_normal(vectors.shape[1])
    u -= basis @ (basis.T @ u)
    u /= np.linalg.norm(u)
    row = {d: i for i, d in enumerate(docids)}
    planted: set[str] = set()
    for qid, x in zip(qids, queries):
        for docid, grade in qrels[qid].items():
            if grade > 0 and docid in row and docid not in planted:
                z = x + GAMMA * u
                vectors[row[docid]] = z / np.linalg.norm(z)
                planted.add(docid)
    shutil.copytree(source, out)
    faiss.write_index(build(vectors.astype(np.float32), FaissIndexSpec()), str(out / "index"))
    return u


@pytest.fixture(scope="module")
def planted(dense_index, mini_scifact, searcher, tmp_path_factory):
    out = tmp_path_factory.mktemp("planted")
    topics = read_topics(mini_scifact["topics"])
    qrels = read_qrels(mini_scifact["qrels"])
    queries = searcher.encode([t.text for t in topics]).astype(np.float64)
    u = planted_index(dense_index, out / "planted", queries, [t.qid for t in topics], qrels)
    order = np.random.default_rng(SEED).permutation(len(topics))
    cut = int(0.8 * len(topics))
    files = {}
    for name, part in (("train", order[:cut]), ("test", order[cut:])):
        files[name] = out / f"{name}.tsv"
        files[name].write_text("".join(f"{topics[i].qid}\t{topics[i].text}\n" for i in sorted(part)))
    return {"index": out / "planted", "u": u, "qrels": qrels, **files}


def cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def search(index, topics, output, *rewriter) -> dict:
    search_main(["--index", str(index), "--topics", str(topics), "--output", str(output), "--hits", "10", *rewriter])
    return read_run(output)


def test_a_task_state_recovers_the_planted_direction(planted, mini_scifact, tmp_path):
    """Rewards on the base top 100 (where the relevant documents are), a task state, the unseen queries."""
    rewards, state_file = tmp_path / "r.tsv", tmp_path / "s.safetensors"
    ttt_main(
        [
            "rewards",
            "--index",
            str(planted["index"]),
            "--topics",
            str(planted["train"]),
            "--teacher",
            f"oracle:{mini_scifact['qrels']}",
            "--budget",
            "100",
            "--output",
            str(rewards),
        ]
    )
    ttt_main(["fit", "--rewards", str(rewards), "--scope", "task", "--output", str(state_file)])
    state = State.load(state_file)
    assert state.counts == [32]
    # measured 0.923 (|v| 0.525, 0.484 of it along u); most of the rest points away from the mean document, which
    # the plant also shortens in each relevant document (to 1/√(1+γ²) of x_q's): a second shared displacement
    assert cosine(state.vectors[0], planted["u"]) >= 0.9
    qrels = {t.qid: planted["qrels"][t.qid] for t in read_topics(planted["test"])}
    plain = evaluate(qrels, search(planted["index"], planted["test"], tmp_path / "plain.trec")).means
    moved = evaluate(
        qrels,
        search(
            planted["index"],
            planted["test"],
            tmp_path / "ttt.trec",
            "--rewriter",
            "ttt-embed",
            "--state",
            str(state_file),
        ),
    ).means
    # measured: RR@10 0.052 -> 1.0, nDCG@10 0.121 -> 1.0 on the 8 unseen queries
    # the plant hides the relevant documents: below the top 10 for 26 of the 40 queries (in the top 100 for 39)
    assert plain["RR@10"] < 0.3 and plain["nDCG@10"] < 0.3
    assert moved["RR@10"] > 0.8 and moved["nDCG@10"] > 0.8  # the state finds them for queries it never saw


def test_the_servers_online_learner_recovers_the_planted_shift(planted, mini_scifact, searcher, tmp_path):
    """``serve --learn task``: the training queries are served, each judged on its top 100 as served, and the
    server refits its task state in the background; the state it serves last is then searched with on the
    unseen queries (served by the server, they would be judged and re-ranked by the oracle too)."""
    from serve_server import Server, wait_until

    from tour_pyserini.ttt.fitting import RewardedQuery, fit_scope
    from tour_pyserini.ttt.online import HELD_BACK, RewardsLog, StateVersions
    from tour_pyserini.ttt.vectors import DocVectors

    index, train = planted["index"], read_topics(planted["train"])
    with Server(
        "--index",
        str(index),
        "--teacher",
        f"oracle:{mini_scifact['qrels']}",
        "--budget",
        "100",
        "--learn",
        "task",
        "--threads",
        "1",
        "--data-dir",
        str(tmp_path),
        "--no-mcp",
        "--learn-from-anonymous",
        "--max-key-share",
        "1",
    ) as server:
        # one query at a time, each fitted before the next is served: the states fitted, and so the one served
        # last, do not depend on how fast this machine fits
        for i, t in enumerate(train, 1):
            assert server.search(index.name, t.text, qid=t.qid, hits=10)["teacher_calls"] == 100
            learned = wait_until(
                lambda i=i: (s := server.get("/v1/status")[1]["learning"])["rewards_fitted"] == i and s
            )
        server.stop()
    versions = StateVersions(tmp_path / "learn")
    version, state = next(versions.loadable())
    assert version == learned["version"] >= 1
    qrels = {t.qid: planted["qrels"][t.qid] for t in read_topics(planted["test"])}
    plain = evaluate(qrels, search(index, planted["test"], tmp_path / "plain.trec")).means
    moved = evaluate(
        qrels,
        search(
            index,
            planted["test"],
            tmp_path / "ttt.trec",
            "--rewriter",
            "ttt-embed",
            "--state",
            str(versions.path(version)),
        ),
    ).means
    # measured: RR@10 0.052 -> 1.0, nDCG@10 0.121 -> 1.0 on the 8 unseen queries
    assert plain["RR@10"] < 0.3 and moved["RR@10"] > 0.8 and moved["nDCG@10"] > 0.8
    # The served state is what a cold fit of its rewards gives (the log, the raw query vectors and the warm-started
    # refits lose nothing). Its cosine with u (measured 0.736) is lower than the offline state's because the server
    # judges the top 100 as served: once a state moves queries along u, those hold nearly every other query's
    # planted documents, judged 0 and themselves along u, so u no longer separates what the teacher prefers; the
    # same fit without those judgments recovers u (measured 0.925).
    seen = state.provenance["online"]["rewards"]  # the rewards its fit had received; every 5th one is held back
    records = [r for i, r in enumerate(RewardsLog(tmp_path / "learn" / "rewards.jsonl").read()[:seen]) if i % HELD_BACK]
    # the state served last came from the first 22 rewarded queries (measured: 17 fitted on, state version 16,
    # the same under ATEN_CPU_CAPABILITY=avx2): its α (chosen by cross-validation over them) already orders the
    # held-back queries' candidates as the teacher does, and later states, fitted on judgments that include other
    # queries' planted documents, agree a little less and are not served
    assert state.counts == [len(records)] and len(records) >= 10
    assert state.alpha_rule == "ranking" and state.alphas[0] > 0  # the server's default rule
    vectors, docs = searcher.encode([r.text for r in records]), DocVectors(index)
    planted_docs = {d for judged in planted["qrels"].values() for d in judged}

    def fitted(keep) -> np.ndarray:
        queries = []
        for r, x in zip(records, vectors):
            judged = {d: score for d, score in r.judgments.items() if keep(r.qid, d)}
            queries.append(RewardedQuery(r.task, r.qid, x, docs.get(list(judged)), np.array(list(judged.values()))))
        return fit_scope(queries, "task")[1][0]

    assert cosine(state.vectors[0], fitted(lambda q, d: True)) > 0.99
    assert cosine(fitted(lambda q, d: d in planted["qrels"][q] or d not in planted_docs), planted["u"]) >= 0.9
