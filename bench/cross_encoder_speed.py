"""How fast can the cross-encoder teacher score on this CPU, and what does a faster precision cost in ranking?

Pairs: the first ``--queries`` SciFact test claims (100 by default: 10,000 pairs), each with its dense top
``--depth`` (100) from ``indexes/scifact.minilm`` (the query's own id left out, as ``make demo`` does),
scored by the shipped ``models/scifact-rce`` at its trained length (256 tokens). That teacher is residual:
its score is its logit plus 20 times the retriever's similarity, which costs nothing and is the same at
every precision; speed times the logit, quality compares whole scores.

1. Speed, side by side in one run: every way scores the same random sample of ``--sample`` pairs
   ``--repeats`` times in alternating order; min and median milliseconds per pair (wall clock) and CPU
   milliseconds per pair. Ways: float32; bfloat16 autocast with the head in float32 (``bf16``) and with
   the score itself rounded to bfloat16 (``bf16-logit``); PyTorch dynamic int8 quantisation of every
   Linear layer; ONNX Runtime in float32 (when the ``onnx`` exporter package is installed); each at 1 and
   2 threads, and bf16 at batch sizes 16 to 128 (pairs of several queries share a batch).
2. The machine's limit: GFLOPS of a torch matrix product in float32 and bfloat16 at 1 and 2 threads, and
   the model's FLOPs per pair from its config at the sample's padded lengths, so each way's measured
   speed is also a fraction of the peak of its arithmetic.
   Where the bfloat16 way's time goes (torch's profiler, one pass): the linear layers, attention and the
   rest, each as a share of the time and at the GFLOPS its FLOPs were computed at; and each way's time
   against its floor (its FLOPs at the peak of its arithmetic).
3. Quality against float32 on all pairs: nDCG@10 of the re-ranked top ``--depth`` and per-query
   Kendall tau (tau-b) of each precision's scores against float32's. Bounds: nDCG@10 within 0.002 and
   every query's tau >= 0.99.

Writes runs/bench-ce-speed.json (``--part speed`` or ``quality`` re-measures one part and keeps the other).
Usage: python bench/cross_encoder_speed.py [--queries 100] [--sample 256] [--repeats 5] [--part both]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from common import ensure_indexes, split_files

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "models" / "scifact-rce"
NDCG_BOUND, TAU_BOUND = 0.002, 0.99


def scifact_pairs(n_queries: int, depth: int) -> list[dict]:
    """Each query's text, its dense top ``depth`` docids, their texts and their similarities to the query."""
    from tour_pyserini.files import read_topics
    from tour_pyserini.search import TourSearcher
    from tour_pyserini.teachers.cross_encoder import pair_text

    searcher = TourSearcher.from_index(str(ROOT / "indexes" / "scifact.minilm"))
    topics = read_topics(ROOT / split_files("scifact").topics)[:n_queries]
    rankings = searcher.search_vectors(searcher.encode([t.text for t in topics]), depth + 1)
    out = []
    for topic, ranking in zip(topics, rankings):
        kept = [h for h in ranking if h.docid != topic.qid][:depth]
        docids = [h.docid for h in kept]
        out.append(
            {
                "qid": topic.qid,
                "query": topic.text,
                "docids": docids,
                "sims": np.array([h.score for h in kept]),
                "texts": [pair_text(d) for d in searcher.docstore.get(docids)],
            }
        )
    return out


def layer_flops(seq: int, hidden: int, intermediate: int) -> int:
    """Multiply-adds x 2 of one encoder layer over ``seq`` tokens: Q, K, V and output projections
    (4 S H^2), the feed-forward block (2 S H I), and attention's scores and weighted sum (2 S^2 H)."""
    return 2 * (4 * seq * hidden**2 + 2 * seq * hidden * intermediate + 2 * seq**2 * hidden)


