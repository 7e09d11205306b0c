"""The reader through torch, ONNX Runtime and OpenVINO: milliseconds per window and each precision's answers.

1. Speed (``--part speed``), side by side in one run: the windows the answer command reads for nq-oracle's first
   64 test questions (their dense top 5, 256-token windows, stride 64), read in batches of 32 by
   models/nq-oracle-reader on ``--threads`` threads, each way in a process of its own, best of three passes after
   a warm-up; ``--rounds`` rounds alternate the ways, each way's best round kept. Ways: torch fp32, torch bf16
   (where native), onnx fp32, onnx int8, openvino fp32, openvino bf16 (where native); each under every kernel set
   of bench/runtime_rounds.py (the machine's own, the AVX2 set, and an AVX2-only CPU where CPUID can fault).
2. Quality (``--part quality``): the answer command (k 5, its default rule) over the dense run of nq-oracle's
   1,000 test questions, each way (torch's default threads); exact match and token F1 against torch fp32 and how
   many answers changed. The bound, as for a teacher's Acc@1: EM and F1 within 0.002 of torch fp32.

Writes runs/bench-reader-runtime.json (a part re-measured keeps the other, and speed keeps other CPUs'); runs
and predictions go to runs/qa/ and are reused. Usage:
python bench/reader_runtime.py [--part both] [--rounds 3] [--threads 2] [--ways ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import split_files  # noqa: E402
from query_encoding import best_seconds  # noqa: E402
from runtime_rounds import best_rounds, cpu_name, keep_speed  # noqa: E402
from runtime_speed import WAYS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "runs" / "bench-reader-runtime.json"
NQ, TOPICS = split_files("nq-oracle").collection, split_files("nq-oracle").topics
INDEX = "indexes/nq-oracle.minilm"
RUN = "runs/qa/nq-oracle.minilm.test.trec"
READER = "models/nq-oracle-reader"
K, SPEED_QUESTIONS, BATCH, MAX_LENGTH = 5, 64, 32, 256
BOUND = 0.002


def py(*args: str) -> list[str]:
    return [sys.executable, "-m", *args]


def dense_run() -> None:
    """The dense top 100 of every test question (made once)."""
    if not Path(RUN).is_file():
        Path(RUN).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            py(
                "tour_pyserini.search",
                "--index",
                INDEX,
                "--topics",
                TOPICS,
                "--hits",
                "100",
                "--output",
                RUN,
                "--run-tag",
                "minilm",
            ),
            check=True,
        )


def one_way(runtime: str, precision: str, threads: int) -> dict:
    """In this process: ms per window of three passes over the speed questions' windows at batch 32."""
    import numpy as np
    import torch

    from tour_pyserini.answer import Reader, ReaderOptions, questions_to_read
    from tour_pyserini.answer.windows import make_windows
    from tour_pyserini.devices import cpu_kernels
    from tour_pyserini.files.runs import read_run
    from tour_pyserini.files.topics import read_topics
    from tour_pyserini.index.docstore import open_passages

    torch.set_num_threads(threads)
    options = ReaderOptions(k=K, max_length=MAX_LENGTH, batch_size=BATCH, runtime=runtime, precision=precision)
    reader = Reader(READER, options)
    topics = read_topics(TOPICS)[:SPEED_QUESTIONS]
    with ExitStack() as stack:
        docstore = open_passages(stack, collection=NQ)
        questions = questions_to_read(read_run(RUN), topics, docstore, K, RUN, NQ)
    pairs = [(q.text, p.text) for q in questions for p in q.passages[:K]]
    windows = make_windows(
        reader.tokenizer, [q for q, _ in pairs], [p for _, p in pairs], max_length=MAX_LENGTH, stride=options.stride
    )
    reader.logits(windows)  # warm-up (and a graph compiled for these shapes)
    seconds = best_seconds(lambda: reader.logits(windows), 3)
    return {
        "ms_per_window": seconds / len(windows) * 1000,
        "windows": len(windows),
        "mean_tokens": float(np.mean([len(w.input_ids) for w in windows])),
        "torch_kernels": cpu_kernels(),
    }


