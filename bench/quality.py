"""make bench-quality: TOUR against every baseline on SciFact test and nq-oracle test.

For each collection, with the trained cross-encoder teacher (models/scifact-rce, residual;
models/nq-oracle-ce, from the first recipe), its ensemble with BM25 and the retriever where the model
directory has one (``ensemble.json``, fitted on the teacher's dev queries) and the BM25 teacher: base
dense, BM25, Rocchio (T = 1..3), rerank@{10,20,40,100} and tour-hard / tour-soft at the passage preset with k in
{10, 20, 100} and T in {1, 2, 3}; every TOUR row is also compared with re-ranking at its own teacher
budget (rerank@K, K = its mean teacher calls per query). Beyond the paper, in the same table:
``+union`` ranks every candidate the teacher scored on the way (no extra teacher calls), and ``+lam``
interpolates teacher and retriever with a lambda tuned on the teacher's held-out *training* queries
(never on test).

Teacher scores are stored on disk (runs/quality/cache/), so the grid scores each (query, document) pair
once and an interrupted run resumes. Seconds per query are therefore assembled from measurements of
the same run: the measured encode + search + update time of the row, plus its teacher calls times the
seconds per pair of that teacher, measured at the start of the run on the base top-100 of 10 test
queries (the real teacher, no stored scores).

Writes runs/quality/<collection>/*.trec, runs/bench-quality.{json,md} and
runs/bench-quality-{latency,iterations}.png.
Usage: python bench/quality.py [--collections scifact nq-oracle] [--batch-size 32]
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from common import ensure_indexes, split_files

OUT = Path("runs/quality")
HITS = 100  # every metric reported reads the top 100
LAMBDAS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
RETRIEVER_SMOOTHING = 0.05  # sim / 0.05 = 20 sim: the logit scale MiniLM was trained with
RERANK_DEPTHS, TOUR_DEPTHS, ITERATIONS = (10, 20, 40, 100), (10, 20, 100), (1, 2, 3)


@dataclass(frozen=True)
class Collection:
    name: str
    teacher_dir: str  # the trained cross-encoder teacher
    metrics: tuple[str, ...] = ("nDCG@10", "R@100")
    headline: str = "nDCG@10"
    recall: str = "R@100"
    tune_on: str = "nDCG@10"  # the metric lambda is tuned on (held-out training queries)
    remove_query: bool = False  # BEIR: a document whose id is the query's id is not a result

    @property
    def topics(self) -> str:
        return split_files(self.name, "test").topics

    @property
    def qrels(self) -> str | None:  # None: judged by the topics' answer strings
        return split_files(self.name, "test").qrels

    @property
    def val_topics(self) -> str:  # the teacher's training topics; its held-out part tunes lambda
        return split_files(self.name, "train").topics

    @property
    def val_qrels(self) -> str | None:
        return split_files(self.name, "train").qrels

    @property
    def index(self) -> str:
        return f"indexes/{self.name}.minilm"

    @property
    def bm25_index(self) -> str:
        return f"indexes/{self.name}.bm25"


COLLECTIONS = {
    "scifact": Collection("scifact", "models/scifact-rce", remove_query=True),
    "nq-oracle": Collection(
        "nq-oracle",
        "models/nq-oracle-ce",
        metrics=("Acc@1", "Acc@5", "Acc@20", "Acc@100"),
        headline="Acc@20",
        recall="Acc@100",
        tune_on="Acc@1",
    ),  # Acc@20 is at its ceiling on held-out training queries, so lambda is tuned on Acc@1
}


def calibrate(teacher, bench: Bench, queries: int = 10, depth: int = 100) -> float:
    """Seconds per scored pair: the real teacher on the base top-``depth`` of ``queries`` test queries.

    Measured afresh in every run, never from stored scores, as a batch of queries the size TOUR and
    re-ranking send (all of them in one call).
    """
    from tour_pyserini.teachers import ScoreRequest

    topics = bench.topics[:queries]
    hits = bench.searcher.search_vectors(bench.vectors[:queries], depth)
    requests = []
    for topic, ranking in zip(topics, hits):
        docids = [h.docid for h in ranking]
        docs = bench.searcher.docstore.get(docids) if teacher.needs_text else None
        requests.append(ScoreRequest(topic.qid, topic.text, docids, docs))
    teacher.score(requests[:1])  # warm-up
    start = time.perf_counter()
    teacher.score(requests)
    return (time.perf_counter() - start) / sum(len(r.docids) for r in requests)


def make_judge(col: Collection, topics, qrels_path: str | None, docstore):
    """ir-measures on qrels, or DPR answer accuracy on answer strings, for exactly these topics."""
    from tour_pyserini.eval import QrelsJudge
    from tour_pyserini.eval.answers import AnswerJudge, AnswerMatcher
    from tour_pyserini.files import read_qrels

    if qrels_path:
        return QrelsJudge(read_qrels(qrels_path), col.metrics, qids=[t.qid for t in topics])
    return AnswerJudge(topics, AnswerMatcher(docstore), [int(m.split("@")[1]) for m in col.metrics])


@dataclass(frozen=True)
class System:
    name: str  # e.g. tour-soft, tour-soft+union+lam, rerank
    teacher: str  # "-" for teacher-free systems
    k: int | None = None
    iterations: int = 0
    variant: str = ""  # what else sets the run apart, e.g. the tuned lambda: part of its file name

    @property
    def label(self) -> str:
        return self.name + (f"@{self.k}" if self.k else "") + (f" T={self.iterations}" if self.iterations else "")

    @property
    def slug(self) -> str:
        parts = [
            self.name,
            f"k{self.k}" if self.k else "",
            f"T{self.iterations}" if self.iterations else "",
            self.variant,
            self.teacher if self.teacher != "-" else "",
        ]
        return ".".join(p for p in parts if p)


class Bench:
    """Runs systems on one collection's test topics (or, for tuning, its held-out training topics), each once.

    A finished run is read back, not redone.
    """

    def __init__(self, col: Collection, batch_size: int, val_topics):
        from tour_pyserini.files import read_topics
        from tour_pyserini.search import Bm25Searcher, TourSearcher
        from tour_pyserini.teachers.cross_encoder import resolve_precision

        self.col, self.batch_size = col, batch_size
        self.searcher = TourSearcher.from_index(col.index)
        self.bm25 = Bm25Searcher.from_index(col.bm25_index)
        self.topics = read_topics(col.topics)
        self.judge = make_judge(col, self.topics, col.qrels, self.searcher.docstore)
        self.vectors, self.encode_seconds = self._encode(self.topics)
        self.val_topics = val_topics
        self.val_vectors = self.searcher.encode([t.text for t in val_topics])
        self.val_judge = make_judge(col, val_topics, col.val_qrels, self.searcher.docstore)
        self.rows: dict[System, dict] = {}
        self.seconds_per_pair: dict[str, float] = {}  # teacher name -> measured seconds per scored pair
        self.versions: dict[str, str] = {}  # teacher name -> short hash of its fingerprint
        self.specs: dict[str, str] = {}  # teacher name -> its spec on the command line
        self.precision = resolve_precision("auto", "cpu")  # a cross-encoder's arithmetic, as the CLI's default

    def _encode(self, topics):
        texts = [t.text for t in topics]
        self.searcher.encode(texts[:4])  # warm-up
        start = time.perf_counter()
        vectors = self.searcher.encode(texts)
        return vectors, (time.perf_counter() - start) / len(topics)

    def run(self, system: System, make_rewriter=None, teacher=None, tuning: bool = False) -> dict:
        """The row of ``system``: metrics, per-query values, timing and teacher calls; cached on disk.

        ``make_rewriter`` is None for the BM25 system. With ``tuning`` it runs on the held-out training
        topics, and the row is only returned. Teacher time (scores come from the on-disk store) is left out
        of the row's measured time; :func:`calibrate` measures what a teacher call costs instead.
        """
        from tqdm import tqdm

        from tour_pyserini.files.runs import read_run, write_run

        if not tuning and system in self.rows:
            return self.rows[system]
        topics, vectors = (self.val_topics, self.val_vectors) if tuning else (self.topics, self.vectors)
        # a teacher's runs carry its fingerprint, so a retrained teacher never reads an old run back
        version = f".{self.versions[system.teacher]}" if system.teacher in self.versions else ""
        run_path = OUT / self.col.name / ("val" if tuning else "") / f"{system.slug}{version}.trec"
        meta_path = run_path.with_suffix(".json")
        if not (run_path.exists() and meta_path.exists()):
            rewriter = make_rewriter() if make_rewriter else None
            start, results = time.perf_counter(), []
            for i in tqdm(
                range(0, len(topics), self.batch_size),
                desc=f"{self.col.name} {system.label} {system.teacher}",
                unit="batch",
                leave=False,
            ):
                chunk = topics[i : i + self.batch_size]
                qids, texts = [t.qid for t in chunk], [t.text for t in chunk]
                if rewriter is None:
                    results += self.bm25.retrieve(texts, qids, HITS)
                else:
                    results += self.searcher.retrieve_vectors(
                        texts, qids, vectors[i : i + len(chunk)], HITS, rewriter=rewriter
                    )
            wall = time.perf_counter() - start - sum(r.trace.seconds["teacher"] for r in results)
            drop = self.col.remove_query
            write_run(
                run_path,
                [(r.qid, [h for h in r.hits if not (drop and h.docid == r.qid)]) for r in results],
                tag=system.slug,
            )
            meta = {
                "seconds_without_teacher_per_query": wall / len(topics),
                "teacher_calls_per_query": sum(r.trace.teacher_calls for r in results) / len(results),
                "iterations_per_query": sum(r.trace.iterations for r in results) / len(results),
            }
            meta_path.write_text(json.dumps(meta, indent=2) + "\n")
        meta = json.loads(meta_path.read_text())
        judge = self.val_judge if tuning else self.judge
        per_query = judge.per_query(read_run(run_path))  # the file's scores break ties in our rank order
        encode = self.encode_seconds if system.name != "bm25" else 0.0
        cost = self.seconds_per_pair[system.teacher] if teacher else 0.0
        row = {
            "collection": f"{self.col.name}-test" if not tuning else f"{self.col.name}-val",
            "system": system.name,
            "teacher": system.teacher,
            "k": system.k,
            "iterations": system.iterations,
            "metrics": {m: float(np.mean(list(v.values()))) for m, v in per_query.items()},
            "seconds_per_query": encode
            + meta["seconds_without_teacher_per_query"]
            + meta["teacher_calls_per_query"] * cost,
            "teacher_calls_per_query": meta["teacher_calls_per_query"],
            "iterations_per_query": meta["iterations_per_query"],
            "run": str(run_path),
            "command": self.command(system, run_path),
            "selected": system.teacher == "-" and system.name != "rocchio",  # dense, bm25: one configuration
            "per_query": per_query,
        }
        if not tuning:
            self.rows[system] = row
            print(
                f"{self.col.name:9s} {system.label:26s} {system.teacher:13s} "
                + " ".join(f"{m} {v:.4f}" for m, v in row["metrics"].items())
                + f"  {row['seconds_per_query'] * 1000:8.1f} ms/q {row['teacher_calls_per_query']:6.1f} calls/q",
                flush=True,
            )
        return row

    def select(self, configurations: list, teacher=None) -> System:
        """Of one method's ``(system, make_rewriter)`` configurations, the one with the best ``tune_on`` metric
        on the held-out training queries (the first of equals: grid order puts the cheaper first); its test
        row is marked ``selected``."""
        dev = [
            self.run(system, make, teacher, tuning=True)["metrics"][self.col.tune_on] for system, make in configurations
        ]
        best = configurations[int(np.argmax(dev))][0]
        self.rows[best]["selected"] = True
        return best

    def command(self, system: System, run_path: Path) -> str:
        """The search command that rebuilds the test run of ``system`` from a fresh clone (after ``make install``
        and the index builds): the score store only saves time, the scores are the teacher's own."""
        col = self.col
        index = col.bm25_index if system.name == "bm25" else col.index
        cmd = f"python -m tour_pyserini.search --index {index} --topics {col.topics} --hits {HITS}"
        cmd += " --remove-query" if col.remove_query else ""
        method, *extras = system.name.split("+")
        if method == "rocchio":
            cmd += f" --rewriter rocchio --prf-iterations {system.iterations}"
        elif system.teacher != "-":
            cmd += f" --rewriter {method} --teacher {self.specs[system.teacher]} --depth {system.k}"
            if self.specs[system.teacher] != "bm25":
                cmd += f" --teacher-precision {self.precision}"
            if method.startswith("tour"):
                cmd += f" --preset passage --iterations {system.iterations}"
            if "union" in extras:
                cmd += " --final union"
            if "lam" in extras:
                cmd += f" --lambda {system.variant.removeprefix('lam')} --smoothing {RETRIEVER_SMOOTHING}"
        return cmd + f" --output {run_path}"


