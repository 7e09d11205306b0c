"""Query encoding near its floor: how the bundled MiniLM encodes query texts, per batch size and precision.

1. Speed. Milliseconds per query of Pyserini's one text per call, texts of one token length per call,
   and padded chunks of texts sorted by length (chunks of 8, 16, 32), in float32 and under bfloat16
   autocast, on SciFact's test claims in batches of 1 to 300; each way's largest difference from Pyserini's
   one-at-a-time vectors; and the encoding's floor: the model's FLOPs on the real tokens (no padding) at the
   measured matrix-product peak of each precision.
2. Quality of bfloat16 against float32, the bound the cross-encoder's bfloat16 passed: nDCG@10 within
   0.002 and every query's Kendall tau >= 0.99 over float32's top 100 (both vectors scoring the same
   documents), on SciFact test (qrels) and nq-oracle test (passages holding an answer string are relevant).

Imported by bench/tour_speed.py (runs/bench-tour-speed.json, "query_encoding"); alone:
python bench/query_encoding.py [--output runs/bench-query-encoding.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from functools import partial
from pathlib import Path

import numpy as np
from common import split_files
from cross_encoder_speed import layer_flops, matmul_gflops

NDCG_BOUND, TAU_BOUND = 0.002, 0.99
BATCH_SIZES = (1, 8, 32, 64, 300)
CHUNKS = (8, 16, 32)


def best_seconds(way, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        way()
        best = min(best, time.perf_counter() - start)
    return best


def speed(index: str, topics: str, threads: int = 2, repeats: int = 3) -> dict:
    import torch

    from tour_pyserini.encoders.query import QueryEncoder, same_length_groups
    from tour_pyserini.files import read_topics
    from tour_pyserini.index.query_side import query_encoder_spec

    torch.set_num_threads(threads)
    spec = query_encoder_spec(index, None)
    encoders = {p: QueryEncoder.build(spec, precision=p) for p in ("fp32", "bf16")}
    pyserini = encoders["fp32"].pyserini
    texts = [t.text for t in read_topics(topics)]
    reference = np.stack([pyserini.encode(t) for t in texts])

    def one_length(precision: str, batch: list[str]) -> np.ndarray:
        out = np.empty((len(batch), reference.shape[1]), dtype=np.float32)
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            for rows in same_length_groups(pyserini.tokenizer, batch):
                out[rows] = np.asarray(pyserini.encode([batch[i] for i in rows])).reshape(len(rows), -1)
        return out

    def padded(precision: str, chunk: int, batch: list[str]) -> np.ndarray:
        encoder = encoders[precision]
        encoder.chunk = chunk
        return encoder.encode(batch)

    def per_batch(encode, size: int):
        return lambda: np.concatenate([encode(texts[i : i + size]) for i in range(0, len(texts), size)])

    ways = {f"{p} one length": partial(one_length, p) for p in ("fp32", "bf16")}
    ways |= {f"{p} padded {c}": partial(padded, p, c) for p in ("fp32", "bf16") for c in CHUNKS}
    rows = []
    for name, encode in ways.items():
        for size in BATCH_SIZES:
            if size == 1 and "padded" in name and not name.endswith(f" {CHUNKS[0]}"):
                continue  # one text per call: every chunk size is the same call
            run = per_batch(encode, size)
            vectors = run()  # also the warm-up
            rows.append(
                {
                    "way": name,
                    "batch": size,
                    "ms_per_query": best_seconds(run, repeats) / len(texts) * 1000,
                    "max_diff_vs_pyserini": float(np.abs(vectors - reference).max()),
                }
            )
    pyserini_ms = best_seconds(lambda: [pyserini.encode(t) for t in texts], repeats) / len(texts) * 1000
    config = pyserini.model.config
    tokens = [len(ids) for ids in pyserini.tokenizer(texts, truncation=True)["input_ids"]]
    gflop = (
        sum(config.num_hidden_layers * layer_flops(n, config.hidden_size, config.intermediate_size) for n in tokens)
        / len(texts)
        / 1e9
    )
    peaks = {
        p: matmul_gflops(threads, dtype, (4096, 1024, 1024))
        for p, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16))
    }
    torch.set_num_threads(threads)
    floors = {p: gflop / peak * 1000 for p, peak in peaks.items()}
    for row in rows:
        precision = row["way"].split()[0]
        row["times_floor"] = row["ms_per_query"] / floors[precision]
    return {
        "texts": len(texts),
        "threads": threads,
        "mean_tokens": float(np.mean(tokens)),
        "gflop_per_query": gflop,
        "matmul_peak_gflops": peaks,
        "floor_ms_per_query": floors,
        "pyserini_one_text_per_call_ms": pyserini_ms,
        "ways": rows,
    }


def label(way: tuple[str, str]) -> str:
    """How reports name a (runtime, precision) way: torch's by its precision alone, as before runtimes existed."""
    runtime, precision = way
    return precision if runtime == "torch" else f"{runtime} {precision}"


