"""The cross-encoder teacher through torch, ONNX Runtime and OpenVINO: pairs per second, and the cost in ranking.

1. Speed (``--part speed``), side by side in one run: each way scores the same ``--sample`` pairs of SciFact test
   claims and abstracts (the shipped ``models/scifact-rce`` at its trained 256 tokens, batch 32, ``--threads``
   threads) in a process of its own, best of ``--passes`` passes after a warm-up; ``--rounds`` rounds alternate
   the ways, and each way's best round is reported. Ways: torch fp32, torch bf16 (where torch multiplies in
   bfloat16 natively), onnx fp32, onnx int8, openvino fp32, openvino bf16 (where native); each under every kernel
   set of bench/runtime_rounds.py: the machine's own, the AVX2 set of environment variables (torch's kernels and
   OpenVINO's oneDNN ones, partly) and, where the processor can fault on CPUID, an AVX2-only CPU as every library
   sees it. Floors: the sample's FLOPs per pair at each arithmetic's matrix-product peak under each kernel set
   (bench/peaks.py); int8's counts attention's products at float32's peak, as its graph runs them. And where the
   int8 graph's time goes, by operator (ONNX Runtime's profiler, one batch), under each kernel set.
2. Quality (``--part quality``): the search command re-ranks the dense top 20 of SciFact's 300 test claims with
   the shipped teacher (nDCG@10), and of nq-oracle's 1,000 test questions with ``models/nq-oracle-ce`` (DPR
   answer Acc@1), through torch fp32, onnx fp32, onnx int8, openvino fp32 and openvino bf16 (where native), and
   onnx int8 again on the AVX2-only CPU where the processor can pose as one (its int8 kernel differs). Bound:
   within 0.002 of torch fp32. ``--ways`` re-measures some rows and keeps the others.

Writes runs/bench-runtime.json (a part re-measured keeps the other, and speed keeps other CPUs'). Usage:
python bench/runtime_speed.py [--part both] [--sample 64] [--passes 3] [--rounds 3] [--threads 2] [--ways ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import split_files  # noqa: E402
from cross_encoder_speed import padded_lengths, pair_flops  # noqa: E402
from runtime_rounds import (  # noqa: E402
    avx2_cpu_library,
    avx2_cpu_preload,
    best_rounds,
    cpu_name,
    each_kernel_set,
    keep_speed,
    peaks_by_kernel_set,
)

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "scifact-rce"
OUT = ROOT / "runs" / "bench-runtime.json"
WAYS = {
    "torch fp32": ("torch", "fp32"),
    "torch bf16": ("torch", "bf16"),
    "onnx fp32": ("onnx", "fp32"),
    "onnx int8": ("onnx", "int8"),
    "openvino fp32": ("openvino", "fp32"),
    "openvino bf16": ("openvino", "bf16"),
}
BOUND = 0.002
PARTS = {"scifact": "nDCG@10", "nq-oracle": "Acc@1"}  # each collection's measure of the ranking bound


def sample_pairs(n: int) -> tuple[list[str], list[str]]:
    """The first ``n`` SciFact test claims, each with one of the first ``n`` abstracts (which fill 256 tokens)."""
    from tour_pyserini.files import read_topics
    from tour_pyserini.index.corpus import read_jsonl_corpus
    from tour_pyserini.teachers.cross_encoder import pair_text

    claims = [t.text for t in read_topics(ROOT / split_files("scifact").topics)[:n]]
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
    ways = {
        way: ["--one", way, "--sample", str(sample), "--passes", str(passes), "--threads", str(threads)] for way in WAYS
    }
    best = best_rounds(__file__, ways, rounds, "ms_per_pair")
    floor = floors(sample, threads)
    rows = []
    for (kernels, way), row in best.items():
        ms, base = row["ms_per_pair"], best[kernels, "torch fp32"]["ms_per_pair"]
        floor_ms = floor["floor_ms_per_pair"][kernels].get(WAYS[way][1])
        rows.append(
            {
                "kernels": kernels,
                "way": way,
                "ms_per_pair": round(ms, 2),
                "pairs_per_s": round(1000 / ms, 1),
                "x_torch_fp32": round(base / ms, 2),
                "times_floor": round(ms / floor_ms, 2) if floor_ms else None,
            }
        )
    profile = each_kernel_set([__file__, "--profile-int8", "--sample", str(sample), "--threads", str(threads)])
    return {
        "sample": sample,
        "passes": passes,
        "rounds": rounds,
        "threads": threads,
        "cpu": cpu_name(),
        "floors": floor,
        "rows": rows,
        "int8_time_by_op": profile,
    }


def floors(sample: int, threads: int) -> dict:
    """Milliseconds per pair of the sample at each arithmetic's matrix-product peak under each kernel set. The
    int8 graph quantises the linear layers only: attention's scores and weighted sum stay float32 (ONNX Runtime's
    quantised attention kernel), so its floor is the linear layers at the int8 peak plus attention at float32's."""
    from tour_pyserini.teachers.cross_encoder import CrossEncoderTeacher

    teacher = CrossEncoderTeacher(MODEL, runtime="torch")
    config = teacher.model.config
    queries, texts = sample_pairs(sample)
    lengths = padded_lengths(teacher, queries, texts)
    total = sum(pair_flops(config, n) for n in lengths) / len(lengths)
    attention = sum(config.num_hidden_layers * 4 * n**2 * config.hidden_size for n in lengths) / len(lengths)
    peaks = peaks_by_kernel_set(threads)
    ms = {}
    for kernels, peak in peaks.items():
        ms[kernels] = {
            "fp32": total / peak["fp32"] / 1e6,
            "int8": (total - attention) / peak["int8"] / 1e6 + attention / peak["fp32"] / 1e6,
        }
        if "bf16" in peak:
            ms[kernels]["bf16"] = total / peak["bf16"] / 1e6
    return {
        "mean_tokens": sum(lengths) / len(lengths),
        "gflop_per_pair": total / 1e9,
        "attention_gflop_per_pair": attention / 1e9,
        "peak_gflops": peaks,
        "floor_ms_per_pair": ms,
    }