def tune_lambda(bench: Bench, teacher_name: str, teacher, store) -> tuple[float, list]:
    """Lambda of rerank@100 with the retriever at 20 sim, best ``tune_on`` metric on held-out training queries."""
    from tour_pyserini.rewriters.rerank import Rerank

    curve = []
    for lam in LAMBDAS:
        system = System("rerank+lam", teacher_name, 100, variant=f"lam{lam}")
        row = bench.run(
            system,
            lambda lam=lam: Rerank(teacher, depth=100, lam=lam, smoothing=RETRIEVER_SMOOTHING, store=store),
            teacher,
            tuning=True,
        )
        curve.append((lam, row["metrics"][bench.col.tune_on]))
    best = max(curve, key=lambda c: (c[1], c[0]))[0]  # ties: the larger teacher weight
    print(
        f"{bench.col.name} {teacher_name}: lambda {best} ({bench.col.tune_on} on held-out training queries: "
        + ", ".join(f"{lam}: {v:.4f}" for lam, v in curve)
        + ")",
        flush=True,
    )
    return best, curve


def teacher_grid(bench: Bench, teacher_name: str, teacher, store) -> dict:
    """Every teacher-guided row of one collection (its cost per pair measured before), and one configuration
    per method chosen on the held-out training queries; returns the tuned lambda, that cost and the choices."""
    from tour_pyserini.rewriters.rerank import Rerank
    from tour_pyserini.rewriters.tour import TourHard, TourSoft

    for k in (100, 40, 20, 10):  # 100 first: the others re-rank a subset of its scored pairs
        bench.run(System("rerank", teacher_name, k), lambda k=k: Rerank(teacher, depth=k, store=store), teacher)
    lam, curve = tune_lambda(bench, teacher_name, teacher, store)
    interpolate = {"lam": lam, "smoothing": RETRIEVER_SMOOTHING}
    # method -> its configurations in grid order (the cheaper first: the first of equals is chosen)
    methods = {
        "rerank": [
            (System("rerank", teacher_name, k), lambda k=k: Rerank(teacher, depth=k, store=store))
            for k in RERANK_DEPTHS
        ],
        "rerank+lam": [
            (
                System("rerank+lam", teacher_name, k, variant=f"lam{lam}"),
                lambda k=k: Rerank(teacher, depth=k, store=store, **interpolate),
            )
            for k in RERANK_DEPTHS
        ],
    }
    variants = {"": {}, "+union": {"final": "union"}, "+union+lam": {"final": "union", **interpolate}}
    for cls in (TourHard, TourSoft):
        for suffix, options in variants.items():
            methods[cls.name + suffix] = [
                (
                    System(cls.name + suffix, teacher_name, k, T, f"lam{lam}" if "lam" in suffix else ""),
                    lambda c=cls, k=k, T=T, o=options: c(
                        teacher, preset="passage", depth=k, iterations=T, store=store, **o
                    ),
                )
                for k in TOUR_DEPTHS
                for T in ITERATIONS
            ]
    for configurations in methods.values():
        for system, make in configurations:
            bench.run(system, make, teacher)
    for system, row in list(bench.rows.items()):  # re-ranking at each TOUR row's own teacher budget
        if system.teacher == teacher_name and system.name.startswith("tour"):
            budget = max(1, round(row["teacher_calls_per_query"]))
            options = interpolate if "lam" in system.name else {}
            name = "rerank+lam" if options else "rerank"
            matched = bench.run(
                System(name, teacher_name, budget, variant=f"lam{lam}" if options else ""),
                lambda b=budget, o=options: Rerank(teacher, depth=b, store=store, **o),
                teacher,
            )
            row["matched_rerank"] = matched["run"]
    chosen = {method: bench.select(configurations, teacher) for method, configurations in methods.items()}
    # the goal "TOUR at k <= 20 as good as rerank@40, in less time" gets its own choice among those depths
    for method in ("tour-hard", "tour-soft"):
        fast = [(system, make) for system, make in methods[method] if system.k <= 20]
        chosen[f"{method}@k<=20"] = bench.select(fast, teacher)
    return {
        "lambda": lam,
        "smoothing": RETRIEVER_SMOOTHING,
        "val_queries": len(bench.val_topics),
        "curve": curve,
        "seconds_per_pair": bench.seconds_per_pair[teacher_name],
        "selected": {method: bench.rows[system]["run"] for method, system in chosen.items()},
    }