def pair_flops(config, seq: int) -> int:
    """FLOPs of one pair of ``seq`` tokens (padding included): every layer, then pooler and classifier."""
    head = 2 * config.hidden_size**2 + 2 * config.hidden_size * config.num_labels
    return config.num_hidden_layers * layer_flops(seq, config.hidden_size, config.intermediate_size) + head


def padded_lengths(teacher, queries: list[str], texts: list[str]) -> list[int]:
    """The padded length of each pair as ``score_pairs`` batches them (sorted by length, padded per batch)."""
    from tour_pyserini.teachers.cross_encoder import pair_inputs

    order = sorted(range(len(texts)), key=lambda i: len(queries[i]) + len(texts[i]))
    lengths = []
    for start in range(0, len(order), teacher.batch_size):
        idx = order[start : start + teacher.batch_size]
        inputs = pair_inputs(teacher.tokenizer, [queries[i] for i in idx], [texts[i] for i in idx], teacher.max_length)
        lengths += [inputs["input_ids"].shape[1]] * len(idx)
    return lengths


def matmul_gflops(threads: int, dtype, shape: tuple[int, int, int], repeats: int = 20) -> float:
    """Best GFLOPS of an (m x k) @ (k x n) torch matrix product at ``threads`` threads."""
    import torch

    torch.set_num_threads(threads)
    m, k, n = shape
    a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * m * k * n / best / 1e9


class OrtModel:
    """The teacher's model exported to ONNX and run by ONNX Runtime in float32, called as the model is."""

    def __init__(self, model, example, threads: int, directory: str):
        import onnxruntime as ort
        import torch

        names = ["input_ids", "attention_mask", "token_type_ids"]  # the order of BERT's forward arguments
        path = f"{directory}/model-t{threads}.onnx"
        dynamic = {name: {0: "batch", 1: "length"} for name in names} | {"logits": {0: "batch"}}
        torch.onnx.export(
            model,
            (),
            path,
            kwargs={n: example[n] for n in names},
            input_names=names,
            output_names=["logits"],
            dynamic_axes=dynamic,
            dynamo=False,
        )
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = threads
        # idle ONNX Runtime threads would otherwise spin for work, taking cores from the ways timed next
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

    def __call__(self, **inputs):
        import torch

        feed = {name: inputs[name].numpy() for name in ("input_ids", "attention_mask", "token_type_ids")}
        return SimpleNamespace(logits=torch.from_numpy(self.session.run(None, feed)[0]))


def arithmetic_teachers() -> dict:
    """The teacher at each arithmetic measured: its two precisions, and two that are not offered."""
    import torch

    from tour_pyserini.teachers.cross_encoder import CrossEncoderTeacher

    teachers = {p: CrossEncoderTeacher(MODEL, precision=p, runtime="torch") for p in ("fp32", "bf16")}
    teachers["bf16-logit"] = CrossEncoderTeacher(MODEL, precision="fp32", runtime="torch")
    teachers["bf16-logit"].precision = "bf16"  # autocast over the whole model, head included: a rounded score
    teachers["int8"] = CrossEncoderTeacher(MODEL, precision="fp32", runtime="torch")
    teachers["int8"].model = torch.ao.quantization.quantize_dynamic(
        teachers["int8"].model, {torch.nn.Linear}, dtype=torch.qint8
    )
    return teachers


def scorers(queries: list[str], texts: list[str], tmp: str) -> dict:
    """name -> (teacher, threads, batch size): every way the speed part times."""
    import torch

    from tour_pyserini.teachers.cross_encoder import CrossEncoderTeacher, pair_inputs

    teachers = arithmetic_teachers()
    ways = {}
    for threads in (1, 2):
        ways |= {f"{name} t{threads}": (teacher, threads, 32) for name, teacher in teachers.items()}
        try:
            onnx = CrossEncoderTeacher(MODEL, precision="fp32", runtime="torch")
            example = pair_inputs(onnx.tokenizer, queries[:2], texts[:2], onnx.max_length)
            onnx.model = OrtModel(onnx.model, example, threads, tmp)
            ways[f"onnx t{threads}"] = (onnx, threads, 32)
        except (ImportError, torch.onnx.OnnxExporterError) as e:  # the exporter needs the onnx package, which
            # nothing else here needs
            print(f"onnx skipped: {e}")
    ways |= {f"bf16 t2 b{size}": (teachers["bf16"], 2, size) for size in (16, 64, 128)}
    ways["fp32 t2 b64"] = (teachers["fp32"], 2, 64)
    return ways