def profile_int8(sample: int, threads: int) -> dict[str, float]:
    """In this process: the share of the int8 graph's time by operator on one batch of the sample (ONNX Runtime's
    profiler, after a warm-up): where the time its matrix products leave goes."""
    import onnxruntime as ort

    from tour_pyserini.teachers.cross_encoder import CrossEncoderTeacher, pair_inputs

    teacher = CrossEncoderTeacher(MODEL, precision="int8", runtime="onnx")
    queries, texts = sample_pairs(min(sample, teacher.batch_size))
    inputs = pair_inputs(teacher.tokenizer, queries, texts, teacher.max_length)
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        options.profile_file_prefix = str(Path(tmp) / "int8")
        session = ort.InferenceSession(str(teacher.graph.path), options, providers=["CPUExecutionProvider"])
        feed = {i.name: inputs[i.name].numpy() for i in session.get_inputs()}
        session.run(None, feed)
        session.run(None, feed)
        trace = json.loads(Path(session.end_profiling()).read_text())
    events = [e for e in trace if e.get("cat") == "Node" and e["name"].endswith("_kernel_time")]
    second = events[len(events) // 2 :]  # the second run's nodes (both runs ran the same nodes)
    by_op: dict[str, float] = {}
    for event in second:
        by_op[event["args"]["op_name"]] = by_op.get(event["args"]["op_name"], 0) + event["dur"]
    total = sum(by_op.values())
    return {op: round(us / total, 3) for op, us in sorted(by_op.items(), key=lambda kv: -kv[1]) if us / total >= 0.005}


def rerank(
    index: str, topics: str, teacher: str, way: str, out: Path, threads: int, *flags: str, env: dict | None = None
) -> str:
    """The search command re-ranking the dense top 20 with ``teacher`` through ``way`` (under ``env``, a kernel
    set's); its command line."""
    runtime, precision = WAYS[way]
    cmd = [
        sys.executable,
        "-m",
        "tour_pyserini.search",
        "--index",
        index,
        "--topics",
        topics,
        "--hits",
        "1000",
        "--teacher",
        f"cross-encoder:{teacher}",
        "--teacher-runtime",
        runtime,
        "--teacher-precision",
        precision,
        "--rewriter",
        "rerank",
        "--depth",
        "20",
        "--threads",
        str(threads),
        "--output",
        str(out),
        *flags,
    ]
    out.unlink(missing_ok=True)
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, **(env or {})})
    return shlex.join([*(f"{k}={v}" for k, v in (env or {}).items()), "python", *cmd[1:]])


