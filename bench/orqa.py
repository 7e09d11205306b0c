"""make orqa: ORQA's retriever learning measured with this project's index, search and evaluation.

nq-oracle test (DPR answer-string Acc@1/5/20/100): MiniLM, MiniLM + early-update fine-tuning (+qa),
MiniLM + ICT on the nq-oracle corpus (+ict), ICT + fine-tuning (+ict+qa), BM25. SciFact test and
Cranfield (nDCG@10, R@100): MiniLM vs MiniLM + ICT on the collection's own corpus (no query, no label),
and TOUR (BM25 teacher) on top of each; on Cranfield also ICT's masking rate (0, 50, 90, 100%: the
plot runs/bench-orqa-masking.png) and tied against separate encoders. Every row is compared with
MiniLM on the same queries (paired t-test and randomisation test).

Every trained encoder, index and run is made by the project's own command lines (printed, and stored
in each row's "command"); what already exists is reused, so an interrupted bench resumes. Training
is sized for 2 shared CPU cores (about 10-15 minutes per run). Writes runs/orqa/*.trec,
runs/bench-orqa.json and runs/bench-orqa.md; rows of the JSON file that were not asked for this time
are kept.
Usage: python bench/orqa.py [--rows nq-oracle:minilm nq-oracle:minilm+qa ...]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from common import split_files

from tour_pyserini.eval.answers import AnswerJudge, AnswerMatcher
from tour_pyserini.eval.judge import QrelsJudge
from tour_pyserini.eval.significance import paired_t_test, randomization_test, win_tie_loss
from tour_pyserini.files import read_qrels, read_topics
from tour_pyserini.files.runs import read_run
from tour_pyserini.index.docstore import DocStore

RUNS, MODELS = Path("runs/orqa"), Path("models/orqa")
PY = [sys.executable, "-m"]
NQ, SCIFACT, CRANFIELD = (split_files(name).collection for name in ("nq-oracle", "scifact", "cranfield"))
# sized for 2 CPU cores shared with other jobs (load 7-9 when measured): 5-12 s per early-update step
# (32 questions) and 25-60 s per ICT step (16 blocks of up to 288 wordpieces, bf16)
QA = [
    "--steps",
    "120",
    "--batch-size",
    "32",
    "--lr",
    "3e-5",
    "--eval-every",
    "20",
    "--precision",
    "bf16",
    "--seed",
    "13",
]
ICT = [
    "--steps",
    "40",
    "--batch-size",
    "16",
    "--lr",
    "3e-5",
    "--eval-every",
    "20",
    "--held-out",
    "64",
    "--precision",
    "bf16",
    "--seed",
    "13",
]


def run(args: list[str], output: Path) -> str:
    """Run one project command unless its output exists; the command line, for the bench rows."""
    command = " ".join(shlex.quote(a) for a in ["python", *args[1:]])
    if not output.exists():
        print(f"$ {command}", flush=True)
        subprocess.run(args, check=True)
    return command


def search(index: str, topics: str, name: str, *extra: str) -> tuple[Path, str]:
    out = RUNS / f"{name}.trec"
    args = [
        *PY,
        "tour_pyserini.search",
        "--index",
        index,
        "--topics",
        topics,
        "--output",
        str(out),
        "--run-tag",
        name,
        *extra,
    ]
    return out, run(args, out)


def train_qa(index: str, output: Path, *extra: str) -> str:
    return run(
        [
            *PY,
            "tour_pyserini",
            "train-qa",
            "--index",
            index,
            "--topics",
            split_files("nq-oracle", "train").topics,
            "--exclude-texts-from",
            split_files("nq-oracle").topics,
            "--output",
            str(output),
            *QA,
            *extra,
        ],
        output,
    )


def train_ict(collection: str, output: Path, *extra: str) -> str:
    return run(
        [*PY, "tour_pyserini", "train-ict", "--collection", collection, "--output", str(output), *ICT, *extra], output
    )


def index(collection: str, encoder: Path, output: str) -> str:
    return run(
        [*PY, "tour_pyserini.index", "--collection", collection, "--encoder", str(encoder), "--output", output],
        Path(output),
    )


HITS = {
    "nq-oracle": ("--hits", "100"),
    "scifact": ("--hits", "1000", "--remove-query"),
    "cranfield": ("--hits", "1000"),
}
TOPICS = {name: (split_files(name).topics, hits) for name, hits in HITS.items()}
TOUR = ("--rewriter", "tour-soft", "--preset", "passage", "--depth", "20", "--teacher", "bm25")


COLLECTIONS = {"nq-oracle": NQ, "scifact": SCIFACT, "cranfield": CRANFIELD}


class Ict(NamedTuple):
    """An ICT-trained encoder pair: the query encoder, the index its document encoder built, and ``make``,
    which trains it and builds the index (each only if missing) and returns the command lines."""

    query: str
    index: str
    make: Callable[[], list[str]]


def ict(collection: str, variant: str = "ict", *extra: str) -> Ict:
    """ICT on ``collection``'s own corpus, ``extra`` passed to train_ict: models/orqa/<collection>-<variant>,
    indexes/<collection>.<variant>; with ``--tied``, one encoder for queries and documents."""
    model, index_dir, tied = MODELS / f"{collection}-{variant}", f"indexes/{collection}.{variant}", "--tied" in extra

    def make() -> list[str]:
        documents = model if tied else model / "document"
        return [train_ict(COLLECTIONS[collection], model, *extra), index(COLLECTIONS[collection], documents, index_dir)]

    return Ict(str(model if tied else model / "query"), index_dir, make)


NQ_ICT, SCIFACT_ICT, SCIFACT_TIED = ict("nq-oracle"), ict("scifact"), ict("scifact", "ict-tied", "--tied")
MASK_RATES = (0.0, 0.5, 0.9, 1.0)  # 0.9 is ORQA's (and the default): the row "minilm+ict"
MASK_VARIANTS = {rate: "ict" if rate == 0.9 else f"ict-mask{round(rate * 100)}" for rate in MASK_RATES}
CRANFIELD_MASKS = {rate: ict("cranfield", MASK_VARIANTS[rate], "--mask-rate", str(rate)) for rate in MASK_RATES}
CRANFIELD_TIED = ict("cranfield", "ict-tied", "--mask-rate", "0.9", "--tied")
# tied ICT for about three passes over Cranfield's blocks
CRANFIELD_LONG = ict("cranfield", "ict-tied-300", "--tied", "--steps", "300", "--eval-every", "50")
# tied ICT for about one pass over SciFact's blocks
SCIFACT_LONG = ict("scifact", "ict-tied-500", "--tied", "--steps", "500", "--eval-every", "100")


def row(collection: str, encoder: str, index_dir: str, *extra: str, before=lambda: []):
    """A bench row: what it trains first (``before``), then its search; run only when the row is asked for."""

    def make():
        commands = before()
        topics, hits = TOPICS[collection]
        path, command = search(index_dir, topics, f"{collection}.{encoder}", *hits, *extra)
        return collection, encoder, path, [*commands, command]

    return f"{collection}:{encoder}", make


def ict_row(collection: str, encoder: str, encoders: Ict, *extra: str):
    """A bench row searching with an ICT-trained encoder pair (trained and indexed first)."""
    return row(collection, encoder, encoders.index, *extra, "--encoder", encoders.query, before=encoders.make)


QA_DIR, ICT_QA_DIR = MODELS / "nq-oracle-qa", MODELS / "nq-oracle-ict-qa"
QA_LOW_DIR = MODELS / "nq-oracle-qa-lr1e-5"  # the same early update at a third of the learning rate
ROWS = dict(
    [  # in the order they run: the cheapest and most telling first
        row("nq-oracle", "minilm", "indexes/nq-oracle.minilm"),
        row(
            "nq-oracle",
            "minilm+qa",
            "indexes/nq-oracle.minilm",
            "--encoder",
            str(QA_DIR),
            before=lambda: [train_qa("indexes/nq-oracle.minilm", QA_DIR)],
        ),
        row(
            "nq-oracle",
            "minilm+qa-lr1e-5",
            "indexes/nq-oracle.minilm",
            "--encoder",
            str(QA_LOW_DIR),
            before=lambda: [train_qa("indexes/nq-oracle.minilm", QA_LOW_DIR, "--lr", "1e-5")],
        ),
        row("nq-oracle", "bm25", "indexes/nq-oracle.bm25"),
        row("scifact", "minilm", "indexes/scifact.minilm"),
        row("scifact", "bm25", "indexes/scifact.bm25"),
        ict_row("scifact", "minilm+ict", SCIFACT_ICT),
        ict_row("scifact", "minilm+ict-tied", SCIFACT_TIED),
        ict_row("scifact", "minilm+ict-tied-500", SCIFACT_LONG),
        ict_row("nq-oracle", "minilm+ict", NQ_ICT),
        row(
            "nq-oracle",
            "minilm+ict+qa",
            NQ_ICT.index,
            "--encoder",
            str(ICT_QA_DIR),
            before=lambda: [*NQ_ICT.make(), train_qa(NQ_ICT.index, ICT_QA_DIR, "--init", NQ_ICT.query)],
        ),
        row("scifact", "minilm+tour-soft(bm25)", "indexes/scifact.minilm", *TOUR),
        ict_row("scifact", "minilm+ict+tour-soft(bm25)", SCIFACT_ICT, *TOUR),
        row("cranfield", "minilm", "indexes/cranfield.minilm"),
        row("cranfield", "bm25", "indexes/cranfield.bm25"),
        *[ict_row("cranfield", f"minilm+{MASK_VARIANTS[rate]}", CRANFIELD_MASKS[rate]) for rate in MASK_RATES],
        ict_row("cranfield", "minilm+ict-tied", CRANFIELD_TIED),
        ict_row("cranfield", "minilm+ict-tied-300", CRANFIELD_LONG),
        row("cranfield", "minilm+tour-soft(bm25)", "indexes/cranfield.minilm", *TOUR),
        ict_row("cranfield", "minilm+ict+tour-soft(bm25)", CRANFIELD_MASKS[0.9], *TOUR),
    ]
)


def judge(collection: str):
    if collection == "nq-oracle":
        topics = read_topics(split_files("nq-oracle").topics)
        return AnswerJudge(topics, AnswerMatcher(DocStore("indexes/nq-oracle.minilm/docstore.sqlite")))
    files = split_files(collection)
    return QrelsJudge(
        read_qrels(str(files.qrels)), ("nDCG@10", "R@100"), qids=[t.qid for t in read_topics(files.topics)]
    )


def score(rows) -> list[dict]:
    """Means, and paired significance against MiniLM on the same collection, for every row."""
    out, judges, base = [], {}, {}
    for collection, encoder, path, commands in rows:
        judges.setdefault(collection, judge(collection))
        evaluation = judges[collection].evaluate(read_run(path))
        row = {
            "collection": collection,
            "encoder": encoder,
            "metrics": evaluation.means,
            "command": " && ".join(commands),
        }
        if encoder == "minilm":
            base[collection] = evaluation
        else:
            reference = base[collection]
            row["vs_minilm"] = {}
            for metric, values in evaluation.per_query.items():
                qids = list(values)
                a, b = [values[q] for q in qids], [reference.per_query[metric][q] for q in qids]
                row["vs_minilm"][metric] = {
                    "delta": evaluation.means[metric] - reference.means[metric],
                    "p_t_test": paired_t_test(a, b),
                    "p_randomization": randomization_test(a, b),
                    "win_tie_loss": win_tie_loss(a, b),
                }
        out.append(row)
        print(f"{collection:10s} {encoder:28s} " + "  ".join(f"{m} {v:.4f}" for m, v in evaluation.means.items()))
    return out


def markdown(rows: list[dict]) -> str:
    lines = []
    for collection in dict.fromkeys(r["collection"] for r in rows):
        group = [r for r in rows if r["collection"] == collection]
        metrics = list(group[0]["metrics"])
        lines += [f"\n### {collection}\n", "| encoder | " + " | ".join(metrics) + " |", "|---|" + "---|" * len(metrics)]
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
    ap.add_argument(
        "--rows",
        nargs="+",
        default=list(ROWS),
        choices=list(ROWS),
        metavar="COLLECTION:ENCODER",
        help=f"rows to make (default: all): {', '.join(ROWS)}",
    )
    args = ap.parse_args()
    RUNS.mkdir(parents=True, exist_ok=True)
    MODELS.mkdir(parents=True, exist_ok=True)
    rows = [ROWS[name]() for name in ROWS if name in args.rows]
    rows.sort(key=lambda r: (r[0], r[1] != "minilm"))  # each collection's MiniLM row first: the others compare to it
    scored = score(rows)
    path = Path("runs/bench-orqa.json")
    kept = json.loads(path.read_text()) if path.exists() else []
    fresh = {(r["collection"], r["encoder"]) for r in scored}
    order = {name: i for i, name in enumerate(ROWS)}
    merged = sorted(
        [r for r in kept if (r["collection"], r["encoder"]) not in fresh] + scored,
        key=lambda r: order.get(f"{r['collection']}:{r['encoder']}", len(order)),
    )
    path.write_text(json.dumps(merged, indent=2) + "\n")
    Path("runs/bench-orqa.md").write_text(markdown(merged))
    print(f"wrote {path} and runs/bench-orqa.md")
    if plot_masking(merged, Path("runs/bench-orqa-masking.png")):
        print("wrote runs/bench-orqa-masking.png")


def plot_masking(rows: list[dict], path: Path) -> bool:
    """Cranfield nDCG@10 against ICT's masking rate, with MiniLM and BM25 as lines; False if rows are missing."""
    by_encoder = {r["encoder"]: r for r in rows if r["collection"] == "cranfield"}
    names = [f"minilm+{MASK_VARIANTS[rate]}" for rate in MASK_RATES]
    if not all(name in by_encoder for name in [*names, "minilm", "bm25"]):
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.4))
    ax.plot(
        [100 * r for r in MASK_RATES],
        [by_encoder[n]["metrics"]["nDCG@10"] for n in names],
        marker="o",
        label="MiniLM + ICT (separate encoders)",
    )
    if "minilm+ict-tied" in by_encoder:
        ax.plot(
            [90],
            [by_encoder["minilm+ict-tied"]["metrics"]["nDCG@10"]],
            "s",
            color="C1",
            label="MiniLM + ICT (tied encoders)",
        )
    for name, style in (("minilm", "--"), ("bm25", ":")):
        ax.axhline(by_encoder[name]["metrics"]["nDCG@10"], ls=style, color="grey", label=name)
    ax.set_xlabel("masking rate: query sentence removed from its block (%)")
    ax.set_ylabel("nDCG@10")
    ax.set_title("ICT on Cranfield's corpus, 40 steps of 16", fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


if __name__ == "__main__":
    main()
