"""Question–passage pairs as the reader's input windows: ``[CLS] question [SEP] passage [SEP]``, a long passage
cut into windows of at most ``max_length`` tokens that overlap by ``stride`` tokens (the tokenizer's own
overflow), so an answer near a cut is whole in one window. Each window keeps which of its tokens are the
passage's and the character offsets of those tokens, to turn a token span back into the passage's text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tour_pyserini.errors import UserError


@dataclass(frozen=True)
class Window:
    pair: int  # which (question, passage) pair of the call it comes from
    input_ids: list[int]
    token_type_ids: list[int] | None
    context: np.ndarray  # bool: the token is the passage's
    offsets: list[tuple[int, int]]  # character span of each token in the passage text


def question_budget(tokenizer, *, max_length: int, stride: int, max_question_length: int = 64) -> int:
    """Tokens of a question in a window: at most ``max_question_length``, and few enough that the passage keeps
    more than ``stride`` tokens beside it (the tokenizer's overflow needs that); one line if none is left."""
    budget = min(max_question_length, max_length - tokenizer.num_special_tokens_to_add(pair=True) - stride - 1)
    if budget < 1:
        raise UserError(
            f"--max-length {max_length} with --stride {stride} leaves no room for a question: a window "
            f"holds {tokenizer.num_special_tokens_to_add(pair=True)} special tokens and more than "
            "--stride tokens of passage; raise --max-length or lower --stride"
        )
    return budget


def make_windows(
    tokenizer,
    questions: Sequence[str],
    passages: Sequence[str],
    *,
    max_length: int,
    stride: int,
    max_question_length: int = 64,
) -> list[Window]:
    """The windows of each ``(questions[i], passages[i])`` pair, in pair order. A question is cut first to
    :func:`question_budget` tokens, so that every window has room for the passage."""
    budget = question_budget(tokenizer, max_length=max_length, stride=stride, max_question_length=max_question_length)
    questions = [_cut(tokenizer, q, budget) for q in questions]
    enc = tokenizer(
        list(questions),
        list(passages),
        truncation="only_second",
        max_length=max_length,
        stride=stride,
        return_overflowing_tokens=True,
        return_offsets_mapping=True,
    )
    windows = []
    for w, ids in enumerate(enc["input_ids"]):
        sequence = enc.sequence_ids(w)
        context = np.array([s == 1 for s in sequence])
        types = enc["token_type_ids"][w] if "token_type_ids" in enc else None
        windows.append(
            Window(
                int(enc["overflow_to_sample_mapping"][w]),
                ids,
                types,
                context,
                [tuple(o) for o in enc["offset_mapping"][w]],
            )
        )
    return windows


def _cut(tokenizer, question: str, max_tokens: int) -> str:
    ids = tokenizer(question, add_special_tokens=False)["input_ids"]
    return question if len(ids) <= max_tokens else tokenizer.decode(ids[:max_tokens])


def length_sorted_batches(windows: Sequence[Window], batch_size: int) -> list[list[int]]:
    """Window indices in batches of similar length (longest first), so little of each batch is padding."""
    order = sorted(range(len(windows)), key=lambda i: (-len(windows[i].input_ids), i))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def collate(windows: Sequence[Window], pad_id: int) -> dict[str, np.ndarray]:
    """Padded ``input_ids``, ``attention_mask`` (and ``token_type_ids`` where the model has them)."""
    width = max(len(w.input_ids) for w in windows)
    ids = np.full((len(windows), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(windows), width), dtype=np.int64)
    types = np.zeros((len(windows), width), dtype=np.int64)
    for row, w in enumerate(windows):
        ids[row, : len(w.input_ids)] = w.input_ids
        mask[row, : len(w.input_ids)] = 1
        if w.token_type_ids is not None:
            types[row, : len(w.input_ids)] = w.token_type_ids
    batch = {"input_ids": ids, "attention_mask": mask}
    if windows[0].token_type_ids is not None:
        batch["token_type_ids"] = types
    return batch