def quality(
    index: str,
    topics: str,
    qrels: str | None,
    depth: int = 100,
    way: tuple[str, str] = ("torch", "bf16"),
    threads: int = 2,
) -> dict:
    """nDCG@10 of torch's float32 query vectors (padded chunks) and of ``way``'s (runtime, precision), and each
    query's Kendall tau over the float32 top ``depth``."""
    import torch
    from scipy.stats import kendalltau

    from tour_pyserini.encoders.query import QueryEncoder
    from tour_pyserini.eval import evaluate
    from tour_pyserini.eval.answers import AnswerMatcher, answer_qrels
    from tour_pyserini.files import read_qrels, read_topics
    from tour_pyserini.index.query_side import query_encoder_spec
    from tour_pyserini.search import TourSearcher

    torch.set_num_threads(threads)
    spec = query_encoder_spec(index, None)
    topic_list = read_topics(topics)
    texts, qids = [t.text for t in topic_list], [t.qid for t in topic_list]
    other = label(way)
    vectors, runs = {}, {}
    for name, (runtime, precision) in (("fp32", ("torch", "fp32")), (other, way)):
        encoder = QueryEncoder.build(spec, precision=precision, runtime=runtime)
        searcher = TourSearcher.from_index(index, encoder=encoder)
        vectors[name] = searcher.encode(texts)
        found = searcher.search_vectors(vectors[name], depth, return_vector=True)
        runs[name] = {qid: {h.docid: h.score for h in hits} for qid, hits in zip(qids, found)}
        if name == "fp32":
            candidates = [np.stack([h.vector for h in hits]) for hits in found]
    taus = np.array(
        [kendalltau(c @ vectors[other][i], c @ vectors["fp32"][i]).statistic for i, c in enumerate(candidates)]
    )
    if qrels:
        judged = read_qrels(qrels)
    else:  # answer strings: every passage either run retrieved, judged by DPR's answer matching
        union = {q: runs["fp32"][q] | runs[other][q] for q in qids}
        judged = answer_qrels(union, topic_list, AnswerMatcher(searcher.docstore), 2 * depth)
    judged = {q: judged[q] for q in qids if q in judged}
    ndcg = {p: evaluate(judged, run, ["nDCG@10"]).means["nDCG@10"] for p, run in runs.items()}
    return {
        "queries": len(qids),
        "nDCG@10": ndcg,
        "ndcg10_difference": ndcg[other] - ndcg["fp32"],
        "tau_min": float(taus.min()),
        "tau_mean": float(taus.mean()),
        "queries_below_tau_bound": int((taus < TAU_BOUND).sum()),
        "max_abs_vector_diff": float(np.abs(vectors[other] - vectors["fp32"]).max()),
        "meets_bounds": bool(abs(ndcg[other] - ndcg["fp32"]) <= NDCG_BOUND and (taus >= TAU_BOUND).all()),
    }


def query_encoding(scifact_index: str = "indexes/scifact.minilm", nq_index: str = "indexes/nq-oracle.minilm") -> dict:
    return {
        "speed": speed(scifact_index, split_files("scifact").topics),
        "bf16_quality": {
            "bounds": {"ndcg10_within": NDCG_BOUND, "tau_at_least": TAU_BOUND},
            "scifact": quality(scifact_index, split_files("scifact").topics, str(split_files("scifact").qrels)),
            "nq-oracle": quality(nq_index, split_files("nq-oracle").topics, None),
        },
    }


def print_report(report: dict) -> None:
    s = report["speed"]
    print(
        f"query encoding, {s['texts']} SciFact claims, {s['mean_tokens']:.1f} tokens each: floor "
        f"{s['floor_ms_per_query']['fp32']:.2f} ms fp32, {s['floor_ms_per_query']['bf16']:.2f} ms bf16; Pyserini "
        f"one text per call {s['pyserini_one_text_per_call_ms']:.2f} ms"
    )
    for row in s["ways"]:
        print(
            f"  {row['way']:16s} batch {row['batch']:3d}: {row['ms_per_query']:.2f} ms/query "
            f"({row['times_floor']:.1f}x floor), max |diff| vs Pyserini {row['max_diff_vs_pyserini']:.1e}"
        )
    for name, q in report["bf16_quality"].items():
        if name != "bounds":
            print(
                f"  bf16 quality {name}: nDCG@10 {q['nDCG@10']['bf16']:.4f} vs fp32 {q['nDCG@10']['fp32']:.4f}, "
                f"tau min {q['tau_min']:.4f} ({q['queries_below_tau_bound']} queries below {TAU_BOUND}): "
                f"meets the bound: {q['meets_bounds']}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--output", default="runs/bench-query-encoding.json")
    args = ap.parse_args()
    report = query_encoding()
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    print_report(report)


if __name__ == "__main__":
    main()
