"""The monot5 teacher on a tiny random-weight T5 (built here), checked against a direct forward pass."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tiny_models import corpus_lines, tiny_causal_lm, tiny_t5

from tour_pyserini.errors import UserError
from tour_pyserini.index.docstore import Document
from tour_pyserini.teachers import ScoreRequest, TeacherContext, get_teacher
from tour_pyserini.teachers.monot5 import MonoT5Teacher

QUERY = "what causes cancer"
TEXTS = [
    "Tumour growth is driven by mutations in oncogenes.",
    "Measles vaccination campaigns.",
    "Short.",
    "A study of bone density in older adults over ten years of follow up.",
]


@pytest.fixture(scope="module")
def t5_dir(tmp_path_factory) -> Path:
    return tiny_t5(tmp_path_factory.mktemp("tiny-t5"))


def direct_scores(model_dir: Path, inputs: list[str]) -> list[float]:
    """pygaggle's definition, unbatched: log-softmax at the first decoder step, log P(true) - log P(false)."""
    import torch
    from transformers import AutoTokenizer, T5ForConditionalGeneration

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = T5ForConditionalGeneration.from_pretrained(model_dir, dtype=torch.float32).eval()
    true, false = (tok.encode(w, add_special_tokens=False)[0] for w in ("true", "false"))
    out = []
    with torch.inference_mode():
        for text in inputs:
            ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]])
            start = torch.tensor([[model.config.decoder_start_token_id]])
            logp = torch.log_softmax(model(input_ids=ids, decoder_input_ids=start).logits[0, 0], -1)
            out.append(float(logp[true] - logp[false]))
    return out


def test_scores_equal_pygaggle_definition_and_batching_does_not_change_them(t5_dir):
    teacher = get_teacher(f"monot5:{t5_dir}", TeacherContext(precision="fp32"))
    docs = [Document(f"d{i}", "", t) for i, t in enumerate(TEXTS)]
    got = teacher.score([ScoreRequest("q", QUERY, [d.docid for d in docs], docs)])[0]
    want = direct_scores(t5_dir, [f"Query: {QUERY} Document: {t} Relevant:" for t in TEXTS])
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.ptp(got) > 1e-4
    one = MonoT5Teacher(str(t5_dir), batch_size=1, precision="fp32").score_pairs([QUERY] * 4, TEXTS)
    np.testing.assert_allclose(got, one, atol=1e-5)


def test_long_documents_lose_their_end_not_the_cue(t5_dir):
    teacher = MonoT5Teacher(str(t5_dir), max_length=60, precision="fp32")
    ids = teacher.input_ids(QUERY, " ".join(corpus_lines(2)))
    text = teacher.tokenizer.decode(ids)
    assert len(ids) == 60 and text.startswith(f"Query: {QUERY} Document: ") and text.endswith(" Relevant:<|im_end|>")


@pytest.mark.parametrize(
    "spec, message",
    [
        ("monot5", "the monot5 teacher needs a model: monot5:PATH_OR_HUB_ID"),
        ("monot5:/no/such/dir", "monot5 teacher '/no/such/dir': no such model directory"),
        ("monot5:{causal}", "is not an encoder-decoder model (model type qwen2)"),
    ],
)
def test_bad_input_is_one_line(tmp_path, spec, message):
    causal = tiny_causal_lm(tmp_path / "causal", chat=False) if "{causal}" in spec else None
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        get_teacher(spec.format(causal=causal), TeacherContext(precision="fp32"))
