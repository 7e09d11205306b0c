"""Write the prebuilt form of a dense index (float16 vectors, docids, encoder identity) into prebuilt/<name>/.

    python scripts/export_prebuilt.py --index indexes/scifact.minilm --collection collections/scifact \
        --output prebuilt/scifact.minilm
"""

from __future__ import annotations

import argparse

from tour_pyserini.commands.runner import run_cli
from tour_pyserini.index.corpus import corpus_file
from tour_pyserini.index.prebuilt import export_prebuilt


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True, help="dense index built by python -m tour_pyserini.index")
    ap.add_argument("--collection", required=True, help="the collection it was built from")
    ap.add_argument("--output", required=True, help="prebuilt directory to write")
    args = ap.parse_args(argv)
    prebuilt = export_prebuilt(args.index, corpus_file(args.collection), args.output)
    m = prebuilt.manifest
    print(f"wrote {prebuilt.path}: {m['num_docs']} x {m['dimension']} {m['dtype']} vectors of {m['encoder']['name']}")


if __name__ == "__main__":
    run_cli(main)
