"""The llm teacher on a tiny random-weight causal LM (a real Qwen2 model and a real BPE tokenizer, built here),
checked against a direct forward pass of each prompt; and on the real Gemma 3 270M where the [llm] extra is in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tiny_models import corpus_lines, tiny_causal_lm

from tour_pyserini.errors import UserError
from tour_pyserini.index.docstore import Document
from tour_pyserini.teachers import ScoreRequest, TeacherContext, get_teacher
from tour_pyserini.teachers.llm import LlmTeacher
from tour_pyserini.teachers.prompts import INSTRUCTION, PRESETS, SYSTEM, read_template


@pytest.fixture(scope="module")
def tiny_chat_lm(tmp_path_factory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("tiny-chat-lm"), chat=True)


@pytest.fixture(scope="module")
def tiny_base_lm(tmp_path_factory) -> Path:
    return tiny_causal_lm(tmp_path_factory.mktemp("tiny-base-lm"), chat=False, bos=True)


def docs(texts: list[str]) -> list[Document]:
    return [Document(f"d{i}", "", t) for i, t in enumerate(texts)]


def direct_scores(model_dir: Path, prompts: list[str], yes: list[str], no: list[str]) -> list[float]:
    """One unpadded forward pass per prompt: log-sum-exp of the yes tokens' log-probabilities minus the no ones'."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    yes_ids = sorted({tok.encode(w, add_special_tokens=False)[0] for w in yes})
    no_ids = sorted({tok.encode(w, add_special_tokens=False)[0] for w in no})
    out = []
    with torch.inference_mode():
        for prompt in prompts:
            ids = torch.tensor([tok(prompt, add_special_tokens=False)["input_ids"]])
            logp = torch.log_softmax(model(input_ids=ids).logits[0, -1], -1)
            out.append(float(torch.logsumexp(logp[yes_ids], 0) - torch.logsumexp(logp[no_ids], 0)))
    return out


QUERIES = ["what causes cancer", "vaccines and immunity in children under five"]
TEXTS = ["Tumour growth is driven by mutations in oncogenes.", "Measles vaccination campaigns.",
         "A study of bone density in older adults over ten years of follow up.", "Short."]  # fmt: skip


def single_token_forms(tokenizer, word: str) -> list[str]:
    forms = {f for w in (word, word.capitalize(), word.upper()) for f in (w, " " + w)}
    return [f for f in forms if len(tokenizer.encode(f, add_special_tokens=False)) == 1]


def test_chat_template_scores_equal_a_direct_forward_pass(tiny_chat_lm):
    from transformers import AutoTokenizer

    teacher = get_teacher(f"llm:{tiny_chat_lm}", TeacherContext(precision="fp32"))
    docids = [f"d{j}" for j in range(len(TEXTS))]
    requests = [ScoreRequest(f"q{i}", q, docids, docs(TEXTS)) for i, q in enumerate(QUERIES)]
    got = teacher.score(requests)
    tok = AutoTokenizer.from_pretrained(tiny_chat_lm)
    prompts = [f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n<Instruct>: {INSTRUCTION}\n<Query>: {q}\n"
               f"<Document>: {t}<|im_end|>\n<|im_start|>assistant\n" for q in QUERIES for t in TEXTS]  # fmt: skip
    want = direct_scores(tiny_chat_lm, prompts, single_token_forms(tok, "yes"), single_token_forms(tok, "no"))
    np.testing.assert_allclose(np.concatenate(got), want, atol=1e-5)
    assert np.ptp(np.concatenate(got)) > 1e-3  # the random model does tell the pairs apart


def test_batching_and_padding_leave_scores_alone(tiny_chat_lm):
    texts = TEXTS * 3
    one = LlmTeacher(str(tiny_chat_lm), batch_size=1, precision="fp32").score_pairs(["q"] * len(texts), texts)
    five = LlmTeacher(str(tiny_chat_lm), batch_size=5, precision="fp32").score_pairs(["q"] * len(texts), texts)
    np.testing.assert_allclose(five, one, atol=1e-5)


