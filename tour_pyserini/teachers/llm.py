"""The causal-LM teacher: a local language model asked whether a document answers a query, read off its
next-token distribution (Qwen3-Reranker's recipe, which TTT-Embed uses as its reward).

No text is generated. The prompt ends where the answer begins; the score is the log-odds of the yes and
no tokens at that position, ``log P(yes) - log P(no)``. Its sigmoid is the normalised probability of yes,
``P(yes) / (P(yes) + P(no))``, the reward the paper defines; the log-odds keeps the same order without
saturating at 0 and 1, so it is what is stored.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import struct
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tour_pyserini.devices import DEFAULT_PRECISION, check_precision, resolve_precision
from tour_pyserini.encoders import weights_sha256
from tour_pyserini.encoders.checkpoints import checked_loading
from tour_pyserini.encoders.spec import check_model
from tour_pyserini.errors import UserError
from tour_pyserini.files.digest import file_sha256
from tour_pyserini.teachers.base import TEACHERS, ScoreRequest, ScoreSink, Teacher, TeacherContext
from tour_pyserini.teachers.cross_encoder import pair_text, run_in_float32
from tour_pyserini.teachers.prompts import (
    INSTRUCTION_OPTION,
    PRESETS,
    TEMPLATE_OPTION,
    Template,
    chat_template,
    check_instruction_read,
    instruction_option,
    prompt_ids,
    read_template,
)

GGUF_EXTRA = "pip install -e '.[gguf]'"
GGUF_MAGIC = b"GGUF"
DEFAULT_MAX_LENGTH = 1024  # prompt tokens; a SciFact abstract with the prompt fits in about 500


def answer_ids(tokenizer, template: Template) -> tuple[list[int], list[int]]:
    """The token ids read as yes and as no (see :class:`Template`); a word without a single token is refused."""
    out = []
    for word in template.answers:
        forms = (
            [word]
            if template.exact
            else sorted({f for w in (word, word.capitalize(), word.upper()) for f in (w, " " + w)})
        )
        ids = [ids[0] for ids in (tokenizer.encode(f, add_special_tokens=False) for f in forms) if len(ids) == 1]
        if not ids:
            raise UserError(
                f"llm teacher: {word!r} is not one token of this model's vocabulary; the template "
                f"{template.name!r} cannot be read as yes/no"
            )
        out.append(sorted(set(ids)))
    return out[0], out[1]


@functools.cache
def gguf_sha256(path: str, size: int, mtime_ns: int) -> str:
    """A GGUF file's digest, computed once while its size and modification time stay the same."""
    return file_sha256(path)


def check_gguf(path: Path) -> None:
    """A whole GGUF file, its header, metadata and every tensor's bytes, read as transformers reads them; a
    file that is not one, or is cut short, is one line (transformers' own parser stops deep inside)."""
    from gguf import GGUFReader

    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise UserError(f"llm teacher {str(path)!r} is not a GGUF file (it does not start with {GGUF_MAGIC!r})")
    try:
        GGUFReader(path)
    except (ValueError, struct.error) as e:  # the parser's words for bytes that end before what they announce
        raise UserError(f"llm teacher {str(path)!r}: a truncated or corrupt GGUF file ({e})") from None


def check_llm_path(path: str) -> tuple[str, str | None]:
    """The model directory (or hub id) and, for a GGUF file, its name; refused in one line before loading."""
    local = Path(path).expanduser()
    if local.suffix == ".gguf":
        if not local.is_file():
            raise UserError(f"llm teacher {path!r}: no such GGUF file")
        if importlib.util.find_spec("gguf") is None:
            raise UserError(
                f"llm teacher {path!r} is a GGUF file, which transformers reads with the gguf package: {GGUF_EXTRA}"
            )
        check_gguf(local)
        return str(local.parent), local.name
    check_model("llm teacher", path)
    return path, None