TEACHERS = ("cross-encoder", "ensemble", "bm25")


def teacher_spec(col: Collection, teacher_name: str) -> str | None:
    """The spec of a teacher of the grid on ``col``; None where the collection has no such teacher."""
    if teacher_name == "bm25":
        return "bm25"
    if teacher_name == "cross-encoder":
        return f"cross-encoder:{col.teacher_dir}"
    ensemble = Path(col.teacher_dir) / "ensemble.json"
    return f"ensemble:{ensemble}" if ensemble.exists() else None


def short_hash(teacher) -> str:
    import hashlib

    return hashlib.sha256(teacher.fingerprint.encode()).hexdigest()[:12]


class Stores:
    """One score store per teacher fingerprint under runs/quality/cache/, shared by every teacher that needs it:
    the ensemble's cross-encoder part reads the scores the cross-encoder's own rows stored (a retrained
    teacher has another fingerprint, so it starts afresh)."""

    def __init__(self, collection: str):
        self.collection, self.open = collection, {}

    def __call__(self, teacher):
        from tour_pyserini.teachers import ScoreStore

        if teacher.fingerprint not in self.open:
            path = OUT / "cache" / f"{self.collection}.{teacher.name}.{short_hash(teacher)}.sqlite"
            self.open[teacher.fingerprint] = ScoreStore(path, teacher.fingerprint)
        return self.open[teacher.fingerprint]


