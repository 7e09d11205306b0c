"""make bench-qa: retrieve, then read — nq-oracle test exact match and token F1 for every retriever + the reader.

Rows: BM25, dense (MiniLM), re-ranking and TOUR-hard with k = 20 (re-ranking's 20 teacher scores per
question, TOUR's about as many) with the BM25 teacher and with the shipped nq-oracle ensemble, the
oracle passage (the first answer-bearing passage of the dense top-100, read alone: the reader's ceiling),
and ORQA's joint training started from dense + the reader. Every row reads its run's first k
passages with models/nq-oracle-reader (``make reader``) and the answer command's default rule; k = 5 is
ORQA's, fixed before any test number was seen, and the rule's retrieval weight is chosen per retriever
from 0, 1, 5, 20 by EM on the reader's dev split of the training questions. Each row is compared with
dense + reader on the same questions (paired t-test and randomisation test on EM, Holm-corrected over the
rows), and carries the seconds per question of its search and its reading, each measured when its command
ran (the interleaving and repeats that a latency claim needs are not done here). EM against k for
dense + reader is plotted.

Every run and prediction file is made by the project's own command lines (each row's ``command``); what
exists is reused, so an interrupted bench resumes. Writes runs/qa/*, runs/bench-qa.json, runs/bench-qa.md and
runs/bench-qa-k.png; rows of the JSON file not asked for this time are kept (with their numbers and tests
where their predictions are not here, as in a fresh clone, if dense + reader scores as it did).
Usage: python bench/qa.py [--rows dense+reader oracle+reader ...] [--plot-k 1 3 5]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import time
from pathlib import Path

from common import split_files

from tour_pyserini.eval.answers import AnswerMatcher
from tour_pyserini.eval.exact_match import evaluate_predictions
from tour_pyserini.eval.significance import holm, paired_t_test, randomization_test, win_tie_loss
from tour_pyserini.files import read_topics
from tour_pyserini.files.predictions import read_predictions
from tour_pyserini.files.runs import read_run, write_run
from tour_pyserini.index.docstore import DocStore
from tour_pyserini.results import Hit

RUNS = Path("runs/qa")
PY = [sys.executable, "-m"]
NQ = split_files("nq-oracle").collection
TEST, TRAIN = split_files("nq-oracle", "test").topics, split_files("nq-oracle", "train").topics
DENSE, BM25 = "indexes/nq-oracle.minilm", "indexes/nq-oracle.bm25"
READER = "models/nq-oracle-reader"
JOINT = Path("models/orqa/nq-oracle-joint")
K = 5
WEIGHTS = (0.0, 1.0, 5.0, 20.0)  # the orqa rule's retrieval weights tried on dev


def run(args: list[str], output: Path) -> tuple[str, float | None]:
    """Run one project command unless its output exists: its command line and its seconds (None if reused;
    the seconds of an earlier run are kept beside the output)."""
    command = " ".join(shlex.quote(a) for a in ["python", *args[1:]])
    timing = output.with_name(output.name + ".seconds")
    if not output.exists():
        print(f"$ {command}", flush=True)
        start = time.perf_counter()
        subprocess.run(args, check=True)
        timing.write_text(f"{time.perf_counter() - start:.1f}\n")
    return command, float(timing.read_text()) if timing.exists() else None


def search(index: str, name: str, *extra: str, topics: str = TEST) -> tuple[Path, str, float | None]:
    out = RUNS / f"{name}{'' if topics == TEST else '.dev'}.trec"
    args = [
        *PY,
        "tour_pyserini.search",
        "--index",
        index,
        "--topics",
        topics,
        "--output",
        str(out),
        "--hits",
        "100",
        "--run-tag",
        name,
        *extra,
    ]
    return (out, *run(args, out))


def answer(
    run_path: Path, name: str, k: int, reader: str = READER, *extra: str, topics: str = TEST
) -> tuple[Path, str, float | None]:
    out = RUNS / f"{name}.k{k}.jsonl"
    args = [
        *PY,
        "tour_pyserini.answer",
        "--run",
        str(run_path),
        "--topics",
        topics,
        "--collection",
        NQ,
        "--reader",
        reader,
        "--k",
        str(k),
        "--precision",
        "auto",
        "--output",
        str(out),
        *extra,
    ]
    return (out, *run(args, out))


def dev_topics() -> str:
    """The reader's dev split (training questions it never trained on), as a topics file."""
    out = RUNS / "dev-topics.jsonl"
    if not out.exists():
        dev = set(json.loads(Path(READER, "training.json").read_text())["dev_qids"])
        out.write_text(
            "".join(
                json.dumps({"qid": t.qid, "question": t.text, "answers": list(t.answers)}) + "\n"
                for t in read_topics(TRAIN)
                if t.qid in dev
            )
        )
    return str(out)


