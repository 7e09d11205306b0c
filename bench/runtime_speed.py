"""The cross-encoder teacher through torch, ONNX Runtime and OpenVINO: pairs per second, and the cost in ranking.

1. Speed (``--part speed``), side by side in one run: each way scores the same ``--sample`` pairs of SciFact test
   claims and abstracts (the shipped ``models/scifact-rce`` at its trained 256 tokens, batch 32, ``--threads``
   threads) in a process of its own, best of ``--passes`` passes after a warm-up; ``--rounds`` rounds alternate
   the ways, and each way's best round is reported. Ways: torch fp32, torch bf16 (where torch multiplies in
   bfloat16 natively), onnx fp32, onnx int8, openvino fp32, openvino bf16 (where native); each under every kernel
   set of bench/runtime_rounds.py: the machine's own, the AVX2 set of environment variables (torch's kernels and
   OpenVINO's oneDNN ones, partly) and, where the processor can fault on CPUID, an AVX2-only CPU as every library
   sees it.
2. Quality (``--part quality``): the search command re-ranks the dense top 20 of SciFact's 300 test claims with
   the shipped teacher (nDCG@10), and of nq-oracle's 1,000 test questions with ``models/nq-oracle-ce`` (DPR
   answer Acc@1), through torch fp32, onnx fp32, onnx int8, openvino fp32 and openvino bf16 (where native).
   Bound: within 0.002 of torch fp32.

Writes runs/bench-runtime.json (a part re-measured keeps the other, and speed keeps other CPUs'). Usage:
python bench/runtime_speed.py [--part both] [--sample 64] [--passes 3] [--rounds 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime_rounds import best_rounds, cpu_name, keep_speed  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "scifact-rce"
OUT = ROOT / "runs" / "bench-runtime.json"
WAYS = {"torch fp32": ("torch", "fp32"), "torch bf16": ("torch", "bf16"), "onnx fp32": ("onnx", "fp32"),
        "onnx int8": ("onnx", "int8"), "openvino fp32": ("openvino", "fp32"),
        "openvino bf16": ("openvino", "bf16")}  # fmt: skip
BOUND = 0.002


def sample_pairs(n: int) -> tuple[list[str], list[str]]:
    """The first ``n`` SciFact test claims, each with one of the first ``n`` abstracts (which fill 256 tokens)."""
    from tour_pyserini.files import read_topics
    from tour_pyserini.index.corpus import read_jsonl_corpus
    from tour_pyserini.teachers.cross_encoder import pair_text

    claims = [t.text for t in read_topics(ROOT / "collections" / "scifact" / "topics.test.tsv")[:n]]
    docs = []
    for doc in read_jsonl_corpus(ROOT / "collections" / "scifact" / "corpus.jsonl"):
        docs.append(pair_text(doc))
        if len(docs) == n:
            break
    return claims, docs


def time_one_way(way: str, sample: int, passes: int, threads: int) -> dict:
    """In this process: ``way``'s best milliseconds per pair over ``passes`` passes, after a warm-up."""
    import torch

    from tour_pyserini.devices import cpu_kernels
    from tour_pyserini.teachers.cross_encoder import CrossEncoderTeacher

    torch.set_num_threads(threads)
    runtime, precision = WAYS[way]
    teacher = CrossEncoderTeacher(MODEL, precision=precision, runtime=runtime)
    queries, texts = sample_pairs(sample)
    teacher.score_pairs(queries, texts)
    best = min(timed(teacher, queries, texts) for _ in range(passes))
    return {"way": way, "ms_per_pair": best / sample * 1000, "torch_kernels": cpu_kernels()}


def timed(teacher, queries, texts) -> float:
    start = time.perf_counter()
    teacher.score_pairs(queries, texts)
    return time.perf_counter() - start


def speed(sample: int, passes: int, rounds: int, threads: int) -> dict:
    """Every way under both kernel sets, each in its own process, rounds alternating them; the best round."""
    ways = {way: ["--one", way, "--sample", str(sample), "--passes", str(passes), "--threads", str(threads)]
            for way in WAYS}  # fmt: skip
    best = best_rounds(__file__, ways, rounds, "ms_per_pair")
    rows = []
    for (kernels, way), row in best.items():
        ms, base = row["ms_per_pair"], best[kernels, "torch fp32"]["ms_per_pair"]
        rows.append({"kernels": kernels, "way": way, "ms_per_pair": round(ms, 2), "pairs_per_s": round(1000 / ms, 1),
                     "x_torch_fp32": round(base / ms, 2)})  # fmt: skip
    return {"sample": sample, "passes": passes, "rounds": rounds, "threads": threads, "cpu": cpu_name(), "rows": rows}