def time_ways(ways: dict, queries: list[str], texts: list[str], repeats: int) -> dict:
    """Wall and CPU milliseconds per pair of each way, ``repeats`` alternating passes, garbage collector paused."""
    import torch

    wall: dict = {name: [] for name in ways}
    cpu: dict = {name: [] for name in ways}
    for teacher, threads, size in ways.values():  # warm-up: first calls allocate and pick kernels
        torch.set_num_threads(threads)
        teacher.batch_size = size
        teacher.score_pairs(queries[:size], texts[:size])
    for i in range(repeats):
        for name in list(ways) if i % 2 else list(ways)[::-1]:
            teacher, threads, size = ways[name]
            torch.set_num_threads(threads)
            teacher.batch_size = size
            gc.collect()
            gc.disable()
            start, start_cpu = time.perf_counter(), time.process_time()
            try:
                teacher.score_pairs(queries, texts)
            finally:
                gc.enable()
            wall[name].append((time.perf_counter() - start) / len(texts) * 1000)
            cpu[name].append((time.process_time() - start_cpu) / len(texts) * 1000)
    return {
        name: {"min_ms": min(wall[name]), "median_ms": statistics.median(wall[name]), "cpu_min_ms": min(cpu[name])}
        for name in ways
    }


ATTENTION_OPS = ("scaled_dot_product", "flash_attention", "aten::bmm", "aten::baddbmm", "aten::softmax")


def where_time_goes(teacher, queries: list[str], texts: list[str], config) -> dict:
    """Share of the self CPU time of one scoring pass in the linear layers (addmm), attention and the rest, and
    the GFLOPS the linear layers' and attention's FLOPs (from the config, at the padded lengths) ran at."""
    import torch
    from torch.profiler import profile

    torch.set_num_threads(2)
    teacher.batch_size = 32
    with profile() as prof:
        teacher.score_pairs(queries, texts)
    spent = {"linear": 0.0, "attention": 0.0, "rest": 0.0}
    for event in prof.key_averages():
        kind = (
            "linear"
            if event.key == "aten::addmm"
            else ("attention" if any(op in event.key for op in ATTENTION_OPS) else "rest")
        )
        spent[kind] += event.self_cpu_time_total / 1e6  # microseconds
    total = sum(spent.values())
    h, i, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    lengths = padded_lengths(teacher, queries, texts)
    flops = {
        "linear": sum(layers * 2 * (4 * n * h * h + 2 * n * h * i) for n in lengths),
        "attention": sum(layers * 2 * 2 * n * n * h for n in lengths),
    }
    return {
        "share_of_time": {k: v / total for k, v in spent.items()},
        "share_of_flops": {k: v / sum(flops.values()) for k, v in flops.items()},
        "gflops": {k: flops[k] / spent[k] / 1e9 for k in flops if spent[k]},
    }


