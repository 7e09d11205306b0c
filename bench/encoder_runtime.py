"""The query encoder through torch, ONNX Runtime and OpenVINO: milliseconds per claim, TOUR as searched, and the
ranking bound of each precision.

1. Speed (``--part speed``), side by side in one run: each way encodes SciFact's 300 test claims in batches of 32
   (padded chunks of 16, as the search command encodes), with the index's MiniLM on ``--threads`` threads, in a
   process of its own, best of three passes after a warm-up; then TOUR as the search command runs it (tour-soft,
   BM25 teacher, k 20, 100 hits, batch 32) with that encoder. ``--rounds`` rounds alternate the ways; each way's
   best round is kept. Ways: torch fp32, torch bf16 (where torch multiplies in bfloat16 natively), onnx fp32, onnx
   int8, openvino fp32, openvino bf16 (where native); each under every kernel set of bench/runtime_rounds.py (the
   machine's own, the AVX2 set, and an AVX2-only CPU where CPUID can fault). Floors: the model's FLOPs on the
   claims' real tokens at the peak of a 4096x1024x1024 matrix product (bench/peaks.py) under each kernel set:
   float32 (torch's or ONNX Runtime's, the faster), torch's bfloat16, ONNX Runtime's int8 (its dynamically
   quantised product, the kernel int8 runs).
2. Quality (``--part quality``): every way but torch fp32 against torch fp32, the query encoder's bound: nDCG@10
   within 0.002 and every query's Kendall tau >= 0.99 over the float32 top 100, on SciFact test (qrels) and
   nq-oracle test (passages holding an answer string are relevant).

Writes runs/bench-encoder-runtime.json (a part re-measured keeps the other, and speed keeps other CPUs'). Usage:
python bench/encoder_runtime.py [--part both] [--rounds 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import split_files  # noqa: E402
from cross_encoder_speed import layer_flops  # noqa: E402
from query_encoding import best_seconds, label, quality  # noqa: E402
from runtime_rounds import best_rounds, cpu_name, keep_speed, peaks_by_kernel_set  # noqa: E402
from tour_speed import tour_as_searched  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "runs" / "bench-encoder-runtime.json"
INDEX, NQ_INDEX = "indexes/scifact.minilm", "indexes/nq-oracle.minilm"
TOPICS, NQ_TOPICS = split_files("scifact").topics, split_files("nq-oracle").topics
WAYS = [
    ("torch", "fp32"),
    ("torch", "bf16"),
    ("onnx", "fp32"),
    ("onnx", "int8"),
    ("openvino", "fp32"),
    ("openvino", "bf16"),
]
BATCH = 32


def floors(threads: int) -> dict:
    """Milliseconds per claim at each arithmetic's matrix-product peak under each kernel set, on the claims' real
    tokens."""
    from transformers import AutoConfig, AutoTokenizer

    from tour_pyserini.files import read_topics
    from tour_pyserini.index.query_side import query_encoder_spec

    path = query_encoder_spec(str(ROOT / INDEX), None).path
    config, tokenizer = AutoConfig.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    texts = [t.text for t in read_topics(ROOT / TOPICS)]
    tokens = [len(ids) for ids in tokenizer(texts, truncation=True)["input_ids"]]
    gflop = (
        sum(config.num_hidden_layers * layer_flops(t, config.hidden_size, config.intermediate_size) for t in tokens)
        / len(texts)
        / 1e9
    )
    peaks = peaks_by_kernel_set(threads)
    return {
        "gflop_per_claim": gflop,
        "mean_tokens": float(np.mean(tokens)),
        "peak_gflops": peaks,
        "floor_ms_per_claim": {
            kernels: {p: gflop / peak * 1000 for p, peak in at.items()} for kernels, at in peaks.items()
        },
    }


def one_way(runtime: str, precision: str, threads: int) -> dict:
    """In this process: ``runtime`` at ``precision``: best ms per claim of three passes at batch 32, and TOUR."""
    import torch

    from tour_pyserini.devices import cpu_kernels
    from tour_pyserini.encoders.query import QueryEncoder
    from tour_pyserini.files import read_topics
    from tour_pyserini.index.query_side import query_encoder_spec

    torch.set_num_threads(threads)
    encoder = QueryEncoder.build(query_encoder_spec(INDEX, None), precision=precision, runtime=runtime)
    texts = [t.text for t in read_topics(TOPICS)]

    def encode_all():
        return [encoder.encode(texts[i : i + BATCH]) for i in range(0, len(texts), BATCH)]

    encode_all()  # warm-up (and a graph compiled for these shapes)
    ms = best_seconds(encode_all, 3) / len(texts) * 1000
    tour = tour_as_searched(INDEX, TOPICS, precision, repeats=2, batch=BATCH, runtime=runtime)
    return {
        "ms_per_claim": ms,
        "tour_ms_per_query": tour["ms_per_query"][BATCH],
        "tour_encode_share": tour["share_of_time_by_phase"][BATCH]["encode"],
        "torch_kernels": cpu_kernels(),
    }


def speed(rounds: int, threads: int) -> dict:
    """Every way under both kernel sets, each in its own process, rounds alternating them; the best round."""
    ways = {label(way): ["--one", *way, "--threads", str(threads)] for way in WAYS}
    best = best_rounds(__file__, ways, rounds, "ms_per_claim")
    floor = floors(threads)
    rows = []
    for (kernels, way), row in best.items():
        base = best[kernels, "fp32"]
        precision, floor_ms = way.split()[-1], floor["floor_ms_per_claim"][kernels]
        rows.append(
            {
                "kernels": kernels,
                "way": way,
                "ms_per_claim": round(row["ms_per_claim"], 3),
                "x_torch_fp32": round(base["ms_per_claim"] / row["ms_per_claim"], 2),
                "times_floor": round(row["ms_per_claim"] / floor_ms[precision], 2) if precision in floor_ms else None,
                "tour_ms_per_query": round(row["tour_ms_per_query"], 3),
                "tour_encode_share": round(row["tour_encode_share"], 3),
            }
        )
    return {"rounds": rounds, "threads": threads, "batch": BATCH, "cpu": cpu_name(), "floors": floor, "rows": rows}


def bounds(threads: int) -> dict:
    """Each way but torch fp32 against torch fp32 on SciFact and nq-oracle."""
    from tour_pyserini.devices import native_bf16

    parts = {}
    for way in WAYS[1:]:
        if way[1] == "bf16" and not native_bf16("cpu"):
            continue
        parts[label(way)] = {
            "scifact": quality(INDEX, TOPICS, str(split_files("scifact").qrels), way=way, threads=threads),
            "nq-oracle": quality(NQ_INDEX, NQ_TOPICS, None, way=way, threads=threads),
        }
    return parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("speed", "quality", "both"), default="both")
    ap.add_argument("--rounds", type=int, default=3, help="processes per way, alternating the ways")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--one", nargs=2, metavar=("RUNTIME", "PRECISION"), help=argparse.SUPPRESS)  # a speed child
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.chdir(ROOT)
    if args.one:
        print(json.dumps(one_way(*args.one, args.threads)))
        return
    report = json.loads(OUT.read_text()) if OUT.is_file() else {}
    report["command"] = shlex.join(["python", "bench/encoder_runtime.py", *sys.argv[1:]])
    started = time.perf_counter()
    if args.part in ("speed", "both"):
        measured = speed(args.rounds, args.threads)
        keep_speed(report, measured)
        for kernels, floor in measured["floors"]["floor_ms_per_claim"].items():
            print(f"floors under {kernels} (ms/claim): " + ", ".join(f"{p} {ms:.2f}" for p, ms in floor.items()))
        for row in measured["rows"]:
            print(
                f"{row['kernels']:6s} {row['way']:14s} {row['ms_per_claim']:6.2f} ms/claim "
                f"x{row['x_torch_fp32']:.2f} torch fp32, {row['times_floor']}x floor; "
                f"TOUR {row['tour_ms_per_query']:.2f} ms/query "
                f"(encoding {row['tour_encode_share']:.0%})"
            )
    if args.part in ("quality", "both"):
        report["quality"] = {"bounds": {"ndcg10_within": 0.002, "tau_at_least": 0.99}, **bounds(args.threads)}
        for way, parts in report["quality"].items():
            if way == "bounds":
                continue
            for name, q in parts.items():
                print(
                    f"{way:14s} {name:9s}: nDCG@10 {q['ndcg10_difference']:+.4f}, tau mean {q['tau_mean']:.4f} "
                    f"min {q['tau_min']:.4f}, {q['queries_below_tau_bound']}/{q['queries']} below 0.99: "
                    f"meets the bound: {q['meets_bounds']}"
                )
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)} in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