def rerank(index: str, topics: str, teacher: str, way: str, out: Path, threads: int, *flags: str) -> str:
    """The search command re-ranking the dense top 20 with ``teacher`` through ``way``; its command line."""
    runtime, precision = WAYS[way]
    cmd = [sys.executable, "-m", "tour_pyserini.search", "--index", index, "--topics", topics, "--hits", "1000",
           "--teacher", f"cross-encoder:{teacher}", "--teacher-runtime", runtime, "--teacher-precision", precision,
           "--rewriter", "rerank", "--k", "20", "--threads", str(threads), "--output", str(out), *flags]  # fmt: skip
    out.unlink(missing_ok=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    return shlex.join(["python", *cmd[1:]])


def quality(threads: int) -> dict:
    import ir_measures

    runs = ROOT / "runs" / "bench-runtime"
    runs.mkdir(parents=True, exist_ok=True)
    from tour_pyserini.devices import native_bf16

    ways = [w for w in WAYS if w != "torch bf16" and (not w.endswith("bf16") or native_bf16("cpu"))]
    qrels = list(ir_measures.read_trec_qrels(str(ROOT / "qrels" / "scifact.test.txt")))
    rows = []
    for way in ways:
        out = runs / f"scifact.rerank-20.{way.replace(' ', '-')}.trec"
        # a SciFact claim's id is no document of its own
        cmd = rerank("indexes/scifact.minilm", "collections/scifact/topics.test.tsv", "models/scifact-rce", way, out,
                     threads, "--remove-query")  # fmt: skip
        value = ir_measures.calc_aggregate([ir_measures.nDCG @ 10], qrels, ir_measures.read_trec_run(str(out)))
        rows.append({"way": way, "nDCG@10": round(float(next(iter(value.values()))), 4), "command": cmd})
    parts = {"scifact": bounded(rows, "nDCG@10")}
    rows = []
    for way in ways:
        out = runs / f"nq-oracle.rerank-20.{way.replace(' ', '-')}.trec"
        cmd = rerank("indexes/nq-oracle.minilm", "collections/nq-oracle/topics.test.jsonl", "models/nq-oracle-ce",
                     way, out, threads)  # fmt: skip
        rows.append({"way": way, "Acc@1": round(answer_accuracy(out), 4), "command": cmd})
    parts["nq-oracle"] = bounded(rows, "Acc@1")
    return parts


def answer_accuracy(run: Path) -> float:
    """DPR Acc@1 of an nq-oracle test run, as the eval command gives it."""
    cmd = [sys.executable, "-m", "tour_pyserini.eval", "--answers", "collections/nq-oracle/topics.test.jsonl",
           "--collection", "collections/nq-oracle", "--run", str(run), "--topk", "1", "--json"]  # fmt: skip
    out = subprocess.run(cmd, check=True, cwd=ROOT, capture_output=True, text=True).stdout
    return float(json.loads(out.splitlines()[-1])["Acc@1"])


def bounded(rows: list[dict], measure: str) -> dict:
    """The rows, and whether each way is within the bound of torch fp32's value."""
    base = rows[0][measure]
    for row in rows[1:]:
        row["delta"] = round(row[measure] - base, 4)
        row["within_bound"] = abs(row["delta"]) <= BOUND  # the rounded delta: 2 of 1,000 is 0.002, not 0.002000..2
    return {"measure": measure, "bound": BOUND, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("speed", "quality", "both"), default="both")
    ap.add_argument("--sample", type=int, default=64, help="pairs each way scores per pass")
    ap.add_argument("--passes", type=int, default=3, help="timed passes per process (its best is kept)")
    ap.add_argument("--rounds", type=int, default=3, help="processes per way, alternating the ways")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--one", choices=list(WAYS), help=argparse.SUPPRESS)  # a speed child: one way, one process
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.one:
        print(json.dumps(time_one_way(args.one, args.sample, args.passes, args.threads)))
        return
    report = json.loads(OUT.read_text()) if OUT.is_file() else {}
    report["command"] = shlex.join(["python", "bench/runtime_speed.py", *sys.argv[1:]])
    if args.part in ("speed", "both"):
        measured = speed(args.sample, args.passes, args.rounds, args.threads)
        keep_speed(report, measured)
        for row in measured["rows"]:
            print(f"{row['kernels']:6s} {row['way']:10s} {row['ms_per_pair']:7.2f} ms/pair "
                  f"{row['pairs_per_s']:6.1f} pairs/s  x{row['x_torch_fp32']:.2f} torch fp32")  # fmt: skip
    if args.part in ("quality", "both"):
        report["quality"] = quality(args.threads)
        print(json.dumps(report["quality"], indent=1))
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
