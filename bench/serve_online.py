"""Online TTT-Embed served: does a stream of queries served with learning end better than without, at the same
teacher budget?

For each collection, a stream of queries (a seeded permutation of its topics) is sent one by one to a real
`tour-pyserini serve` on 127.0.0.1, twice: with `--budget B` alone (the teacher judges and re-ranks the top
candidates of the share of queries the budget pays for; nothing is kept) and with `--budget B --learn SCOPE`
(the same, and the judgments refit a TTT-Embed state in the background that moves every later query). Both
arms spend the same judgments per query. The later half of the stream is compared query by query (paired
t-test and randomisation test; eval/significance.py), as are the earlier half and the judged and unjudged
queries of the later half. No setting is tuned on the test queries: budget, scope and the fit's
hyper-parameters are TTT-Embed's defaults, and the same protocol is run on a stream of training queries
first (the "train" rows), where any choice would be made. Both arms of a stream share one score store, so
a pair both judge is paid for once.

Writes runs/bench-serve-online.json (one row per collection, stream, budget, scope and teacher, with the
command that made it). Usage: python bench/serve_online.py [--collections scifact nq-oracle] [--budget 2]
[--scope task] [--train-queries 400] [--oracle]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import numpy as np
from common import split_files

from tour_pyserini.eval.answers import AnswerJudge, AnswerMatcher
from tour_pyserini.eval.judge import QrelsJudge
from tour_pyserini.eval.significance import paired_t_test, randomization_test, win_tie_loss
from tour_pyserini.files import read_qrels, read_topics
from tour_pyserini.index.docstore import DocStore

COLLECTIONS = {
    "scifact": {
        "index": "indexes/scifact.minilm",
        "teacher": "ensemble:models/scifact-rce/ensemble.json",
        "train": split_files("scifact", "train").topics,
        "test": split_files("scifact", "test").topics,
        "qrels": {split: split_files("scifact", split).qrels for split in ("train", "test")},
        "metric": "nDCG@10",
        "hits": 100,
    },
    "nq-oracle": {
        "index": "indexes/nq-oracle.minilm",
        "teacher": "ensemble:models/nq-oracle-ce/ensemble.json",
        "train": split_files("nq-oracle", "train").topics,
        "test": split_files("nq-oracle", "test").topics,
        "metric": "Acc@1",
        "hits": 20,
    },
}
OUT = Path(os.environ.get("SERVE_ONLINE_OUT", "runs/bench-serve-online.json"))
WORK = Path("runs/serve-online")


def start_server(args: list[str], log: Path) -> tuple[subprocess.Popen, str]:
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


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=600) as response:
        return json.loads(response.read())


def teacher_of(collection: str, split: str, oracle: bool) -> str:
    """The collection's shipped teacher, or its labels (an upper bound: ``--oracle``)."""
    spec = COLLECTIONS[collection]
    return f"oracle:{spec['qrels'][split]}" if oracle else spec["teacher"]


def serve_stream(
    collection: str, split: str, topics, *, budget: float, learn: str | None, threads: int, teacher: str
) -> dict:
    """Send ``topics`` in order to a fresh server; each query's ranking, teacher calls and state version."""
    spec = COLLECTIONS[collection]
    data = WORK / f"{collection}.{split}" / ("oracle" if teacher.startswith("oracle:") else "teacher")
    shutil.rmtree(data / "learn", ignore_errors=True)  # each learning arm starts from no state
    data.mkdir(parents=True, exist_ok=True)
    # the stream is one client without a key: learning from it is said on purpose
    learning = ["--learn", learn, "--learn-from-anonymous", "--max-key-share", "1"] if learn else []
    args = [
        "--index",
        spec["index"],
        "--teacher",
        teacher,
        "--budget",
        str(budget),
        "--data-dir",
        str(data),
        "--threads",
        str(threads),
        *learning,
    ]
    process, url = start_server(args, data / f"server.{'learn' if learn else 'rerank'}.log")
    rows, start = [], time.perf_counter()
    try:
        for topic in topics:
            query = urllib.parse.urlencode({"query": topic.text, "qid": topic.qid, "hits": spec["hits"]})
            answer = get(f"{url}/v1/{Path(spec['index']).name}/search?{query}")
            rows.append(
                {
                    "qid": topic.qid,
                    "ranking": {c["docid"]: c["score"] for c in answer["candidates"]},
                    "teacher_calls": answer["teacher_calls"],
                    "version": (answer["state"] or {}).get("version"),
                }
            )
        status = get(f"{url}/v1/status")
    finally:
        process.terminate()
        process.wait(120)
    return {"rows": rows, "seconds": time.perf_counter() - start, "status": status, "command": " ".join(args)}


def per_query(collection: str, split: str, topics, run: dict[str, dict[str, float]]) -> dict[str, float]:
    spec = COLLECTIONS[collection]
    if "qrels" in spec:
        judge = QrelsJudge(read_qrels(spec["qrels"][split]), [spec["metric"]], [t.qid for t in topics])
        values = judge.per_query(run)[spec["metric"]]
    else:
        matcher = AnswerMatcher(DocStore(Path(spec["index"]) / "docstore.sqlite"))
        values = AnswerJudge(topics, matcher, (1, 5, 20)).per_query(run)[spec["metric"]]
    return {qid: float(v) for qid, v in values.items()}


def compare(learned: dict[str, float], baseline: dict[str, float], qids: list[str]) -> dict:
    qids = [q for q in qids if q in learned and q in baseline]
    a, b = [learned[q] for q in qids], [baseline[q] for q in qids]
    if not qids:
        return {"queries": 0}
    return {
        "queries": len(qids),
        "learn": float(np.mean(a)),
        "no_learn": float(np.mean(b)),
        "delta": float(np.mean(a) - np.mean(b)),
        "p_t": paired_t_test(a, b),
        "p_rand": randomization_test(a, b),
        "win_tie_loss": win_tie_loss(a, b),
    }