def choose_weight(name: str) -> tuple[float, dict]:
    """The orqa rule's retrieval weight for one retriever, the best dev EM of WEIGHTS (ties: the smaller weight):
    the weight is in the units of the retriever's scores, so each retriever gets its own."""
    topics = dev_topics()
    path = retrieval(name, topics)[0]
    ems = {}
    for w in WEIGHTS:
        preds = answer(path, f"{slug(name)}.dev.w{w:g}", K, READER, "--retrieval-weight", f"{w:g}", topics=topics)[0]
        ems[w] = evaluate_predictions(read_predictions(preds), read_topics(topics)).means["EM"]
    return max(WEIGHTS, key=lambda w: (ems[w], -w)), {f"{w:g}": em for w, em in ems.items()}


def slug(name: str) -> str:
    return name.replace("(", "-").rstrip(")")


def oracle_run(dense: Path) -> Path:
    """The dense top-100 with its answer-bearing passages moved first (in their dense order)."""
    out = RUNS / "oracle.trec"
    if not out.exists():
        matcher = AnswerMatcher(DocStore(f"{DENSE}/docstore.sqlite"))
        rankings, base = [], read_run(dense)
        for topic in read_topics(TEST):
            ranked = sorted(base.get(topic.qid, {}).items(), key=lambda item: -item[1])
            docs = matcher.docstore.get([d for d, _ in ranked])
            first = sorted(
                range(len(docs)), key=lambda i: not matcher.has_answer(docs[i].docid, docs[i].text, topic.answers)
            )
            rankings.append((topic.qid, [Hit(docs[i].docid, float(len(docs) - r)) for r, i in enumerate(first)]))
        write_run(out, rankings, "oracle")
    return out


def retrieval(name: str, topics: str = TEST):
    """(run, its commands, search seconds per question) of one row's retriever over ``topics``."""
    n = len(read_topics(topics))
    if name == "bm25":
        index_cmd = run([*PY, "tour_pyserini.index", "--bm25", "--collection", NQ, "--output", BM25], Path(BM25))[0]
        path, cmd, secs = search(BM25, "bm25", topics=topics)
        return path, [index_cmd, cmd], secs / n if secs else None
    dense, cmd, secs = search(DENSE, "dense", topics=topics)
    if name == "dense":
        return dense, [cmd], secs / n if secs else None
    if name == "oracle":
        return oracle_run(dense), [cmd, "python bench/qa.py --rows oracle+reader  # answer-bearing first"], None
    if name in TEACHERS:
        tour = name.startswith("tour")
        rewriter = ["--rewriter", "tour-hard", "--preset", "passage"] if tour else ["--rewriter", "rerank"]
        path, cmd, secs = search(
            DENSE, slug(name), "--teacher", TEACHERS[name], "--depth", "20", *rewriter, topics=topics
        )
        return path, [cmd], secs / n if secs else None
    if name == "orqa-joint":
        train = [
            *PY,
            "tour_pyserini",
            "train-orqa",
            "--index",
            DENSE,
            "--topics",
            TRAIN,
            "--exclude-texts-from",
            TEST,
            "--reader",
            READER,
            "--output",
            str(JOINT),
            "--precision",
            "bf16",
            "--seed",
            "13",
        ]
        train_cmd = run(train, JOINT)[0]
        path, cmd, secs = search(DENSE, "orqa-joint", "--encoder", str(JOINT / "query"))
        return path, [train_cmd, cmd], secs / n if secs else None
    raise ValueError(name)


# the BM25 teacher, and the shipped nq-oracle ensemble (models/nq-oracle-ce with BM25 and the retriever, weighted
# on the cross-encoder's held-out training questions: the cross-encoder alone ranks below the retriever)
ENSEMBLE = "ensemble:models/nq-oracle-ce/ensemble.json"
TEACHERS = {
    "rerank(bm25)": "bm25",
    "tour-hard(bm25)": "bm25",
    "rerank(ensemble)": ENSEMBLE,
    "tour-hard(ensemble)": ENSEMBLE,
}
ROWS = [
    "bm25+reader",
    "dense+reader",
    "rerank(bm25)+reader",
    "tour-hard(bm25)+reader",
    "rerank(ensemble)+reader",
    "tour-hard(ensemble)+reader",
    "oracle+reader",
    "orqa-joint",
]


def make_row(system: str) -> dict:
    name = system.removesuffix("+reader")
    path, commands, search_secs = retrieval(name)
    k, weight, dev = K, None, None
    if name == "oracle":
        k, reader = 1, (READER,)  # one passage: the rule has nothing to choose between
    elif name == "orqa-joint":
        reader = (str(JOINT / "reader"), "--retrieval-weight", "20")  # 1 / temperature: S_retr as trained
    else:
        weight, dev = choose_weight(name)
        reader = (READER, "--retrieval-weight", f"{weight:g}")
    preds, cmd, read_secs = answer(path, slug(name), k, *reader)
    n = len(read_topics(TEST))
    return {
        "collection": "nq-oracle",
        "system": system,
        "k": k,
        "retrieval_weight": weight,
        "dev_em_by_weight": dev,
        "predictions": str(preds),
        "command": cmd,
        "commands_before": commands,
        "seconds_per_question": {"search": search_secs, "read": read_secs / n if read_secs else None},
    }