def speed(rounds: int, threads: int, ways: list[str]) -> dict:
    """Every way under both kernel sets, each in its own process, rounds alternating them; the best round."""
    best = best_rounds(
        __file__, {way: ["--one", *WAYS[way], "--threads", str(threads)] for way in ways}, rounds, "ms_per_window"
    )
    rows = []
    for (kernels, way), row in best.items():
        base = best.get((kernels, "torch fp32"))
        rows.append(
            {
                "kernels": kernels,
                "way": way,
                "ms_per_window": round(row["ms_per_window"], 3),
                "x_torch_fp32": round(base["ms_per_window"] / row["ms_per_window"], 2) if base else None,
                "windows": row["windows"],
                "mean_tokens": round(row["mean_tokens"], 1),
            }
        )
    return {
        "rounds": rounds,
        "threads": threads,
        "batch": BATCH,
        "max_length": MAX_LENGTH,
        "cpu": cpu_name(),
        "rows": rows,
    }


def answers(way: str) -> tuple[dict, dict, list[str]]:
    """The answer command's predictions of ``way`` (made once) and their EM and F1."""
    runtime, precision = WAYS[way]
    out = ROOT / "runs" / "qa" / f"runtime.{way.replace(' ', '-')}.jsonl"
    cmd = py(
        "tour_pyserini.answer",
        "--run",
        RUN,
        "--topics",
        TOPICS,
        "--collection",
        NQ,
        "--reader",
        READER,
        "--k",
        str(K),
        "--runtime",
        runtime,
        "--precision",
        precision,
        "--output",
        str(out.relative_to(ROOT)),
    )
    if not out.is_file():
        subprocess.run(cmd, check=True, cwd=ROOT)
    scored = subprocess.run(
        py("tour_pyserini.eval", "--predictions", str(out), "--answers", TOPICS, "--json"),
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    predictions = {p["qid"]: p for p in map(json.loads, out.read_text().splitlines())}
    return json.loads(scored.stdout), predictions, cmd[2:]


def quality(ways: list[str]) -> dict:
    dense_run()
    base, base_predictions, base_cmd = answers("torch fp32")
    rows = {"torch fp32": {**base, "command": shlex.join(["python", "-m", *base_cmd])}}
    for way in ways:
        if way == "torch fp32":
            continue
        scores, predictions, cmd = answers(way)
        changed = sum(predictions[q]["answer"] != p["answer"] for q, p in base_predictions.items())
        diff = {m: round(scores[m] - base[m], 9) for m in ("EM", "F1")}  # EM moves in steps of 0.001: 0.002 is within
        rows[way] = {
            **scores,
            "difference": diff,
            "answers_changed": changed,
            "within_bound": all(abs(d) <= BOUND for d in diff.values()),
            "command": shlex.join(["python", "-m", *cmd]),
        }
    return {"questions": len(base_predictions), "k": K, "bound": BOUND, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("speed", "quality", "both"), default="both")
    ap.add_argument("--rounds", type=int, default=3, help="processes per way, alternating the ways")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ways", nargs="+", choices=list(WAYS), default=list(WAYS))
    ap.add_argument("--one", nargs=2, metavar=("RUNTIME", "PRECISION"), help=argparse.SUPPRESS)  # a speed child
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.chdir(ROOT)
    if args.one:
        print(json.dumps(one_way(*args.one, args.threads)))
        return
    from tour_pyserini.devices import native_bf16

    ways = [w for w in args.ways if not w.endswith("bf16") or native_bf16("cpu")]
    report = json.loads(OUT.read_text()) if OUT.is_file() else {}
    report["command"] = shlex.join(["python", "bench/reader_runtime.py", *sys.argv[1:]])
    started = time.perf_counter()
    if args.part in ("speed", "both"):
        dense_run()
        measured = speed(args.rounds, args.threads, ways)
        keep_speed(report, measured)
        for row in measured["rows"]:
            print(
                f"{row['kernels']:6s} {row['way']:14s} {row['ms_per_window']:6.2f} ms/window "
                f"x{row['x_torch_fp32']} torch fp32 ({row['windows']} windows, {row['mean_tokens']} tokens)"
            )
    if args.part in ("quality", "both"):
        report["quality"] = quality(ways)
        for way, row in report["quality"]["rows"].items():
            diff = row.get("difference", {"EM": 0.0, "F1": 0.0})
            print(
                f"{way:14s} EM {row['EM']:.4f} ({diff['EM']:+.4f}) F1 {row['F1']:.4f} ({diff['F1']:+.4f}), "
                f"{row.get('answers_changed', 0)} answers changed, within the bound: {row.get('within_bound', '-')}"
            )
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