@TEACHERS.register
class LlmTeacher(Teacher):
    """Scores (query, "title text") pairs by a causal LM's yes/no next-token log-odds.

    The prompt is ``template`` (a :class:`Template`), else the model's chat template with the system message
    and a user turn holding instruction, query and document, else the ``plain`` preset. Pairs are sorted by
    length and run in left-padded batches (the next position is the last column of every row); a prompt
    longer than ``max_length`` tokens loses the end of its document only, so the instruction and the query
    stay whole. ``precision`` as for the cross-encoder: bf16 runs the model under bfloat16 autocast and the
    output layer in float32.
    """

    name = "llm"
    usage = "llm:PATH"
    options = (INSTRUCTION_OPTION, TEMPLATE_OPTION)

    def __init__(
        self,
        path: str,
        *,
        instruction: str | None = None,
        template: Template | None = None,
        max_length: int = DEFAULT_MAX_LENGTH,
        batch_size: int = 8,
        device: str = "cpu",
        precision: str = DEFAULT_PRECISION,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.instruction = instruction_option(instruction)
        self.precision = resolve_precision(precision, device, "--teacher-precision")
        model_dir, gguf_file = check_llm_path(path)
        self.path = path
        files = {"gguf_file": gguf_file} if gguf_file else {}
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(model_dir, **files)
        except (OSError, ValueError) as e:
            raise UserError(f"llm teacher {path!r}: its tokenizer cannot be loaded: {str(e).splitlines()[0]}") from None
        if not self.tokenizer.is_fast:
            raise UserError(f"llm teacher {path!r}: needs a fast tokenizer (it cuts documents by character offsets)")
        if template is None:
            template = chat_template(self.tokenizer) if self.tokenizer.chat_template else PRESETS["plain"]
        check_instruction_read(template, instruction)
        self.template = template
        self.yes_ids, self.no_ids = answer_ids(self.tokenizer, template)
        # float32 whatever the stored precision: CPU kernels for float16 are slow or missing
        with checked_loading(f"llm teacher {path!r}"):
            model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, **files)
        self.model = model.eval().to(device)
        limit = getattr(self.model.config, "max_position_embeddings", None) or max_length
        self.max_length = min(max_length, limit)
        self.batch_size = batch_size
        self.device = device
        if self.precision == "bf16":
            run_in_float32(self.model.get_output_embeddings(), torch.device(device).type)
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

    @classmethod
    def from_spec(cls, argument: str | None, context: TeacherContext) -> LlmTeacher:
        if not argument:
            raise UserError("the llm teacher needs a model: llm:PATH_OR_HUB_ID (a directory, a hub id or a .gguf file)")
        options: dict[str, Any] = {"device": context.device}
        if context.max_length is not None:
            options["max_length"] = context.max_length
        if context.precision is not None:
            options["precision"] = check_precision(context.precision, "--teacher-precision")
        instruction_option(context.options.get("instruction"))  # an empty one: before the model loads
        template = context.options.get("template")
        return cls(
            argument,
            instruction=context.options.get("instruction"),
            template=read_template(template) if template else None,
            **options,
        )

    def prompt_ids(self, query: str, document: str) -> list[int]:
        """The prompt's token ids, its document cut to fit ``max_length`` (:func:`prompt_ids`); the tokenizer's
        BOS first when it has one and the template does not write it."""
        before, after = self.template.render(query, self.instruction)
        bos = self.tokenizer.bos_token
        if bos and not before.startswith(bos):
            before = bos + before
        return prompt_ids(self.tokenizer, before, document.strip(), after, self.max_length)

    def score_pairs(
        self, queries: Sequence[str], texts: Sequence[str], done: Callable[[list[int], np.ndarray], None] | None = None
    ) -> np.ndarray:
        """Scores of the pairs; ``done(indices, scores)`` is called after each batch."""
        import torch

        prompts = [self.prompt_ids(q, t) for q, t in zip(queries, texts)]
        order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
        scores = np.empty(len(prompts))
        kind = torch.device(self.device).type
        bf16 = torch.autocast(kind, dtype=torch.bfloat16, enabled=self.precision == "bf16")
        with torch.inference_mode(), bf16:
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                width = max(len(prompts[i]) for i in idx)
                ids = torch.full((len(idx), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(idx), width), dtype=torch.long)
                for row, i in enumerate(idx):  # left padding: every prompt ends in the last column
                    ids[row, width - len(prompts[i]) :] = torch.tensor(prompts[i])
                    mask[row, width - len(prompts[i]) :] = 1
                positions = (mask.cumsum(1) - 1).clamp(min=0)  # each prompt counts from 0, as unpadded
                out = self.model(
                    input_ids=ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    position_ids=positions.to(self.device),
                    logits_to_keep=1,
                )
                logp = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
                odds = torch.logsumexp(logp[:, self.yes_ids], -1) - torch.logsumexp(logp[:, self.no_ids], -1)
                scores[idx] = odds.cpu().numpy()
                if done is not None:
                    done(idx, scores[idx])
        return scores

    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        return self.score_streaming(requests, lambda i, scores: None)

    def score_streaming(self, requests: Sequence[ScoreRequest], sink: ScoreSink) -> list[np.ndarray]:
        """Scores handed over batch by batch: a long run stopped midway keeps what it computed."""
        pairs = [(i, docid) for i, r in enumerate(requests) for docid in r.docids]

        def hand_over(indices: list[int], scores: np.ndarray) -> None:  # one store write per request per batch
            fresh: dict[int, dict[str, float]] = {}
            for k, score in zip(indices, scores.tolist()):
                fresh.setdefault(pairs[k][0], {})[pairs[k][1]] = score
            for i, scores_of_request in fresh.items():
                sink(i, scores_of_request)

        queries = [r.query for r in requests for _ in r.docids]
        texts = [pair_text(doc) for r in requests for doc in r.documents]
        flat = self.score_pairs(queries, texts, hand_over)
        bounds = np.cumsum([0] + [len(r.docids) for r in requests])
        return [flat[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    @property
    def label(self) -> str:
        return f"llm:{Path(self.path).name}"

    @property
    def fingerprint(self) -> str:
        """Label, prompt (template text and instruction), length read, precision and weights: a store filled
        under another prompt or by other weights is refused."""
        local = Path(self.path).expanduser()
        sha: str | None  # None: weights not on this machine
        if local.is_file():
            stat = local.stat()
            sha = gguf_sha256(str(local.resolve()), stat.st_size, stat.st_mtime_ns)
        else:
            sha = weights_sha256(self.path)
        prompt = hashlib.sha256(f"{self.template.text}\0{self.instruction}".encode()).hexdigest()[:16]
        return (
            f"{self.label} prompt {prompt} max_length {self.max_length} precision {self.precision} "
            f"weights {sha[:16] if sha else self.path}"
        )
