"""How cost grows with the collection for each Faiss index type, and how much of TOUR survives approximate search.

1. Real collections (SciFact, nq-oracle): flat, HNSW and IVF-PQ indexes (HNSW and IVF-PQ re-indexed from the
   flat one's vectors with ``python -m tour_pyserini.index --from-index``); per type: build seconds, index
   bytes, search seconds per query, recall@100 against flat, and the dense and TOUR runs (tour-soft, passage
   preset, k 20, BM25 teacher) searched by the search CLI and scored: nDCG@10 / R@100 (SciFact test) or
   Acc@1/5/20/100 (nq-oracle test), with TOUR's seconds per query.
2. Synthetic 384-d vectors at 10^5, 10^6 and 3*10^6 documents (HNSW up to ``--hnsw-max``: its build is the
   slow one on 2 cores): build seconds, bytes, resident memory after searching, seconds per query,
   recall@100 against flat. The synthetic documents are noisy copies of real SciFact document vectors
   (a mixture centred on the real ones, so neighbourhoods have the clustered shape of real embeddings);
   the queries are the SciFact test query vectors.
3. A power law (seconds per query = a * n^b) fitted per type on the synthetic sizes and projected to the
   paper's 21M passages x 768 dimensions (the distance computations scale with d), with the memory each
   type needs there.

Search seconds are CPU seconds of one thread per query, searched one query at a time (a shared machine
inflates wall time, not the CPU time of a single-threaded search); build seconds are CPU seconds too.
Writes runs/bench-scale.json and runs/bench-scale.png. Usage: python bench/scale.py [--sizes 1e5 1e6 3e6]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import ROOT, ensure_indexes, split_files

DEPTH = 100
TYPES = ("flat", "hnsw", "ivfpq")
PAPER_DOCS, PAPER_DIM = 21_015_324, 768  # DPR's Wikipedia passages and BERT-base vectors
REAL = {
    "scifact": {
        "topics": split_files("scifact").topics,
        "qrels": split_files("scifact").qrels,
        "metrics": ("nDCG@10", "R@100"),
        "remove_query": True,
    },
    "nq-oracle": {
        "topics": split_files("nq-oracle").topics,
        "qrels": split_files("nq-oracle").qrels,
        "metrics": ("Acc@1", "Acc@5", "Acc@20", "Acc@100"),
        "remove_query": False,
    },
}
TOUR_FLAGS = ["--rewriter", "tour-soft", "--preset", "passage", "--depth", "20"]


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def search_cost(index, queries: np.ndarray, n: int = 50) -> float:
    """CPU seconds per query of one-thread searches, one query at a time, after one warm-up query."""
    index.search(queries[:1], DEPTH)
    start = time.process_time()
    for q in queries[:n]:
        index.search(q[None], DEPTH)
    return (time.process_time() - start) / min(n, len(queries))


def recall(found: np.ndarray, exact: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(found, exact)]))


def synthetic_chunks(real: np.ndarray, n: int, seed: int = 0, noise: float = 0.6, chunk: int = 100_000):
    """``n`` unit vectors, ``chunk`` rows at a time, each a real document vector plus Gaussian noise of norm
    about ``noise``, in float32 arithmetic (runs/bench-scale.json's sizes were made in float64: the same draws,
    rows differing in the last bits). One seed gives the same chunks in the same order: a collection of n rows
    starts with the whole chunks of any smaller one."""
    rng = np.random.default_rng(seed)
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        x = real[rng.integers(0, len(real), m)] + rng.standard_normal((m, real.shape[1]), dtype=np.float32) * (
            np.float32(noise / np.sqrt(real.shape[1]))
        )
        yield x / np.linalg.norm(x, axis=1, keepdims=True)


def synthetic(real: np.ndarray, n: int, seed: int = 0, noise: float = 0.6) -> np.ndarray:
    """The ``n`` rows of :func:`synthetic_chunks` as one array."""
    out = np.empty((n, real.shape[1]), dtype=np.float32)
    start = 0
    for x in synthetic_chunks(real, n, seed, noise):
        out[start : start + len(x)] = x
        start += len(x)
    return out


def synthetic_rows(base: np.ndarray, queries: np.ndarray, sizes: list[int], hnsw_max: int) -> list[dict]:
    import faiss

    from tour_pyserini.index import faiss_index
    from tour_pyserini.index.faiss_index import FaissIndexSpec

    faiss.omp_set_num_threads(1)
    rows = []
    for n in sizes:
        vectors = synthetic(base, n)
        exact = None
        for kind in TYPES:
            if kind == "hnsw" and n > hnsw_max:
                continue
            with tempfile.TemporaryDirectory(dir=ROOT / "indexes") as tmp:
                start = time.process_time()
                built = faiss_index.build(vectors, FaissIndexSpec(type=kind))
                build_s = time.process_time() - start
                path = Path(tmp) / "index"
                faiss.write_index(built, str(path))
                del built
                before = rss_mb()
                index = faiss_index.read(path)
                _, found = index.search(queries, DEPTH)
                if kind == "flat":
                    exact = found
                row = {
                    "collection": f"synthetic-{n}",
                    "docs": n,
                    "dim": vectors.shape[1],
                    "type": kind,
                    "build_cpu_s": round(build_s, 2),
                    "bytes": path.stat().st_size,
                    "resident_mb_after_search": round(rss_mb() - before, 1),
                    "search_cpu_s_per_query": search_cost(index, queries),
                    "recall@100": recall(found, exact),
                }
                print(json.dumps(row), flush=True)
                rows.append(row)
                del index
        del vectors
    return rows


def run_cli(args: list[str]) -> str:
    out = subprocess.run([sys.executable, *args], cwd=ROOT, check=True, capture_output=True, text=True)
    return out.stdout


def real_rows(name: str) -> list[dict]:
    """Every index type of one real collection: build, search cost, recall, dense and TOUR quality."""
    import faiss

    from tour_pyserini.eval import QrelsJudge
    from tour_pyserini.eval.answers import AnswerJudge, AnswerMatcher
    from tour_pyserini.files import read_qrels, read_topics
    from tour_pyserini.files.runs import read_run
    from tour_pyserini.index import faiss_index
    from tour_pyserini.index.docstore import DocStore
    from tour_pyserini.index.layout import IndexMeta
    from tour_pyserini.search import TourSearcher

    spec = REAL[name]
    flat_dir, bm25_dir = f"indexes/{name}.minilm", f"indexes/{name}.bm25"
    ensure_indexes(f"collections/{name}", flat_dir, bm25_dir)
    topics = read_topics(ROOT / spec["topics"])
    if spec["qrels"]:
        judge = QrelsJudge(read_qrels(ROOT / spec["qrels"]), spec["metrics"], qids=[t.qid for t in topics])
    else:
        docstore = DocStore(ROOT / flat_dir / "docstore.sqlite")
        judge = AnswerJudge(topics, AnswerMatcher(docstore), [int(m.split("@")[1]) for m in spec["metrics"]])
    queries = TourSearcher.from_index(ROOT / flat_dir).encode([t.text for t in topics])
    faiss.omp_set_num_threads(1)
    rows, exact = [], None
    for kind in TYPES:
        index_dir = flat_dir if kind == "flat" else f"indexes/{name}.minilm.{kind}"
        if kind != "flat":
            build = [
                "-m",
                "tour_pyserini.index",
                "--from-index",
                flat_dir,
                "--output",
                index_dir,
                "--faiss-index",
                kind,
                "--overwrite",
            ]
            run_cli(build)
        meta = IndexMeta.read(ROOT / index_dir)
        index = faiss_index.read(ROOT / index_dir / "index")
        _, found = index.search(queries, DEPTH)
        exact = found if kind == "flat" else exact
        row = {
            "collection": name,
            "docs": index.ntotal,
            "dim": index.d,
            "type": kind,
            "build_s": meta.build_seconds if kind != "flat" else None,
            "bytes": (ROOT / index_dir / "index").stat().st_size,
            "search_cpu_s_per_query": search_cost(index, queries),
            "recall@100": recall(found, exact),
            "faiss_index": meta.faiss_index,
        }
        for system, flags in (("dense", []), ("tour-soft@20.bm25", [*TOUR_FLAGS, "--teacher", f"bm25:{bm25_dir}"])):
            run = f"runs/scale/{name}.{kind}.{system}.trec"
            cmd = [
                "-m",
                "tour_pyserini.search",
                "--index",
                index_dir,
                "--topics",
                spec["topics"],
                "--output",
                run,
                "--hits",
                "100",
                "--threads",
                "1",
                "--no-resume",
                *flags,
                *(["--remove-query"] if spec["remove_query"] else []),
            ]
            printed = run_cli(cmd)
            seconds = float(re.search(r"([\d.]+) s/query", printed).group(1))
            row[system] = {
                "metrics": judge.aggregate(read_run(ROOT / run)),
                "s_per_query": seconds,
                "command": "python " + " ".join(cmd),
            }
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def fit_growth(rows: list[dict]) -> dict:
    """Per type: seconds per query = a * n^b on the synthetic sizes, projected to the paper's scale."""
    fits = {}
    for kind in TYPES:
        points = [
            (r["docs"], r["search_cpu_s_per_query"])
            for r in rows
            if r["type"] == kind and r["collection"].startswith("synthetic")
        ]
        if len(points) < 2:
            continue
        b, log_a = np.polyfit(np.log([n for n, _ in points]), np.log([s for _, s in points]), 1)
        # flat and IVF-PQ refinement cost is linear in d; HNSW's distance computations are too
        projected = float(np.exp(log_a) * PAPER_DOCS**b * PAPER_DIM / 384)
        fits[kind] = {"a": float(np.exp(log_a)), "b": float(b), "projected_s_per_query_21M_768d": projected}
    m, pq_m = 32, PAPER_DIM // 8
    fits["memory_gb_21M_768d"] = {  # a model from the index layouts, not a measurement
        "flat": PAPER_DOCS * PAPER_DIM * 4 / 1e9,
        "hnsw": PAPER_DOCS * (PAPER_DIM * 4 + 2 * m * 4) / 1e9,
        "ivfpq_codes_in_ram": PAPER_DOCS * (pq_m + 8) / 1e9,
        "ivfpq_exact_vectors_on_disk": PAPER_DOCS * PAPER_DIM * 4 / 1e9,
    }
    return fits


