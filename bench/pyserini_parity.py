"""Parity with Pyserini's own tools on the full collections, in one run.

1. ``--rewriter rocchio`` / ``avg-prf`` against ``python -m pyserini.search.faiss --prf-method rocchio|avg``
   on SciFact test (same index, topics, encoder settings, PRF parameters).
2. DPR answer accuracy against ``python -m pyserini.eval.evaluate_dpr_retrieval`` on nq-oracle test, for
   the dense and the BM25 run, on DPR-format files made from the runs.
3. Qrels metrics against Anserini's ``trec_eval -c`` on a SciFact run with the last 50 queries removed.

Writes runs/bench-parity.json. Usage: python bench/pyserini_parity.py
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from wrapper_overhead import ROOT, compare_rankings, ensure_indexes, timed_run

PY = sys.executable


def prf_parity(tmp: Path) -> dict:
    from tour_pyserini.encoders import bundled_model_dir

    common = [
        "--index",
        "indexes/scifact.minilm",
        "--topics",
        "collections/scifact/topics.test.tsv",
        "--hits",
        "1000",
        "--prf-depth",
        "5",
    ]
    out = {}
    for ours_name, method, extra in (("rocchio", "rocchio", ["--rocchio-bottomk", "1"]), ("avg-prf", "avg", [])):
        ours, theirs = tmp / f"{ours_name}.trec", tmp / f"{method}.pyserini.trec"
        timed_run(
            [
                PY,
                "-m",
                "tour_pyserini.search",
                *common,
                *extra,
                "--rewriter",
                ours_name,
                "--output",
                str(ours),
                "--no-resume",
            ]
        )
        timed_run(
            [
                PY,
                "-m",
                "tour_pyserini",
                "run-pyserini",
                "pyserini.search.faiss",
                *common,
                *extra,
                "--prf-method",
                method,
                "--encoder",
                str(bundled_model_dir()),
                "--encoder-class",
                "auto",
                "--pooling",
                "mean",
                "--l2-norm",
                "--output",
                str(theirs),
            ]
        )
        out[ours_name] = compare_rankings(ours, theirs)
    return out


def answer_parity(tmp: Path) -> dict:
    from tour_pyserini.eval.answers import AnswerMatcher, answer_accuracy
    from tour_pyserini.files import read_topics
    from tour_pyserini.files.runs import read_run
    from tour_pyserini.index import DocStore

    topics = read_topics("collections/nq-oracle/topics.test.jsonl")
    store = DocStore("indexes/nq-oracle.minilm/docstore.sqlite")
    out = {}
    for name, index in (("dense", "indexes/nq-oracle.minilm"), ("bm25", "indexes/nq-oracle.bm25")):
        run_path = tmp / f"nq-oracle.{name}.trec"
        timed_run(
            [
                PY,
                "-m",
                "tour_pyserini.search",
                "--index",
                index,
                "--topics",
                "collections/nq-oracle/topics.test.jsonl",
                "--output",
                str(run_path),
                "--hits",
                "100",
            ]
        )
        run = read_run(run_path)
        ours = answer_accuracy(run, topics, AnswerMatcher(store), [1, 5, 20, 100]).means
        retrieval = {
            t.qid: {
                "question": t.text,
                "answers": list(t.answers),
                "contexts": [
                    {"docid": d.docid, "text": f"{d.title}\n{d.text}"}
                    for d in store.get(sorted(run[t.qid], key=lambda x: -run[t.qid][x]))
                ],
            }
            for t in topics
        }
        dpr_file = tmp / f"{name}.dpr.json"
        dpr_file.write_text(json.dumps(retrieval))
        stdout = subprocess.run(
            [
                PY,
                "-m",
                "tour_pyserini",
                "run-pyserini",
                "pyserini.eval.evaluate_dpr_retrieval",
                "--retrieval",
                str(dpr_file),
                "--topk",
                "1",
                "5",
                "20",
                "100",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        theirs = {f"Acc@{k}": float(v) for k, v in re.findall(r"Top(\d+)\taccuracy: ([0-9.]+)", stdout)}
        rounded = {k: round(v, 4) for k, v in ours.items()}
        out[name] = {"ours": rounded, "pyserini": theirs, "equal": rounded == theirs}
    return out


def trec_eval_parity(tmp: Path) -> dict:
    from tour_pyserini.eval import evaluate
    from tour_pyserini.files import read_qrels
    from tour_pyserini.files.runs import read_run

    full = tmp / "scifact.minilm.trec"
    timed_run(
        [
            PY,
            "-m",
            "tour_pyserini.search",
            "--index",
            "indexes/scifact.minilm",
            "--topics",
            "collections/scifact/topics.test.tsv",
            "--output",
            str(full),
            "--hits",
            "1000",
        ]
    )
    run = read_run(full)
    kept = list(run)[:-50]
    partial = tmp / "partial.trec"
    partial.write_text(
        "".join(line for line in full.read_text().splitlines(keepends=True) if line.split(" ", 1)[0] in set(kept))
    )
    measures = {"ndcg_cut_10": "nDCG@10", "recall_100": "R@100", "map": "AP"}
    stdout = subprocess.run(
        [
            PY,
            "-m",
            "tour_pyserini",
            "run-pyserini",
            "pyserini.eval.trec_eval",
            "-c",
            "-m",
            "ndcg_cut.10",
            "-m",
            "recall.100",
            "-m",
            "map",
            "qrels/scifact.test.txt",
            str(partial),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    theirs = {measures[m]: float(v) for m, v in re.findall(r"^(\w+)\s+all\s+([0-9.]+)$", stdout, flags=re.MULTILINE)}
    ours = evaluate(read_qrels("qrels/scifact.test.txt"), read_run(partial), list(measures.values())).means
    rounded = {k: round(v, 4) for k, v in ours.items()}
    return {"queries_in_run": len(kept), "ours": rounded, "trec_eval_c": theirs, "equal": rounded == theirs}


def main() -> None:
    ensure_indexes("collections/scifact", "indexes/scifact.minilm")
    ensure_indexes("collections/nq-oracle", "indexes/nq-oracle.minilm", "indexes/nq-oracle.bm25")
    with tempfile.TemporaryDirectory() as tmp:
        report = {
            "prf_vs_pyserini_search_faiss": prf_parity(Path(tmp)),
            "answers_vs_evaluate_dpr_retrieval": answer_parity(Path(tmp)),
            "qrels_vs_trec_eval_c": trec_eval_parity(Path(tmp)),
        }
    Path("runs/bench-parity.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