def speed(pairs: list[dict], sample: int, repeats: int) -> dict:
    import torch
    from transformers import AutoConfig

    rng = np.random.default_rng(0)
    flat = [(p["query"], t) for p in pairs for t in p["texts"]]
    chosen = rng.choice(len(flat), size=min(sample, len(flat)), replace=False)
    queries, texts = [flat[i][0] for i in chosen], [flat[i][1] for i in chosen]
    with tempfile.TemporaryDirectory() as tmp:
        ways = scorers(queries, texts, tmp)
        times = time_ways(ways, queries, texts, repeats)
    config = AutoConfig.from_pretrained(MODEL)
    flops = {
        name: float(np.mean([pair_flops(config, n) for n in padded_lengths(teacher, queries, texts)]))
        for name, (teacher, _, _) in ways.items()
    }
    # the peak: the better of the model's feed-forward product (32 pairs x 128 tokens rows) and a square one
    shapes = ((4096, config.hidden_size, config.intermediate_size), (2048, 2048, 2048))
    peak = {
        f"{kind} t{threads}": max(matmul_gflops(threads, dtype, shape) for shape in shapes)
        for threads in (1, 2)
        for kind, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))
    }
    base = {t: times[f"fp32 t{t}"] for t in (1, 2)}
    for name, row in times.items():
        threads = ways[name][1]
        achieved = flops[name] / (row["min_ms"] / 1000) / 1e9
        arithmetic = name.split()[0].removesuffix("-logit")
        # int8's integer products have no measured peak here; ONNX Runtime computes in float32
        limit = peak.get(f"{arithmetic.replace('onnx', 'fp32')} t{threads}")
        row |= {
            "threads": threads,
            "batch_size": ways[name][2],
            "gflop_per_pair": flops[name] / 1e9,
            "speedup_vs_fp32": base[threads]["min_ms"] / row["min_ms"],
            "cpu_speedup_vs_fp32": base[threads]["cpu_min_ms"] / row["cpu_min_ms"],
            "gflops": achieved,
            "fraction_of_peak": None if limit is None else achieved / limit,
            "times_floor": None if limit is None else limit / achieved,
        }
    return {
        "sample_pairs": len(texts),
        "repeats": repeats,
        "matmul_gflops": peak,
        "ways": times,
        "mean_padded_length": float(np.mean(padded_lengths(ways["fp32 t2"][0], queries, texts))),
        "bf16_profile": where_time_goes(ways["bf16 t2"][0], queries, texts, config),
    }


def quality(pairs: list[dict], names: list[str]) -> dict:
    """nDCG@10 of each precision's re-ranking and its per-query Kendall tau against float32.

    Queries are scored one after another by every precision; on Ctrl-C the queries done so far are
    reported (a shared machine may not leave the time for all of them)."""
    import torch
    from scipy.stats import kendalltau

    from tour_pyserini.eval import evaluate
    from tour_pyserini.files import read_qrels
    from tour_pyserini.teachers.cross_encoder import read_residual

    torch.set_num_threads(2)
    scale = (read_residual(MODEL) or {}).get("dense_scale", 0.0)
    teachers = {name: teacher for name, teacher in arithmetic_teachers().items() if name in {"fp32", *names}}
    scores: dict = {name: [] for name in teachers}
    start = time.perf_counter()
    try:
        for i, p in enumerate(pairs):
            done = [
                teacher.score_pairs([p["query"]] * len(p["texts"]), p["texts"]) + scale * p["sims"]
                for teacher in teachers.values()
            ]
            for name, values in zip(teachers, done):
                scores[name].append(values)
            print(f"quality: {i + 1} queries scored in {time.perf_counter() - start:.0f} s", flush=True)
    except KeyboardInterrupt:
        print(f"quality: interrupted; reporting the first {len(scores['fp32'])} queries")
    pairs = pairs[: len(scores["fp32"])]
    qrels = read_qrels(ROOT / str(split_files("scifact").qrels))
    qrels = {p["qid"]: qrels[p["qid"]] for p in pairs if p["qid"] in qrels}
    out = {}
    for name in teachers:
        run = {p["qid"]: dict(zip(p["docids"], s.tolist())) for p, s in zip(pairs, scores[name])}
        taus = np.array([kendalltau(s, ref).statistic for s, ref in zip(scores[name], scores["fp32"])])
        ties = sum(len(s) - len(np.unique(s)) for s in scores[name])
        diff = max(np.abs(s - r).max() for s, r in zip(scores[name], scores["fp32"]))
        out[name] = {
            "nDCG@10": evaluate(qrels, run, ["nDCG@10"]).means["nDCG@10"],
            "tau_min": float(taus.min()),
            "tau_mean": float(taus.mean()),
            "queries_below_tau_bound": int((taus < TAU_BOUND).sum()),
            "tied_scores": int(ties),
            "max_abs_diff": float(diff),
        }
    for row in out.values():
        row["meets_bounds"] = bool(
            abs(row["nDCG@10"] - out["fp32"]["nDCG@10"]) <= NDCG_BOUND and row["queries_below_tau_bound"] == 0
        )
    return {
        "queries": len(pairs),
        "pairs": sum(len(p["texts"]) for p in pairs),
        "bounds": {"ndcg10_within": NDCG_BOUND, "tau_at_least": TAU_BOUND},
        "precisions": out,
    }


