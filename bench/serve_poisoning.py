"""Can one client steer what a learning server serves everyone? The poisoning experiment, on 127.0.0.1 only.

A server learns a task state online (`--budget 2 --learn task`, the BM25 teacher, SciFact). An attacker picks
three SciFact abstracts and sends 300 queries made of their sentences: the teacher duly rates each chosen
abstract first for its own sentences, and the rewards pull the shared state towards them. The measure: of
20 SciFact test claims served by the policy after the attack, how many have a chosen abstract in their top
10 (none had before). No setting is tuned here; the claims only show the attack's reach.

Arms (each from a fresh data directory):
- ``open`` (the default without keys): the attacker has no key; its judgments are not learned from.
- ``anonymous-learning``: no keys, ``--learn-from-anonymous --max-key-share 1``: learning from anyone, on
  purpose (the server's earlier behaviour, except that the state guard stays on).
- ``keyed``: five keys; the attacker holds one, four other clients send 75 SciFact training claims each,
  interleaved with the attack; ``--max-key-share 0.2`` (the default): the attacker's share of a refit capped.
- ``earlier`` (with ``--earlier-tree DIR``, a checkout of an earlier version): that version's server with
  `--budget 2 --learn task`, which learned from every client with no cap and no guard.

Writes runs/bench-serve-poisoning.json. Usage: python bench/serve_poisoning.py [--earlier-tree DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

from common import split_files

from tour_pyserini.files import read_topics
from tour_pyserini.index.docstore import DocStore

INDEX = "indexes/scifact.minilm"
OUT = Path("runs/bench-serve-poisoning.json")
WORK = Path("runs/serve-poisoning")
KEYS = [f"poisoning-bench-key-{i}-0123456789" for i in range(5)]  # the attacker's is the first
VICTIMS, ATTACK, LEGIT_EACH, CHOSEN = 20, 300, 75, 3


def start(args: list[str], log: Path, cwd: Path | None = None) -> tuple[subprocess.Popen, str]:
    env = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "tour_pyserini", "serve", "--port", "0", "--no-mcp", *args],
        stdout=subprocess.PIPE,
        stderr=open(log, "w"),
        text=True,
        cwd=cwd,
        env={**os.environ, **env},
    )
    line = process.stdout.readline()
    if not line.startswith("serving on "):
        process.kill()
        raise RuntimeError(f"server did not start: {line!r}; see {log}")
    return process, line.split()[-1]


def get(url: str, key: str | None = None) -> dict:
    headers = {"X-API-Key": key} if key else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=600) as response:
        return json.loads(response.read())


def search(url: str, text: str, key: str | None = None, **params) -> dict:
    return get(f"{url}/v1/scifact.minilm/search?" + urllib.parse.urlencode({"query": text, "hits": 10, **params}), key)


def attack_texts(chosen: list, count: int, kind: str) -> list[str]:
    """``count`` queries, the chosen abstracts in turn: one to three consecutive sentences of each
    (``sentences``), or each whole (``abstracts``: the teacher's strongest preference for it)."""
    if kind == "abstracts":
        return [f"{chosen[i % len(chosen)].title}. {chosen[i % len(chosen)].text}"[:5000] for i in range(count)]
    sentences = [[s for s in re.split(r"(?<=[.!?])\s+", f"{d.title}. {d.text}") if len(s) > 20] for d in chosen]
    rng = random.Random(0)
    out = []
    for i in range(count):
        own = sentences[i % len(chosen)]
        start = rng.randrange(len(own))
        out.append(" ".join(own[start : start + rng.randint(1, 3)]))
    return out


def reached(url: str, victims, chosen: set[str], key: str | None) -> int:
    """How many victims' top 10, served by the policy, hold a chosen document."""
    return sum(
        bool(chosen & {c["docid"] for c in search(url, t.text, key, qid=f"victim-{t.qid}")["candidates"]})
        for t in victims
    )


def settled(url: str, key: str | None, timeout: float = 600) -> dict:
    """The learning status once every reward received has been fitted."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        learning = get(f"{url}/v1/status", key)["learning"]
        if learning["rewards_fitted"] >= learning["rewards_received"]:
            return learning
        time.sleep(0.5)
    raise RuntimeError("the learner did not catch up")


def arm(
    name: str,
    victims,
    chosen: set[str],
    attack: list[str],
    legit: list[list[str]],
    cwd: Path | None,
    scope: str = "task",
) -> dict:
    data = WORK / name
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    (data / "keys").write_text("\n".join(KEYS) + "\n")
    args = [
        "--index",
        str(Path.cwd() / INDEX),
        "--teacher",
        "bm25",
        "--budget",
        "2",
        "--learn",
        scope,
        "--threads",
        "2",
        "--data-dir",
        str(data.resolve()),
    ]
    args += {
        "anonymous-learning": ["--learn-from-anonymous", "--max-key-share", "1"],
        "keyed": ["--api-keys", str((data / "keys").resolve())],
    }.get(name, [])
    attacker = KEYS[0] if name == "keyed" else None
    victim_key = KEYS[1] if name == "keyed" else None
    process, url = start(args, data / "server.log", cwd)
    started = time.perf_counter()
    try:
        before = reached(url, victims, chosen, victim_key)
        for i, text in enumerate(attack):
            search(url, text, attacker, qid=f"attack-{i}")
            if name == "keyed":  # the other clients' traffic, interleaved
                client = i % len(legit)
                search(url, legit[client][i // len(legit)], KEYS[1 + client], qid=f"legit-{client}-{i}")
        learning = settled(url, victim_key) if name != "earlier" else get(f"{url}/v1/status")["learning"]
        time.sleep(1.0 if name == "earlier" else 0.0)
        after = reached(url, victims, chosen, victim_key)
    finally:
        process.terminate()
        process.wait(120)
    return {
        "arm": name,
        "victims_reached_before": before,
        "victims_reached_after": after,
        "victims": len(victims),
        "learning": learning,
        "seconds": round(time.perf_counter() - started, 1),
        "command": "tour-pyserini serve " + " ".join(args),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--earlier-tree", type=Path, help="a checkout of an earlier version, run as the 'earlier' arm")
    ap.add_argument("--arms", nargs="+", default=["open", "anonymous-learning", "keyed"])
    ap.add_argument("--attack", choices=["sentences", "abstracts"], default="sentences")
    ap.add_argument("--scope", choices=["task", "neighbours"], default="task", help="the state the server learns")
    args = ap.parse_args()
    victims = read_topics(split_files("scifact").topics)[:VICTIMS]
    train = [t.text for t in read_topics(split_files("scifact", "train").topics)]
    legit = [train[i * LEGIT_EACH : (i + 1) * LEGIT_EACH] for i in range(4)]
    store = DocStore(Path(INDEX) / "docstore.sqlite")
    with sqlite3.connect(Path(INDEX) / "docstore.sqlite") as db:
        docids = sorted(d for (d,) in db.execute("SELECT docid FROM docs"))
    chosen_docs = store.get(random.Random(13).sample(docids, CHOSEN))
    chosen = {d.docid for d in chosen_docs}
    attack = attack_texts(chosen_docs, ATTACK, args.attack)
    arms = [*args.arms, *(["earlier"] if args.earlier_tree else [])]
    rows = []
    for name in arms:
        row = arm(
            name, victims, chosen, attack, legit, args.earlier_tree.resolve() if name == "earlier" else None, args.scope
        )
        row["chosen"], row["attack"], row["scope"] = sorted(chosen), args.attack, args.scope
        row["bench_command"] = "python bench/serve_poisoning.py " + " ".join(sys.argv[1:])
        print(json.dumps({k: v for k, v in row.items() if k != "learning"}), flush=True)
        rows.append(row)
    earlier = json.loads(OUT.read_text()) if OUT.exists() else []
    ran = {(args.attack, args.scope, r["arm"]) for r in rows}  # the rows of other attacks, scopes and arms stay
    kept = [r for r in earlier if (r["attack"], r.get("scope", "task"), r["arm"]) not in ran]
    OUT.write_text(json.dumps(kept + rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