def score(rows: list[dict], previous_base: dict | None) -> list[dict]:
    """Each row's EM and F1 and its paired tests against dense + reader, Holm-corrected over all rows. A kept
    row whose predictions are gone (a fresh clone holds only the JSON) keeps its numbers and tests if
    ``previous_base``, the dense + reader metrics they were measured against, is today's."""
    topics = read_topics(TEST)
    present = [r for r in rows if Path(r["predictions"]).exists()]
    evals = {r["system"]: evaluate_predictions(read_predictions(r["predictions"]), topics) for r in present}
    base = evals["dense+reader"]
    for r in rows:
        if r not in present and (
            previous_base is None or any(abs(previous_base[m] - base.means[m]) > 1e-9 for m in base.means)
        ):
            sys.exit(
                f"{r['predictions']} is gone and dense + reader changed since its row was tested: make it "
                f"again, python bench/qa.py --rows '{r['system']}'"
            )
    for r in present:
        r["metrics"] = evals[r["system"]].means
        if r["system"] != "dense+reader":
            qids = list(base.per_query["EM"])
            a, b = [evals[r["system"]].per_query["EM"][q] for q in qids], [base.per_query["EM"][q] for q in qids]
            r["vs_dense_reader"] = {
                "delta_EM": r["metrics"]["EM"] - base.means["EM"],
                "p_t_test": paired_t_test(a, b),
                "p_randomization": randomization_test(a, b),
                "win_tie_loss": win_tie_loss(a, b),
            }
    tested = [r for r in rows if "vs_dense_reader" in r]
    for r, p in zip(tested, holm([r["vs_dense_reader"]["p_t_test"] for r in tested])):
        r["vs_dense_reader"]["p_holm"] = p
    for r in rows:
        kept = "" if r in present else "  (kept: its predictions are not here)"
        print(f"{r['system']:26s} k {r['k']:2d}  EM {r['metrics']['EM']:.4f}  F1 {r['metrics']['F1']:.4f}{kept}")
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        "| system | k | EM | F1 | Δ EM vs dense + reader (p t-test, Holm) | s/question (search + read) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        sig = r.get("vs_dense_reader")
        delta = f"{sig['delta_EM']:+.4f} (p {sig['p_t_test']:.3g}, {sig['p_holm']:.3g})" if sig else ""
        secs = r["seconds_per_question"]
        timing = " + ".join(f"{secs[s]:.3f}" if secs[s] is not None else "?" for s in ("search", "read"))
        lines.append(
            f"| {r['system']} | {r['k']} | {r['metrics']['EM']:.4f} | {r['metrics']['F1']:.4f} | {delta} | {timing} |"
        )
    return "\n".join(lines) + "\n"


def plot_k(ks: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dense = retrieval("dense")[0]
    topics = read_topics(TEST)
    weight = f"{choose_weight('dense')[0]:g}"
    ems = [
        evaluate_predictions(
            read_predictions(answer(dense, "dense", k, READER, "--retrieval-weight", weight)[0]), topics
        ).means["EM"]
        for k in ks
    ]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(ks, ems, marker="o")
    ax.set_xlabel("passages read (k)")
    ax.set_ylabel("EM, nq-oracle test")
    ax.set_title("dense + reader", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", nargs="+", default=ROWS, choices=ROWS, help="rows to make (default: all)")
    ap.add_argument("--plot-k", nargs="*", type=int, default=[1, 3, 5], help="k of the EM-against-k plot")
    args = ap.parse_args()
    if not Path(READER).is_dir():
        sys.exit(f"{READER} is missing: make reader first")
    RUNS.mkdir(parents=True, exist_ok=True)
    rows = [make_row(s) for s in ROWS if s in args.rows or s == "dense+reader"]
    path = Path("runs/bench-qa.json")
    kept = json.loads(path.read_text()) if path.exists() else []
    fresh = {r["system"] for r in rows}
    previous_base = next((r["metrics"] for r in kept if r["system"] == "dense+reader"), None)
    # scored together, so that Holm's correction covers every row of the table
    merged = score(
        sorted([r for r in kept if r["system"] not in fresh] + rows, key=lambda r: ROWS.index(r["system"])),
        previous_base,
    )
    path.write_text(json.dumps(merged, indent=2) + "\n")
    Path("runs/bench-qa.md").write_text(markdown(merged))
    print(f"wrote {path} and runs/bench-qa.md")
    if args.plot_k:
        plot_k(args.plot_k, Path("runs/bench-qa-k.png"))
        print("wrote runs/bench-qa-k.png")


if __name__ == "__main__":
    main()
