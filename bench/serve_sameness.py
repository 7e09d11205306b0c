"""HTTP search = the search command, on SciFact test: the same flags, compared by the sameness rule.

The search command writes a run for dense search, Rocchio, tour-soft (k 20) with the BM25 teacher and a
TTT-Embed task state (fitted on BM25 rewards of the training claims, 2 judgments per claim); a `tour-pyserini
serve` on 127.0.0.1 answers every test claim with the same parameters, from 8 clients at once (so its batches
are not the command's); tour_pyserini.files.sameness compares them. Both run with --threads 1.

Writes runs/bench-serve-sameness.json. Usage: python bench/serve_sameness.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tour_pyserini.files.runs import read_run
from tour_pyserini.files.sameness import diff_runs
from tour_pyserini.files.topics import read_topics

INDEX = "indexes/scifact.minilm"
TOPICS = "collections/scifact/topics.test.tsv"
WORK = Path("runs/serve-sameness")
OUT = Path("runs/bench-serve-sameness.json")
CONFIGS = {
    "dense": ([], {}),
    "rocchio": (["--rewriter", "rocchio"], {"rewriter": "rocchio"}),
    "tour-soft-bm25": (
        ["--rewriter", "tour-soft", "--teacher", "bm25", "--depth", "20"],
        {"rewriter": "tour-soft", "teacher": "bm25", "depth": "20"},
    ),
    "ttt-embed": (["--rewriter", "ttt-embed", "--state", str(WORK / "state.safetensors")], {"rewriter": "ttt-embed"}),
}
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"}


def command(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "tour_pyserini", *args], check=True, env=ENV, stderr=subprocess.DEVNULL)


def http_run(url: str, topics, params: dict) -> dict[str, dict[str, float]]:
    def one(topic):
        query = urllib.parse.urlencode({"query": topic.text, "qid": topic.qid, "hits": 100, **params})
        with urllib.request.urlopen(f"{url}/v1/{Path(INDEX).name}/search?{query}", timeout=600) as response:
            return topic.qid, {c["docid"]: c["score"] for c in json.loads(response.read())["candidates"]}

    with ThreadPoolExecutor(8) as pool:
        return dict(pool.map(one, topics))


def main() -> None:
    WORK.mkdir(parents=True, exist_ok=True)
    command(
        "ttt",
        "rewards",
        "--index",
        INDEX,
        "--topics",
        "collections/scifact/topics.train.tsv",
        "--teacher",
        "bm25",
        "--budget",
        "2",
        "--task",
        "scifact",
        "--output",
        str(WORK / "rewards.tsv"),
    )
    command(
        "ttt",
        "fit",
        "--rewards",
        str(WORK / "rewards.tsv"),
        "--scope",
        "task",
        "--output",
        str(WORK / "state.safetensors"),
    )
    serve = [
        "--index",
        INDEX,
        "--teacher",
        "bm25",
        "--state",
        str(WORK / "state.safetensors"),
        "--threads",
        "1",
        "--data-dir",
        str(WORK / "data"),
        "--no-mcp",
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", "tour_pyserini", "serve", "--port", "0", *serve],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    url = process.stdout.readline().split()[-1]
    rows, topics = [], read_topics(TOPICS)
    try:
        for name, (flags, params) in CONFIGS.items():
            run = WORK / f"{name}.trec"
            search = ["search", "--index", INDEX, "--topics", TOPICS, "--output", str(run), "--hits", "100"]
            command(*search, "--threads", "1", "--no-resume", *flags)
            diff = diff_runs(read_run(run), http_run(url, topics, params))
            rows.append(
                {
                    "config": name,
                    **diff.to_json(),
                    "search": "tour-pyserini " + " ".join([*search, *flags]),
                    "params": params,
                }
            )
            print(name, diff.summary(), flush=True)
    finally:
        process.terminate()
        process.wait(120)
    OUT.write_text(json.dumps({"serve": "tour-pyserini serve " + " ".join(serve), "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