def print_speed(part: dict) -> None:
    for name, row in part["ways"].items():
        peak = "" if row["fraction_of_peak"] is None else f" = {row['fraction_of_peak']:.0%} of peak"
        print(
            f"{name:16s} {row['min_ms']:6.2f} ms/pair (median {row['median_ms']:6.2f}, cpu {row['cpu_min_ms']:6.2f})"
            f"  x{row['speedup_vs_fp32']:.2f} vs fp32 (cpu x{row['cpu_speedup_vs_fp32']:.2f})"
            f"  {row['gflops']:6.1f} GFLOPS{peak}"
        )
    print("matmul GFLOPS:", {k: round(v, 1) for k, v in part["matmul_gflops"].items()})
    prof = part["bf16_profile"]
    print(
        "bf16 t2, where the time goes: "
        + ", ".join(
            f"{k} {prof['share_of_time'][k]:.0%} of the time ({prof['share_of_flops'].get(k, 0):.0%} of the FLOPs"
            + (f", {prof['gflops'][k]:.0f} GFLOPS)" if k in prof["gflops"] else ")")
            for k in prof["share_of_time"]
        )
    )


def print_quality(part: dict) -> None:
    for name, row in part["precisions"].items():
        print(
            f"{name:10s} nDCG@10 {row['nDCG@10']:.4f}  tau min {row['tau_min']:.4f} mean {row['tau_mean']:.4f}"
            f"  below {TAU_BOUND}: {row['queries_below_tau_bound']}  ties {row['tied_scores']}"
            f"  meets bounds: {row['meets_bounds']}"
        )


def main() -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--queries", type=int, default=100, help="first SciFact test queries (100: 10,000 pairs)")
    ap.add_argument("--depth", type=int, default=100, help="dense candidates re-ranked per query")
    ap.add_argument("--sample", type=int, default=256, help="pairs each way scores in the speed part")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--part",
        choices=["speed", "quality", "both"],
        default="both",
        help="what to measure; a part not measured is kept from an existing report",
    )
    ap.add_argument(
        "--quality-precisions",
        nargs="+",
        default=["bf16", "bf16-logit", "int8"],
        help="what the quality part compares with fp32",
    )
    ap.add_argument("--output", default=str(ROOT / "runs" / "bench-ce-speed.json"))
    args = ap.parse_args()
    output = Path(args.output)
    report = json.loads(output.read_text()) if output.exists() and args.part != "both" else {}
    report |= {"model": "models/scifact-rce", "torch": torch.__version__, "cores": torch.get_num_threads()}
    ensure_indexes("collections/scifact", "indexes/scifact.minilm")
    pairs = scifact_pairs(args.queries, args.depth)
    if args.part != "quality":
        report["speed"] = speed(pairs, args.sample, args.repeats)
        print_speed(report["speed"])
    if args.part != "speed":
        report["quality"] = quality(pairs, args.quality_precisions)
        print_quality(report["quality"])
    output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