def experiment(collection: str, split: str, args: argparse.Namespace) -> dict:
    spec = COLLECTIONS[collection]
    topics = read_topics(spec[split])
    order = np.random.default_rng(0).permutation(len(topics))
    limit = args.train_queries if split == "train" else len(topics)
    topics = [topics[i] for i in order[:limit]]
    teacher = teacher_of(collection, split, args.oracle)
    arms = {
        arm: serve_stream(
            collection, split, topics, budget=args.budget, learn=learn, threads=args.threads, teacher=teacher
        )
        for arm, learn in (("no_learn", None), ("learn", args.scope))
    }
    values = {
        arm: per_query(collection, split, topics, {r["qid"]: r["ranking"] for r in out["rows"]})
        for arm, out in arms.items()
    }
    qids = [t.qid for t in topics]
    half = len(qids) // 2
    judged = {r["qid"] for r in arms["learn"]["rows"] if r["teacher_calls"]}
    later = qids[half:]
    learn_rows = arms["learn"]["rows"]
    return {
        "collection": collection,
        "split": split,
        "metric": spec["metric"],
        "teacher": teacher,
        "budget": args.budget,
        "scope": args.scope,
        "queries": len(qids),
        "later_half": compare(values["learn"], values["no_learn"], later),
        "earlier_half": compare(values["learn"], values["no_learn"], qids[:half]),
        "later_unjudged": compare(values["learn"], values["no_learn"], [q for q in later if q not in judged]),
        "later_judged": compare(values["learn"], values["no_learn"], [q for q in later if q in judged]),
        "judgments": {arm: sum(r["teacher_calls"] for r in out["rows"]) for arm, out in arms.items()},
        "final_state_version": learn_rows[-1]["version"],
        "learning": arms["learn"]["status"]["learning"],
        "served_by_version_0": sum(r["version"] == 0 for r in learn_rows),
        "seconds": {arm: round(out["seconds"], 1) for arm, out in arms.items()},
        "commands": {arm: f"tour-pyserini serve {out['command']}" for arm, out in arms.items()},
    }


def table(rows: list[dict]) -> str:
    """The rows as docs/serve.md shows them: the later half of each stream, learning against not learning."""

    def cell(c: dict) -> str:
        return f"{c['delta']:+.4f} ({c['p_t']:.2f})" if c["queries"] else "–"

    head = (
        "| collection | teacher | stream | b | scope | queries | later half: learn | without | Δ | p (t) "
        "| p (rand.) | W/T/L | later unjudged Δ (p) | earlier half Δ (p) | last version (refused) |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in sorted(
        rows,
        key=lambda r: (
            r["collection"] != "scifact",
            "oracle" in r["teacher"],
            r["budget"],
            r["scope"],
            r["split"] != "train",
        ),
    ):
        later, learning = r["later_half"], r["learning"]
        teacher = "labels (oracle: upper bound)" if r["teacher"].startswith("oracle") else "shipped ensemble"
        lines.append(
            f"| {r['collection']} ({r['metric']}) | {teacher} | {r['split']} | {r['budget']:g} | {r['scope']} "
            f"| {r['queries']} | {later['learn']:.4f} | {later['no_learn']:.4f} | **{later['delta']:+.4f}** "
            f"| {later['p_t']:.3f} | {later['p_rand']:.3f} | {'/'.join(map(str, later['win_tie_loss']))} "
            f"| {cell(r['later_unjudged'])} | {cell(r['earlier_half'])} | {r['final_state_version']} "
            f"({learning.get('states_refused', '–')}) |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collections", nargs="+", default=list(COLLECTIONS), choices=list(COLLECTIONS))
    ap.add_argument("--splits", nargs="+", default=["train", "test"], choices=["train", "test"])
    ap.add_argument(
        "--budget", type=float, default=2.0, help="judgments per served query (2: every fifth query gets 10)"
    )
    ap.add_argument("--scope", default="task", choices=["global", "task", "neighbours"])
    ap.add_argument("--train-queries", type=int, default=400, help="length of the training stream")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--oracle",
        action="store_true",
        help="the labels as the teacher (qrels collections only): an "
        "upper bound, not a system; shows what the learning does with rewards that carry the truth",
    )
    ap.add_argument("--report", action="store_true", help="print the table of the rows recorded so far, and exit")
    args = ap.parse_args()
    results = json.loads(OUT.read_text()) if OUT.exists() else {"rows": []}
    if args.report:
        print(table(results["rows"]))
        return
    for collection in args.collections:
        for split in args.splits:
            row = experiment(collection, split, args)
            key = (collection, split, args.budget, args.scope, row["teacher"])
            results["rows"] = [
                r
                for r in results["rows"]
                if (r["collection"], r["split"], r["budget"], r["scope"], r["teacher"]) != key
            ] + [row]
            row["bench_command"] = "python bench/serve_online.py " + " ".join(sys.argv[1:])
            OUT.write_text(json.dumps(results, indent=1) + "\n")
            later = row["later_half"]
            print(
                f"{collection} {split}: later half {row['metric']} learn {later['learn']:.4f} no-learn "
                f"{later['no_learn']:.4f} (delta {later['delta']:+.4f}, p {later['p_t']:.3f}); judgments "
                f"{row['judgments']}, state version {row['final_state_version']}",
                flush=True,
            )


if __name__ == "__main__":
    main()