def run_collection(col: Collection, batch_size: int, teachers: list[str]) -> tuple[list[dict], dict]:
    from tour_pyserini.files import read_topics
    from tour_pyserini.rewriters import Identity
    from tour_pyserini.rewriters.prf import Rocchio
    from tour_pyserini.teachers import StoredTeacher, TeacherContext, get_teacher
    from tour_pyserini.teachers.ensemble import EnsembleTeacher

    ensure_indexes(f"collections/{col.name}", col.index, col.bm25_index)
    training = json.loads((Path(col.teacher_dir) / "training.json").read_text())
    val_ids = set(training["dev_qids"])  # never trained on
    bench = Bench(col, batch_size, [t for t in read_topics(col.val_topics) if t.qid in val_ids])
    bench.run(System("dense", "-"), Identity)
    bench.run(System("bm25", "-"))
    rocchio = [(System("rocchio", "-", iterations=T), lambda T=T: Rocchio(iterations=T)) for T in ITERATIONS]
    for system, make in rocchio:
        bench.run(system, make)
    bench.select(rocchio)
    tuned, stores = {}, Stores(col.name)
    context = TeacherContext(
        index_dir=col.index, max_length=training["config"]["max_length"], precision=bench.precision
    )
    for teacher_name in teachers:
        spec = teacher_spec(col, teacher_name)
        if spec is None:
            print(f"{col.name}: no {teacher_name} teacher in {col.teacher_dir}, skipped", flush=True)
            continue
        teacher = get_teacher(spec, context)
        bench.specs[teacher_name] = spec
        bench.seconds_per_pair[teacher_name] = calibrate(teacher, bench)  # the real teacher, nothing stored yet
        bench.versions[teacher_name] = short_hash(teacher)
        if isinstance(teacher, EnsembleTeacher):
            teacher.parts = [
                StoredTeacher(p, stores(p), bench.searcher.docstore) if p.needs_text else p for p in teacher.parts
            ]
        tuned[teacher_name] = teacher_grid(bench, teacher_name, teacher, stores(teacher))
    return list(bench.rows.values()), tuned


