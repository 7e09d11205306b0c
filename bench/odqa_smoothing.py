"""The final aggregation's smoothing for a normalised encoder, at the odqa preset, on training questions.

TOUR's final ranking is lambda softmax(teacher) + (1 - lambda) softmax(sim / smoothing). The paper's
smoothing 100 suits DPR's inner products (tens); the bundled MiniLM's cosine similarities lie in [-1, 1],
so the retriever term is flat at 100 and as peaked as in MiniLM's training at 0.05. The passage preset
(lambda 1) never reads it; the odqa preset (lambda 0.1) does. This runs tour-hard and tour-soft at the
odqa preset with each smoothing on nq-oracle's *training* questions (never test) and reports Acc@1/5/20,
so the default is chosen on data a user may tune on.

Writes runs/bench-odqa-smoothing.json.
Usage: python bench/odqa_smoothing.py [--questions 600] [--teacher bm25]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from wrapper_overhead import ensure_indexes

SMOOTHINGS = (100.0, 1.0, 0.1, 0.05, 0.02)
INDEX, BM25 = "indexes/nq-oracle.minilm", "indexes/nq-oracle.bm25"
TOPICS = "collections/nq-oracle/topics.train.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--questions", type=int, default=600, help="the first N training questions")
    ap.add_argument("--teacher", default="bm25", help="teacher spec")
    ap.add_argument("--output", default="runs/bench-odqa-smoothing.json")
    args = ap.parse_args()
    ensure_indexes("collections/nq-oracle", INDEX, BM25)

    from tqdm import tqdm

    from tour_pyserini.eval.answers import AnswerJudge, AnswerMatcher
    from tour_pyserini.files import read_topics
    from tour_pyserini.rewriters import Identity
    from tour_pyserini.rewriters.tour import TourHard, TourSoft
    from tour_pyserini.search import TourSearcher
    from tour_pyserini.teachers import TeacherContext, get_teacher

    searcher = TourSearcher.from_index(INDEX)
    topics = read_topics(TOPICS)[: args.questions]
    judge = AnswerJudge(topics, AnswerMatcher(searcher.docstore), (1, 5, 20))
    qids, texts = [t.qid for t in topics], [t.text for t in topics]
    vectors = searcher.encode(texts)
    teacher = get_teacher(args.teacher, TeacherContext(index_dir=INDEX))
    rows = []
    settings = [(Identity, None)] + [(cls, smoothing) for cls in (TourHard, TourSoft) for smoothing in SMOOTHINGS]
    for cls, smoothing in tqdm(settings, unit="setting"):
        rewriter = Identity() if cls is Identity else cls(teacher, preset="odqa", smoothing=smoothing)
        results = []
        for i in range(0, len(topics), 64):
            results += searcher.retrieve_vectors(
                texts[i : i + 64], qids[i : i + 64], vectors[i : i + 64], 100, rewriter=rewriter
            )
        per_query = judge.per_query({r.qid: {h.docid: h.score for h in r.hits} for r in results})
        metrics = {m: float(np.mean(list(v.values()))) for m, v in per_query.items()}
        rows.append({"rewriter": rewriter.name, "smoothing": smoothing, "metrics": metrics})
        setting = rewriter.name + (f" smoothing {smoothing:g}" if smoothing else "")
        tqdm.write(f"{setting}: " + " ".join(f"{m} {v:.4f}" for m, v in metrics.items()))
    command = f"python bench/odqa_smoothing.py --questions {args.questions} --teacher {args.teacher}"
    report = {
        "questions": len(topics),
        "topics": TOPICS,
        "teacher": args.teacher,
        "preset": "odqa",
        "rows": rows,
        "command": command,
    }
    Path(args.output).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
