"""Convert the Cranfield collection into the files this repo ships.

Writes (rerunnable; byte-identical for the same input):
  collections/cranfield/corpus.jsonl   1,400 docs: id (the .I number), title (.T), text (.W), contents
  collections/cranfield/topics.tsv     225 queries, qid = 1..225 in order of appearance in cran.qry
                                       (the .I numbers in cran.qry skip values and are NOT the qrels ids)
  qrels/cranfield.txt                  TREC qrels with grades mapped to "higher is more relevant":
                                       original 1 (complete answer) -> 4, 2 (high relevance) -> 3,
                                       3 (useful background) -> 2, 4 (minimum interest) -> 1, -1 (none) -> 0

Usage: python scripts/prepare_cranfield.py [--source ../shared/data/cranfield] [--root .]
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

GRADES = {1: 4, 2: 3, 3: 2, 4: 1, -1: 0}


def records(path: Path) -> list[dict[str, str]]:
    """The ``.I``-introduced records of a SMART-format file, as {field letter: text}, plus 'I'."""
    out: list[dict[str, str]] = []
    field = None
    for line in path.read_text(encoding="latin-1").splitlines():
        if line.startswith(".I"):
            out.append({"I": line[2:].strip()})
            field = None
        elif re.fullmatch(r"\.[A-Z]", line.strip()):
            field = line.strip()[1]
            out[-1][field] = ""
        elif field:
            out[-1][field] += " " + line.strip()
    return [{k: " ".join(v.split()) for k, v in r.items()} for r in out]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", type=Path, default=Path("../shared/data/cranfield"))
    ap.add_argument("--root", type=Path, default=Path("."))
    args = ap.parse_args()

    out = args.root / "collections" / "cranfield"
    out.mkdir(parents=True, exist_ok=True)
    docs = records(args.source / "cran.all.1400")
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for d in docs:
            title, text = d.get("T", ""), d.get("W", "")
            f.write(json.dumps({"id": d["I"], "title": title, "text": text, "contents": f"{title}\n{text}"}) + "\n")
    queries = records(args.source / "cran.qry")
    with open(out / "topics.tsv", "w", encoding="utf-8") as f:
        for number, q in enumerate(queries, 1):
            f.write(f"{number}\t{q['W']}\n")
    (args.root / "qrels").mkdir(exist_ok=True)
    with open(args.root / "qrels" / "cranfield.txt", "w", encoding="utf-8") as f:
        for line in (args.source / "cranqrel").read_text().splitlines():
            qid, docid, grade = line.split()
            f.write(f"{qid} 0 {docid} {GRADES[int(grade)]}\n")
    print(f"{len(docs)} docs, {len(queries)} queries")


if __name__ == "__main__":
    main()
