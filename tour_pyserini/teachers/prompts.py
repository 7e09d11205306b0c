"""The prompts LLM judges read: the yes/no judgement of one (query, document) pair, and the 0-5 score request.

A prompt is a template with ``{query}``, ``{document}`` and ``{instruction}``: a named preset, a text file,
or (for a local model that has one) the model's chat template around a system message and a user turn.
It is rendered with the document left as a marker and cut there, so a caller knows where the document
lies and can shorten it alone, keeping the instruction and the query whole.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.files.lines import read_text
from tour_pyserini.numbers import Param

INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
SYSTEM = (
    "Judge whether the Document meets the requirements based on the Query and the Instruct provided. "
    'Note that the answer can only be "yes" or "no".'
)
USER = "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {document}"
PLACEHOLDERS = ("{query}", "{document}", "{instruction}")
MARKER = "TOURPYSERINIDOCUMENTMARKER"  # a made-up word no template or tokenizer changes


@dataclass(frozen=True)
class Template:
    """A prompt with placeholders; ``answers`` are the words read as yes and no at the next position.

    ``exact`` answers are the tokens themselves (what a model trained on them, such as Qwen3-Reranker,
    emits); otherwise each answer is every single token that reads as it, any case, with or without a
    leading space (a base model may write " Yes" as well as "yes"), their probabilities summed.
    """

    name: str
    text: str
    answers: tuple[str, str] = ("yes", "no")
    exact: bool = False

    def render(self, query: str, instruction: str) -> tuple[str, str]:
        """The prompt before the document and after it."""
        text = self.text.replace("{query}", query).replace("{instruction}", instruction)
        before, _, after = text.replace("{document}", MARKER, 1).partition(MARKER)
        return before, after


PRESETS = {
    # Qwen3-Reranker's own format, with the empty thinking block its model card (and TTT-Embed) appends
    "qwen3-reranker": Template(
        "qwen3-reranker",
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{USER}<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n",
        exact=True,
    ),
    # for a model without a chat template (a base model) and for raw completions behind an API
    "plain": Template("plain", f"{SYSTEM}\n\n{USER}\n\nAnswer (yes or no):"),
}

INSTRUCTION_OPTION = Param(
    "instruction",
    str,
    help="the task an LLM teacher is told, before the query",
    flag="--teacher-instruction",
    metavar="TEXT",
    default_text=repr(INSTRUCTION),
)
TEMPLATE_OPTION = Param(
    "template",
    str,
    help=f"an LLM teacher's prompt: a preset ({', '.join(PRESETS)}) or a file "
    "with {query}, {document} and {instruction}",
    flag="--teacher-template",
    metavar="PRESET|FILE",
    default_text="the model's chat template, else plain",
)


def read_template(value: str) -> Template:
    """A preset by name, or a template file holding ``{query}`` and ``{document}`` (``{instruction}`` optional)."""
    if value in PRESETS:
        return PRESETS[value]
    path = Path(value)
    if not path.is_file():
        raise UserError(f"--teacher-template {value!r} is neither a preset ({', '.join(PRESETS)}) nor a file")
    try:
        text = read_text(path)
    except UserError as e:  # not UTF-8: the file, line and byte
        raise UserError(f"--teacher-template {e}") from None
    missing = [p for p in PLACEHOLDERS[:2] if p not in text]
    if missing:
        raise UserError(f"--teacher-template {value}: the template lacks {' and '.join(missing)}")
    if text.count("{document}") > 1:
        raise UserError(f"--teacher-template {value}: {{document}} appears more than once")
    return Template(path.name, text)


def chat_template(tokenizer) -> Template:
    """The model's chat template around the system message and the user turn, as a :class:`Template`."""
    from jinja2 import TemplateError

    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    except TemplateError:  # some templates refuse a system turn: it goes first in the user's
        messages = [{"role": "user", "content": f"{SYSTEM}\n\n{USER}"}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return Template("chat", text)


def prompt_ids(tokenizer, before: str, document: str, after: str, max_length: int) -> list[int]:
    """Token ids of ``before + document + after`` (special tokens only as the text spells them), tokenized
    whole; while longer than ``max_length``, the document's last tokens are dropped, so the text around it
    (instruction, query, the answer cue) stays whole, even when it alone is longer than the limit."""
    encoded = tokenizer(before + document + after, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
    ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
    excess = len(ids) - max_length
    if excess <= 0:
        return ids
    start, end = len(before), len(before) + len(document)
    in_document = [i for i, (a, _) in enumerate(offsets) if start <= a < end]
    cut = set(in_document[max(0, len(in_document) - excess) :])
    return [t for i, t in enumerate(ids) if i not in cut]


def check_instruction_read(template: Template, instruction: str | None) -> None:
    """An ``instruction`` given (not None) for a template without ``{instruction}`` would be read by no one."""
    if instruction is not None and "{instruction}" not in template.text:
        raise UserError(
            f"--teacher-instruction: the template {template.name!r} has no {{instruction}}, so the "
            "instruction would not be read"
        )


def instruction_option(value: str | None) -> str:
    if value is not None and not value.strip():
        raise UserError("--teacher-instruction is empty")
    return INSTRUCTION if value is None else value


# the verbalised judge: the TTT-Embed paper's 0-5 relevance score, asked for one pair
SCORE_SYSTEM = (
    "You rate how relevant a document is to a search query, on a scale from 0 (irrelevant) to 5 "
    "(perfectly relevant). Reply with the score alone: one digit from 0 to 5."
)
SCORE_USER = "Instruction: {instruction}\nQuery: {query}\nDocument: {document}\nScore (0-5):"
SCORE_REPLY = re.compile(r"\s*([0-5])(?:\.0+)?\s*")


def parse_score(reply: str) -> float | None:
    """The 0-5 score a reply holds, or None when the reply is anything but one score (strict: "4", " 4 ",
    "4.0"; not "4/5", "about 4" or "45")."""
    match = SCORE_REPLY.fullmatch(reply or "")
    return float(match.group(1)) if match else None