def test_truncation_cuts_the_document_only(tiny_chat_lm):
    long_query = "which mutations of the tumour suppressor genes drive growth in colorectal cancer"
    long_doc = " ".join(corpus_lines(3))
    bare = len(LlmTeacher(str(tiny_chat_lm), precision="fp32").prompt_ids(long_query, ""))
    teacher = LlmTeacher(str(tiny_chat_lm), max_length=bare + 20, precision="fp32")
    ids = teacher.prompt_ids(long_query, long_doc)
    text = teacher.tokenizer.decode(ids)
    assert len(ids) == bare + 20
    assert long_query in text and INSTRUCTION in text and text.endswith("<|im_start|>assistant\n")
    assert long_doc[:20] in text and long_doc[-40:] not in text
    assert teacher.tokenizer.decode(teacher.prompt_ids("q", "Short.")).count("Short.") == 1
    # a prompt longer than the limit without its document keeps the query whole and loses the document
    tight = LlmTeacher(str(tiny_chat_lm), max_length=bare - 10, precision="fp32")
    squeezed = tight.tokenizer.decode(tight.prompt_ids(long_query, long_doc))
    assert long_query in squeezed and long_doc[:20] not in squeezed


def test_template_file_and_presets(tiny_base_lm, tmp_path):
    template = tmp_path / "judge.txt"
    template.write_text("Task: {instruction}\nQ: {query}\nD: {document}\nRelevant:")
    teacher = get_teacher(f"llm:{tiny_base_lm}", TeacherContext(precision="fp32", options={
        "template": str(template), "instruction": "Find abstracts"}))  # fmt: skip
    got = teacher.score_pairs(QUERIES[:1] * 2, TEXTS[:2])
    prompts = [f"<bos>Task: Find abstracts\nQ: {QUERIES[0]}\nD: {t}\nRelevant:" for t in TEXTS[:2]]
    tok = teacher.tokenizer
    want = direct_scores(tiny_base_lm, prompts, single_token_forms(tok, "yes"), single_token_forms(tok, "no"))
    np.testing.assert_allclose(got, want, atol=1e-5)
    # no chat template: the plain preset; a different prompt is a different fingerprint
    plain = LlmTeacher(str(tiny_base_lm), precision="fp32")
    assert plain.template == PRESETS["plain"] and plain.fingerprint != teacher.fingerprint
    # Qwen3-Reranker's format reads the exact tokens "yes" and "no", after the empty thinking block
    qwen = LlmTeacher(str(tiny_base_lm), template=read_template("qwen3-reranker"), precision="fp32")
    prompt = (f"<bos><|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n<Instruct>: {INSTRUCTION}\n"
              f"<Query>: {QUERIES[0]}\n<Document>: {TEXTS[0]}<|im_end|>\n"
              "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    np.testing.assert_allclose(qwen.score_pairs(QUERIES[:1], TEXTS[:1]),
                               direct_scores(tiny_base_lm, [prompt], ["yes"], ["no"]), atol=1e-5)  # fmt: skip


@pytest.mark.parametrize("spec, options, message", [
    ("llm", {}, "the llm teacher needs a model: llm:PATH_OR_HUB_ID"),
    ("llm:/no/such/dir", {}, "llm teacher '/no/such/dir': no such model directory"),
    ("llm:/no/such/model.gguf", {}, "no such GGUF file"),
    ("llm:{model}", {"template": "/no/such/template"}, "neither a preset (qwen3-reranker, plain) nor a file"),
    ("llm:{model}", {"template": "{nodoc}"}, "the template lacks {document}"),
    ("llm:{model}", {"instruction": "  "}, "--teacher-instruction is empty"),
])  # fmt: skip
def test_bad_input_is_one_line(tiny_chat_lm, tmp_path, spec, options, message):
    nodoc = tmp_path / "nodoc.txt"
    nodoc.write_text("{query} only")
    options = {k: v.replace("{nodoc}", str(nodoc)) for k, v in options.items()}
    context = TeacherContext(precision="fp32", options=options)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        get_teacher(spec.format(model=tiny_chat_lm), context)