def quality_ways() -> dict[str, tuple[str, dict]]:
    """Row label -> (way, environment): every way but torch bf16 on the machine's kernels (bf16 where native), and
    int8 again on an AVX2-only CPU where the processor can pose as one: without VNNI, ONNX Runtime's int8 product
    is another kernel (8-bit products summed in pairs to 16 bits), whose scores differ."""
    from tour_pyserini.devices import native_bf16

    rows = {w: (w, {}) for w in WAYS if w != "torch bf16" and (not w.endswith("bf16") or native_bf16("cpu"))}
    library = avx2_cpu_library()
    if library:
        rows["onnx int8, AVX2-only CPU"] = ("onnx int8", {"LD_PRELOAD": avx2_cpu_preload(library)})
    return rows


def quality(threads: int, only: list[str] | None, previous: dict) -> dict:
    """Both collections' rows; with ``only``, those rows re-measured and the others kept from ``previous``."""
    import ir_measures

    runs = ROOT / "runs" / "bench-runtime"
    runs.mkdir(parents=True, exist_ok=True)
    ways = quality_ways()
    qrels = list(ir_measures.read_trec_qrels(str(ROOT / str(split_files("scifact").qrels))))
    kept = {part: {row["way"]: row for row in previous.get(part, {}).get("rows", [])} for part in PARTS}
    parts = {}
    for part, measure in PARTS.items():
        rows = []
        for label, (way, env) in ways.items():
            if only and label not in only and label in kept[part]:
                rows.append(kept[part][label])
                continue
            out = runs / f"{part}.rerank-20.{label.replace(' ', '-').replace(',', '')}.trec"
            if part == "scifact":  # a SciFact claim's id is no document of its own
                cmd = rerank(
                    "indexes/scifact.minilm",
                    split_files("scifact").topics,
                    "models/scifact-rce",
                    way,
                    out,
                    threads,
                    "--remove-query",
                    env=env,
                )
                value = ir_measures.calc_aggregate([ir_measures.nDCG @ 10], qrels, ir_measures.read_trec_run(str(out)))
                value = float(next(iter(value.values())))
            else:
                cmd = rerank(
                    "indexes/nq-oracle.minilm",
                    split_files("nq-oracle").topics,
                    "models/nq-oracle-ce",
                    way,
                    out,
                    threads,
                    env=env,
                )
                value = answer_accuracy(out)
            rows.append({"way": label, measure: round(value, 4), "command": cmd})
        parts[part] = bounded(rows, measure)
    return parts


def answer_accuracy(run: Path) -> float:
    """DPR Acc@1 of an nq-oracle test run, as the eval command gives it."""
    cmd = [
        sys.executable,
        "-m",
        "tour_pyserini.eval",
        "--answers",
        split_files("nq-oracle").topics,
        "--collection",
        split_files("nq-oracle").collection,
        "--run",
        str(run),
        "--topk",
        "1",
        "--json",
    ]
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
    ap.add_argument(
        "--ways", nargs="+", help="quality: re-measure only these rows (labels as in the JSON), keeping the others"
    )
    ap.add_argument("--profile-int8", action="store_true", help=argparse.SUPPRESS)  # a child: int8's time by op
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.profile_int8:
        print(json.dumps(profile_int8(args.sample, args.threads)))
        return
    if args.one:
        print(json.dumps(time_one_way(args.one, args.sample, args.passes, args.threads)))
        return
    report = json.loads(OUT.read_text()) if OUT.is_file() else {}
    report["command"] = shlex.join(["python", "bench/runtime_speed.py", *sys.argv[1:]])
    if args.part in ("speed", "both"):
        measured = speed(args.sample, args.passes, args.rounds, args.threads)
        keep_speed(report, measured)
        for kernels, floor in measured["floors"]["floor_ms_per_pair"].items():
            print(f"floors under {kernels} (ms/pair): " + ", ".join(f"{p} {ms:.2f}" for p, ms in floor.items()))
        for kernels, shares in measured["int8_time_by_op"].items():
            print(f"int8's time under {kernels}: " + ", ".join(f"{op} {share:.0%}" for op, share in shares.items()))
        for row in measured["rows"]:
            print(
                f"{row['kernels']:8s} {row['way']:13s} {row['ms_per_pair']:7.2f} ms/pair "
                f"{row['pairs_per_s']:6.1f} pairs/s  x{row['x_torch_fp32']:.2f} torch fp32, "
                f"{row['times_floor']}x its floor"
            )
    if args.part in ("quality", "both"):
        report["quality"] = quality(args.threads, args.ways, report.get("quality", {}))
        print(json.dumps(report["quality"], indent=1))
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
