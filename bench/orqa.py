"""make orqa: ORQA's retriever learning measured with this project's index, search and evaluation.

nq-oracle test (DPR answer-string Acc@1/5/20/100): MiniLM, MiniLM + early-update fine-tuning (+qa),
MiniLM + ICT on the nq-oracle corpus (+ict), ICT + fine-tuning (+ict+qa), BM25. SciFact test (nDCG@10,
R@100): MiniLM vs MiniLM + ICT on SciFact's own corpus (no query, no label), and TOUR (BM25 teacher) on
top of each. Every row is compared with MiniLM on the same queries (paired t-test and randomisation test).

Every trained encoder, index and run is made by the project's own command lines (printed, and stored
in each row's "command"); what already exists is reused, so an interrupted bench resumes. Training
is sized for 2 shared CPU cores (about 10-15 minutes per run). Writes runs/orqa/*.trec,
runs/bench-orqa.json and runs/bench-orqa.md.
Usage: python bench/orqa.py [--collections nq-oracle scifact]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

from tour_pyserini.data import read_qrels, read_topics
from tour_pyserini.eval.answers import AnswerJudge, AnswerMatcher
from tour_pyserini.eval.judge import QrelsJudge
from tour_pyserini.eval.significance import paired_t_test, randomization_test, win_tie_loss
from tour_pyserini.index.docstore import DocStore
from tour_pyserini.runs import read_run

RUNS, MODELS = Path("runs/orqa"), Path("models/orqa")
PY = [sys.executable, "-m"]
NQ, SCIFACT = "collections/nq-oracle", "collections/scifact"
# sized for 2 shared CPU cores: measured 5-9 s per early-update step (32 questions) and 10-25 s per ICT
# step (16 blocks of up to 288 wordpieces, bf16) while two other jobs ran
QA = ["--steps", "120", "--batch-size", "32", "--lr", "3e-5", "--eval-every", "20", "--bf16", "--seed", "13"]
ICT = ["--steps", "60", "--batch-size", "16", "--lr", "3e-5", "--eval-every", "20", "--held-out", "128", "--bf16",
       "--seed", "13"]  # fmt: skip


def run(args: list[str], output: Path) -> str:
    """Run one project command unless its output exists; the command line, for the bench rows."""
    command = " ".join(shlex.quote(a) for a in ["python", *args[1:]])
    if not output.exists():
        print(f"$ {command}", flush=True)
        subprocess.run(args, check=True)
    return command


def search(index: str, topics: str, name: str, *extra: str) -> tuple[Path, str]:
    out = RUNS / f"{name}.trec"
    args = [*PY, "tour_pyserini.search", "--index", index, "--topics", topics, "--output", str(out),
            "--run-tag", name, *extra]  # fmt: skip
    return out, run(args, out)


def train_qa(index: str, output: Path, *extra: str) -> str:
    return run([*PY, "tour_pyserini.train_qa", "--index", index, "--topics", f"{NQ}/topics.train.jsonl",
                "--exclude-texts-from", f"{NQ}/topics.test.jsonl", "--output", str(output), *QA, *extra], output)  # fmt: skip


def train_ict(collection: str, output: Path) -> str:
    return run([*PY, "tour_pyserini.train_ict", "--collection", collection, "--output", str(output), *ICT], output)


def index(collection: str, encoder: Path, output: str) -> str:
    return run([*PY, "tour_pyserini.index", "--collection", collection, "--encoder", str(encoder), "--output",
                output], Path(output))  # fmt: skip


def nq_oracle() -> list[tuple[str, str, Path, list[str]]]:
    """(collection, encoder label, run file, commands) of every nq-oracle row, training what is missing."""
    test, hits = f"{NQ}/topics.test.jsonl", ("--hits", "100")
    rows = []
    path, cmd = search("indexes/nq-oracle.minilm", test, "nq-oracle.minilm", *hits)
    rows.append(("nq-oracle", "minilm", path, [cmd]))
    qa = MODELS / "nq-oracle-qa"
    train = train_qa("indexes/nq-oracle.minilm", qa)
    path, cmd = search("indexes/nq-oracle.minilm", test, "nq-oracle.minilm+qa", *hits, "--encoder", str(qa))
    rows.append(("nq-oracle", "minilm+qa", path, [train, cmd]))
    path, cmd = search("indexes/nq-oracle.bm25", test, "nq-oracle.bm25", *hits)
    rows.append(("nq-oracle", "bm25", path, [cmd]))
    ict = MODELS / "nq-oracle-ict"
    commands = [train_ict(NQ, ict), index(NQ, ict / "document", "indexes/nq-oracle.ict")]
    path, cmd = search("indexes/nq-oracle.ict", test, "nq-oracle.minilm+ict", *hits, "--encoder", str(ict / "query"))
    rows.append(("nq-oracle", "minilm+ict", path, [*commands, cmd]))
    ict_qa = MODELS / "nq-oracle-ict-qa"
    commands.append(train_qa("indexes/nq-oracle.ict", ict_qa, "--init", str(ict / "query")))
    path, cmd = search("indexes/nq-oracle.ict", test, "nq-oracle.minilm+ict+qa", *hits, "--encoder", str(ict_qa))
    rows.append(("nq-oracle", "minilm+ict+qa", path, [*commands, cmd]))
    return rows


def scifact() -> list[tuple[str, str, Path, list[str]]]:
    test, extra = f"{SCIFACT}/topics.test.tsv", ("--hits", "1000", "--remove-query")
    tour = ("--rewriter", "tour-soft", "--preset", "passage", "--k", "20", "--reranker", "bm25")
    rows = []
    path, cmd = search("indexes/scifact.minilm", test, "scifact.minilm", *extra)
    rows.append(("scifact", "minilm", path, [cmd]))
    path, cmd = search("indexes/scifact.bm25", test, "scifact.bm25", *extra)
    rows.append(("scifact", "bm25", path, [cmd]))
    ict = MODELS / "scifact-ict"
    commands = [train_ict(SCIFACT, ict), index(SCIFACT, ict / "document", "indexes/scifact.ict")]
    path, cmd = search("indexes/scifact.ict", test, "scifact.minilm+ict", *extra, "--encoder", str(ict / "query"))
    rows.append(("scifact", "minilm+ict", path, [*commands, cmd]))
    path, cmd = search("indexes/scifact.minilm", test, "scifact.minilm+tour-soft.bm25", *extra, *tour)
    rows.append(("scifact", "minilm+tour-soft(bm25)", path, [cmd]))
    path, cmd = search("indexes/scifact.ict", test, "scifact.minilm+ict+tour-soft.bm25", *extra, *tour,
                       "--encoder", str(ict / "query"))  # fmt: skip
    rows.append(("scifact", "minilm+ict+tour-soft(bm25)", path, [*commands, cmd]))
    return rows


def judge(collection: str):
    if collection == "nq-oracle":
        topics = read_topics(f"{NQ}/topics.test.jsonl")
        return AnswerJudge(topics, AnswerMatcher(DocStore("indexes/nq-oracle.minilm/docstore.sqlite")))
    qids = [t.qid for t in read_topics(f"{SCIFACT}/topics.test.tsv")]
    return QrelsJudge(read_qrels("qrels/scifact.test.txt"), ("nDCG@10", "R@100"), qids=qids)


def score(rows) -> list[dict]:
    """Means, and paired significance against MiniLM on the same collection, for every row."""
    out, judges, base = [], {}, {}
    for collection, encoder, path, commands in rows:
        judges.setdefault(collection, judge(collection))
        evaluation = judges[collection].evaluate(read_run(path))
        row = {"collection": collection, "encoder": encoder, "metrics": evaluation.means, "command": " && ".join(commands)}
        if encoder == "minilm":
            base[collection] = evaluation
        else:
            reference = base[collection]
            row["vs_minilm"] = {}
            for metric, values in evaluation.per_query.items():
                qids = list(values)
                a, b = [values[q] for q in qids], [reference.per_query[metric][q] for q in qids]
                row["vs_minilm"][metric] = {"delta": evaluation.means[metric] - reference.means[metric],
                                            "p_t_test": paired_t_test(a, b), "p_randomization": randomization_test(a, b),
                                            "win_tie_loss": win_tie_loss(a, b)}  # fmt: skip
        out.append(row)
        print(f"{collection:10s} {encoder:28s} " + "  ".join(f"{m} {v:.4f}" for m, v in evaluation.means.items()))
    return out


def markdown(rows: list[dict]) -> str:
    lines = []
    for collection in dict.fromkeys(r["collection"] for r in rows):
        group = [r for r in rows if r["collection"] == collection]
        metrics = list(group[0]["metrics"])
        lines += [f"\n### {collection}\n", "| encoder | " + " | ".join(metrics) + " |",
                  "|---|" + "---|" * len(metrics)]  # fmt: skip
        for r in group:
            cells = []
            for m in metrics:
                cell = f"{r['metrics'][m]:.4f}"
                if (sig := r.get("vs_minilm", {}).get(m)) is not None:
                    cell += f" ({sig['delta']:+.4f}, p {sig['p_t_test']:.3f})"
                cells.append(cell)
            lines.append(f"| {r['encoder']} | " + " | ".join(cells) + " |")
    return "\n".join(lines).strip() + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collections", nargs="+", default=["nq-oracle", "scifact"], choices=["nq-oracle", "scifact"])
    args = ap.parse_args()
    RUNS.mkdir(parents=True, exist_ok=True)
    MODELS.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.collections:
        rows += nq_oracle() if name == "nq-oracle" else scifact()
    scored = score(rows)
    Path("runs/bench-orqa.json").write_text(json.dumps(scored, indent=2) + "\n")
    Path("runs/bench-orqa.md").write_text(markdown(scored))
    print("wrote runs/bench-orqa.json and runs/bench-orqa.md")


if __name__ == "__main__":
    main()
