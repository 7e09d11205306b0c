"""Convert BEIR SciFact from the shared offline copy into the files this repo ships.

Writes (rerunnable; output is byte-identical for the same input):
  collections/scifact/corpus.jsonl       Pyserini JSONL: id, title, text, contents = title + "\\n" + text
  collections/scifact/topics.test.tsv    qid<TAB>text, the 300 BEIR test queries
  qrels/scifact.test.txt                 TREC qrels, 339 lines
  collections/scifact/topics.train.tsv   the 809 SciFact training claims (never the validation claims,
                                         which are BEIR's test queries), for training teachers
  qrels/scifact.train.txt                919 lines: each claim's cited_doc_ids, BEIR's recipe (checked:
                                         applied to claims_validation it gives the BEIR test qrels exactly)

Usage: python scripts/prepare_scifact.py [--source ../shared/data/scifact] [--root .]
"""

from __future__ import annotations

import argparse
import ast
import csv
import gzip
import io
import json
import re
import tokenize
import zipfile
from pathlib import Path


def abstract_sentences(cell: str) -> list[str]:
    """Sentences of a ``corpus_train.csv`` abstract cell.

    The cell is a NumPy-array repr of a list of strings, with adjacent literals separated only by
    whitespace, so ``literal_eval`` of the whole cell would glue sentences together. Read it token by
    token instead and evaluate each string literal on its own.
    """
    tokens = tokenize.generate_tokens(io.StringIO(cell).readline)
    return [ast.literal_eval(tok.string) for tok in tokens if tok.type == tokenize.STRING]


def convert_corpus(zip_path: Path, out: Path) -> int:
    csv.field_size_limit(1 << 30)
    with zipfile.ZipFile(zip_path) as zf, zf.open("corpus_train.csv") as raw:
        rows = list(csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8")))
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as f:
        for row in rows:
            title, text = row["title"].strip(), " ".join(abstract_sentences(row["abstract"])).strip()
            doc = {"id": row["doc_id"], "title": title, "text": text, "contents": f"{title}\n{text}"}
            f.write(json.dumps(doc, ensure_ascii=False) + "\n")
    return len(rows)


def cited_qrels(zip_path: Path, split: str) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """Claims of a split (id -> text, file order) and their (claim id, cited doc id) pairs."""
    with zipfile.ZipFile(zip_path) as zf, zf.open(f"claims_{split}.csv") as raw:
        rows = list(csv.DictReader(io.TextIOWrapper(raw, encoding="utf-8")))
    claims = {r["id"]: r["claim"].strip() for r in rows}
    pairs = list(dict.fromkeys((r["id"], d) for r in rows for d in re.findall(r"\d+", r["cited_doc_ids"])))
    return claims, pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=Path("../shared/data/scifact"))
    ap.add_argument("--root", type=Path, default=Path("."))
    args = ap.parse_args()

    n_docs = convert_corpus(args.source / "scifact-hf-export.zip", args.root / "collections/scifact/corpus.jsonl")
    with gzip.open(args.source / "topics.beir-v1.0.0-scifact.test.tsv.gz", "rt", encoding="utf-8") as f:
        topics = f.read()
    (args.root / "collections/scifact/topics.test.tsv").write_text(topics, encoding="utf-8")
    qrels = (args.source / "qrels.beir-v1.0.0-scifact.test.txt").read_text(encoding="utf-8")
    (args.root / "qrels").mkdir(exist_ok=True)
    (args.root / "qrels/scifact.test.txt").write_text(qrels, encoding="utf-8")

    zip_path = args.source / "scifact-hf-export.zip"
    _, validation_pairs = cited_qrels(zip_path, "validation")
    test_pairs = {(line.split()[0], line.split()[2]) for line in qrels.splitlines()}
    if set(validation_pairs) != test_pairs:
        raise SystemExit("cited_doc_ids of claims_validation no longer reproduce the BEIR test qrels")
    claims, pairs = cited_qrels(zip_path, "train")
    (args.root / "collections/scifact/topics.train.tsv").write_text(
        "".join(f"{qid}\t{text}\n" for qid, text in claims.items()), encoding="utf-8"
    )
    (args.root / "qrels/scifact.train.txt").write_text("".join(f"{q} 0 {d} 1\n" for q, d in pairs), encoding="utf-8")
    print(
        f"{n_docs} docs, {topics.count(chr(10))} test topics, {qrels.count(chr(10))} test qrels lines, "
        f"{len(claims)} train topics, {len(pairs)} train qrels lines"
    )


if __name__ == "__main__":
    main()