def plot(rows: list[dict], fits: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for kind, color in zip(TYPES, ("C0", "C1", "C2")):
        pts = sorted((r["docs"], r["search_cpu_s_per_query"]) for r in rows if r["type"] == kind)
        if not pts:
            continue
        ax.loglog(*zip(*pts), "o", color=color, label=f"{kind} (measured, 384-d)")
        if kind in fits:
            xs = np.logspace(np.log10(pts[0][0]), np.log10(PAPER_DOCS), 50)
            f = fits[kind]
            ax.loglog(xs, f["a"] * xs ** f["b"], "--", color=color, alpha=0.6, label=f"{kind} fit: n^{f['b']:.2f}")
            ax.loglog([PAPER_DOCS], [f["projected_s_per_query_21M_768d"]], "*", color=color, markersize=12)
    ax.axvline(PAPER_DOCS, color="grey", lw=0.8)
    ax.text(PAPER_DOCS, ax.get_ylim()[0] * 1.5, " 21M x 768 (stars)", color="grey", fontsize=8)
    ax.set_xlabel("documents")
    ax.set_ylabel(f"CPU seconds per query (top-{DEPTH}, 1 thread)")
    ax.set_title("Search cost against collection size per Faiss index type")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def document_vectors(path: Path) -> np.ndarray:
    from tour_pyserini.index import faiss_index

    index = faiss_index.read(path)
    return index.reconstruct_n(0, index.ntotal)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=float, nargs="+", default=[1e5, 1e6, 3e6])
    ap.add_argument("--hnsw-max", type=float, default=1e6, help="largest synthetic collection given an HNSW index")
    ap.add_argument("--skip-real", action="store_true")
    args = ap.parse_args()
    (ROOT / "runs" / "scale").mkdir(parents=True, exist_ok=True)
    rows = [] if args.skip_real else [row for name in REAL for row in real_rows(name)]
    base = document_vectors(ROOT / "indexes/scifact.minilm/index")
    from tour_pyserini.files import read_topics
    from tour_pyserini.search import TourSearcher

    topics = read_topics(ROOT / REAL["scifact"]["topics"])
    queries = TourSearcher.from_index(ROOT / "indexes/scifact.minilm").encode([t.text for t in topics[:100]])
    rows += synthetic_rows(base, queries, [int(n) for n in args.sizes], int(args.hnsw_max))
    fits = fit_growth(rows)
    out = ROOT / "runs" / "bench-scale.json"
    out.write_text(
        json.dumps(
            {"rows": rows, "growth": fits, "command": "python bench/scale.py " + " ".join(sys.argv[1:])}, indent=2
        )
        + "\n"
    )
    plot(rows, fits, ROOT / "runs" / "bench-scale.png")
    print(f"wrote {out} and runs/bench-scale.png")


if __name__ == "__main__":
    main()
