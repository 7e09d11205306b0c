"""The questions a run asks the reader: each topic it answers, with the run's first k passages from a docstore."""

from __future__ import annotations

from tour_pyserini.answer.model import Passage, Question
from tour_pyserini.errors import UserError


def questions_to_read(run: dict, topics: list, docstore, k: int, run_path: str, where: str) -> list[Question]:
    """The topics the run holds, each with its first k passages; a run whose passages are not in the
    collection (``where``) is refused before any model loads."""
    common = [t for t in topics if run.get(t.qid)]
    if not common:
        raise UserError(f"{run_path} and the topics have no question in common")
    heads = {t.qid: list(run[t.qid].items())[:k] for t in common}  # read_run gives rank order
    docids = sorted({d for head in heads.values() for d, _ in head})
    missing = [d for d in docids if d not in docstore]
    if missing:
        raise UserError(
            f"{run_path}: {len(missing)} of its {len(docids)} passages are not in {where} "
            f"(a run over another collection?), e.g. {missing[:3]}"
        )
    docs = {doc.docid: doc for doc in docstore.get(docids)}
    return [Question(t.qid, t.text, tuple(Passage(d, docs[d].contents, s) for d, s in heads[t.qid])) for t in common]
