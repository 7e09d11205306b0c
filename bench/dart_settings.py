"""DART's settings, chosen on SciFact's training claims only (never its test claims): nDCG@10 of the re-ranked top
100 over a grid around the defaults, and the variants a third-party summary of the paper describes (SGD momentum
within a query, a Reptile-style start and an exponential average of W that ranks; docs/algorithms.md, "DART").

Every query's candidates are searched once; each setting then adapts W query after query in the claims' order, as
the search command does, through the rewriter's own functions (rewriters/updates.py).
Writes runs/bench-dart-settings.json (every setting with its nDCG@10, best first).
Usage: python bench/dart_settings.py [--limit 100]
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np

GRID = {
    "margin": (0.0, 0.05, 0.1),
    "margin_slope": (0.0, 0.5, 1.0, 2.0, 4.0),
    "lr": (0.05, 0.1, 0.2, 0.5),
    "iterations": (3, 5),
    "momentum": (0.0, 0.9),
}
FIXED = ("depth", "positives", "negatives", "temperature")  # the rewriter's defaults, not searched here
# the summary's parts, each on top of the chosen defaults: SGD momentum within a query, the Reptile start at rate
# beta_meta (instead of the decaying buffer), the exponential average at alpha_ema ranking
VARIANTS = [
    {"sgd_momentum": 0.9},
    {"beta_meta": 0.1},
    {"beta_meta": 0.1, "alpha_ema": 0.5},
    {"beta_meta": 0.1, "alpha_ema": 0.9},
    {"alpha_ema": 0.5},
    {"alpha_ema": 0.9},
]


def adapt_run(queries, fixed, margin, margin_slope, lr, iterations, momentum) -> list[np.ndarray]:
    """The rewriter's arithmetic over a run: each query from I + B, B carried in order (momentum 0: none)."""
    from tour_pyserini.rewriters.updates import adaptive_margin, confidence_weights, dart_adapt, dart_buffer

    buffer, out = None, []
    for q, C in queries:
        w_pos, w_neg = confidence_weights(C @ q, fixed.positives, fixed.negatives, fixed.temperature)
        margin_q = adaptive_margin(q, C[0], margin, margin_slope)
        scores, h, _ = dart_adapt(q, C, buffer, w_pos, w_neg, margin_q, lr, iterations)
        buffer = dart_buffer(buffer, q, h, momentum)
        out.append(scores)
    return out


def summary_run(
    queries, fixed, margin, margin_slope, lr, iterations, momentum=0.0, sgd_momentum=0.0, beta_meta=0.0, alpha_ema=0.0
) -> list[np.ndarray]:
    """The summary's parts: heavy-ball SGD within a query; with ``beta_meta``, the next query starts from
    W_meta <- W_meta + beta_meta (W* - W_meta) instead of the decaying buffer; with ``alpha_ema``, the query is
    ranked by W_ema <- alpha_ema W_ema + (1 - alpha_ema) W*. Within a query every gradient is q g^T, so
    W = W_start + q h^T and its velocity q v^T."""
    from tour_pyserini.rewriters.updates import adaptive_margin, confidence_weights, dart_buffer, margin_loss_and_grad

    d = len(queries[0][0])
    start, ema, out = np.eye(d), None, []
    for q, C in queries:
        w_pos, w_neg = confidence_weights(C @ q, fixed.positives, fixed.negatives, fixed.temperature)
        margin_q = adaptive_margin(q, C[0], margin, margin_slope)
        u, qq, h, v = start.T @ q, q @ q, np.zeros(d), np.zeros(d)
        for _ in range(iterations):
            _, grad = margin_loss_and_grad(C @ (u + qq * h), w_pos, w_neg, margin_q)
            v = sgd_momentum * v + C.T @ grad
            h = h - lr * v
        adapted = start + np.outer(q, h)
        ema = adapted if (ema is None or alpha_ema == 0) else alpha_ema * ema + (1 - alpha_ema) * adapted
        out.append(C @ (ema.T @ q))
        if beta_meta:
            start = start + beta_meta * np.outer(q, h)
        else:  # the rewriter's buffer: I + momentum (W* - I)
            buffer = dart_buffer(start - np.eye(d), q, h, momentum)
            start = np.eye(d) if buffer is None else np.eye(d) + buffer
    return out


def main() -> None:
    from tour_pyserini.eval import QrelsJudge
    from tour_pyserini.files import read_qrels, read_topics
    from tour_pyserini.rewriters.dart import DartConfig
    from tour_pyserini.search import TourSearcher

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, help="the first N training claims only (a smoke run)")
    ap.add_argument("--output", default="runs/bench-dart-settings.json")
    args = ap.parse_args()
    searcher = TourSearcher.from_index("indexes/scifact.minilm")
    qrels = read_qrels("qrels/scifact.train.txt")
    topics = [t for t in read_topics("collections/scifact/topics.train.tsv") if t.qid in qrels][: args.limit]
    qids = [t.qid for t in topics]
    vectors = searcher.encode([t.text for t in topics])
    fixed = DartConfig()
    found = searcher.search_candidates(vectors, fixed.depth)
    queries = [(x.astype(np.float64), f.vectors.astype(np.float64)) for x, f in zip(vectors, found)]
    judge = QrelsJudge(qrels, ("nDCG@10",), qids=qids)

    def ndcg(scores: list[np.ndarray]) -> float:
        run = {qid: {d: float(s) for d, s in zip(f.docids, sc) if d != qid} for qid, f, sc in zip(qids, found, scores)}
        return float(np.mean(list(judge.per_query(run)["nDCG@10"].values())))

    rows = [{"setting": "dense", "nDCG@10": ndcg([C @ q for q, C in queries])}]
    for values in itertools.product(*GRID.values()):
        setting = dict(zip(GRID, values))
        rows.append({"setting": setting, "nDCG@10": ndcg(adapt_run(queries, fixed, **setting))})
    chosen = {k: getattr(fixed, k) for k in GRID}
    same = summary_run(queries, fixed, **chosen)  # with none of its parts, the summary's run is the rewriter's
    assert all(np.allclose(a, b) for a, b in zip(same, adapt_run(queries, fixed, **chosen)))
    for variant in VARIANTS:
        setting = {**chosen, **variant}
        if "beta_meta" in variant:  # the Reptile start replaces the buffer
            del setting["momentum"]
        rows.append({"setting": setting, "nDCG@10": ndcg(summary_run(queries, fixed, **setting))})
    rows.sort(key=lambda r: -r["nDCG@10"])
    out = {
        "command": "python bench/dart_settings.py",
        "claims": len(qids),
        "defaults": chosen,
        "fixed": {k: getattr(fixed, k) for k in FIXED},
        "rows": rows,
    }
    Path(args.output).write_text(json.dumps(out, indent=1) + "\n")
    for r in rows[:10] + [r for r in rows if r["setting"] in ("dense", chosen)]:
        print(f"{r['nDCG@10']:.4f}  {r['setting']}")


if __name__ == "__main__":
    main()