def add_significance(rows: list[dict], col: Collection) -> None:
    """Paired t-tests of each row against the base dense run and, for TOUR, against rerank at its budget."""
    from tour_pyserini.eval.significance import paired_t_test

    base = next(r for r in rows if r["system"] == "dense")
    by_run = {r["run"]: r for r in rows}
    for row in rows:
        row["p_vs_base"] = {}
        row["p_vs_matched_rerank"] = {}
        for metric in dict.fromkeys((col.tune_on, col.headline, col.recall)):
            qids = sorted(base["per_query"][metric])
            values = [row["per_query"][metric][q] for q in qids]
            row["p_vs_base"][metric] = paired_t_test(values, [base["per_query"][metric][q] for q in qids])
            if "matched_rerank" in row:
                other = by_run[row["matched_rerank"]]["per_query"][metric]
                row["p_vs_matched_rerank"][metric] = paired_t_test(values, [other[q] for q in qids])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--collections", nargs="+", default=list(COLLECTIONS), choices=list(COLLECTIONS))
    ap.add_argument("--teachers", nargs="+", default=list(TEACHERS), choices=TEACHERS)
    ap.add_argument("--batch-size", type=int, default=32, help="queries that advance together")
    ap.add_argument("--output", default="runs/bench-quality")
    args = ap.parse_args()

    from report_quality import write_report

    all_rows, tuning = [], {}
    for name in args.collections:
        col = COLLECTIONS[name]
        rows, tuning[name] = run_collection(col, args.batch_size, args.teachers)
        add_significance(rows, col)
        all_rows += rows
    write_report(all_rows, tuning, COLLECTIONS, args.output)


if __name__ == "__main__":
    main()
