"""The cross-encoder teacher's precisions: bf16 scores and ranks as float32 does, and never mixes with it."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, SCIFACT
from scipy.stats import kendalltau

from tour_pyserini.devices import DEFAULT_PRECISION, native_bf16, resolve_precision
from tour_pyserini.errors import UserError
from tour_pyserini.files import read_qrels, read_topics
from tour_pyserini.index.corpus import read_jsonl_corpus
from tour_pyserini.teachers import TeacherContext, get_teacher
from tour_pyserini.teachers.cross_encoder import CrossEncoderTeacher, head_modules, pair_text

MODEL = ROOT / "models" / "scifact-rce"
# bf16 runs only where torch multiplies in bfloat16 natively (AVX512 kernels on a CPU with bf16 units)
needs_bf16 = pytest.mark.skipif(not native_bf16("cpu"), reason="torch has no native bfloat16 kernels here")


@pytest.fixture(scope="module")
def pairs(mini_scifact) -> list[tuple[str, list[str]]]:
    """Three judged SciFact test claims, each with its relevant abstracts and the same 8 others."""
    qrels = read_qrels(mini_scifact["qrels"])
    docs = {doc.docid: pair_text(doc) for doc in read_jsonl_corpus(mini_scifact["collection"] / "corpus.jsonl")}
    others = [d for d in docs if not any(d in judged for judged in qrels.values())][:8]
    return [(t.text, [docs[d] for d in [*qrels[t.qid], *others]]) for t in read_topics(mini_scifact["topics"])[:3]]


@pytest.fixture(scope="module")
def teachers(dense_index) -> dict[str, CrossEncoderTeacher]:
    """The shipped residual teacher at each precision through torch, on an index of its own bi-encoder."""
    precisions = ("fp32", "bf16") if native_bf16("cpu") else ("fp32",)
    context = {
        p: TeacherContext(index_dir=str(dense_index), precision=p, options={"runtime": "torch"}) for p in precisions
    }
    return {p: get_teacher(f"cross-encoder:{MODEL}", c) for p, c in context.items()}


@pytest.mark.slow
@needs_bf16
def test_bf16_scores_and_ranks_as_float32(teachers, pairs):
    """bf16 scores stay within 0.1 of float32's (they span about 5) and order each query's candidates alike."""
    exact, fast = ([t.score_pairs([q] * len(texts), texts) for q, texts in pairs] for t in teachers.values())
    for a, b in zip(exact, fast):
        assert np.abs(a - b).max() < 0.1
        assert kendalltau(a, b).statistic >= 0.95
        assert np.argmax(a) == np.argmax(b)
    assert not np.array_equal(np.concatenate(exact), np.concatenate(fast))  # bf16 did run in bfloat16


@pytest.mark.slow  # the shipped teacher at each precision loads in about 30 s
@needs_bf16
def test_bf16_runs_the_encoder_in_bfloat16_and_the_head_in_float32(teachers, pairs):
    """A score rounded to bfloat16 (8 significant bits) would tie candidates: the pooler and classifier
    compute in float32, every layer before them in bfloat16."""
    import torch

    teacher = teachers["bf16"]
    seen = {}

    def record(module, _, out):
        seen[module] = out.dtype

    heads = head_modules(teacher.model)
    assert len(heads) == 3  # BERT's dropout and classifier, and its pooler
    linears = [m for m in teacher.model.modules() if isinstance(m, torch.nn.Linear)]
    hooks = [module.register_forward_hook(record) for module in [*heads, *linears]]
    query, texts = pairs[0]
    teacher.score_pairs([query] * 2, texts[:2])
    for hook in hooks:
        hook.remove()
    assert {seen[m] for m in heads} == {torch.float32}
    encoder_linears = [m for m in linears if not any(m is h or m in set(h.modules()) for h in heads)]
    assert len(encoder_linears) == 36 and {seen[m] for m in encoder_linears} == {torch.bfloat16}


@pytest.mark.slow  # the shipped teacher at each precision loads in about 30 s
@needs_bf16
def test_fingerprint_names_the_precision(teachers):
    fp32, bf16 = (teachers[p].fingerprint for p in ("fp32", "bf16"))
    assert "precision bf16" in bf16 and bf16.replace(" precision bf16", "") == fp32
    assert "precision" not in fp32  # as before precisions existed: stores of float32 scores stay usable


def precision_in(kernels: str | None, code: str) -> subprocess.CompletedProcess:
    """``code`` run in a fresh process whose torch dispatches to ``kernels`` (None: the machine's best)."""
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env=env if kernels is None else {**env, "ATEN_CPU_CAPABILITY": kernels},
    )


AUTO = "from tour_pyserini.devices import resolve_precision; print(resolve_precision('auto', 'cpu'))"


@pytest.mark.slow
@pytest.mark.parametrize("kernels", ["avx2", "default"])
def test_auto_is_fp32_and_bf16_refused_where_torch_runs_no_bfloat16_kernels(kernels, dense_index, tmp_path):
    """On this very CPU, torch limited to a kernel set without bfloat16 (as on a CPU without AVX512):
    auto means fp32, and an explicit bf16 is one line and exit 2, before any model or the JVM loads."""
    assert precision_in(kernels, AUTO).stdout.strip() == "fp32"
    out = tmp_path / "run.trec"
    search = (
        "import sys; from tour_pyserini.commands.runner import run_cli; "
        "from tour_pyserini.commands.search import main; run_cli(main, sys.argv[1:])"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            search,
            "--index",
            str(dense_index),
            "--topics",
            str(SCIFACT / "topics.test.tsv"),
            "--output",
            str(out),
            "--teacher",
            f"cross-encoder:{MODEL}",
            "--rewriter",
            "rerank",
            "--teacher-precision",
            "bf16",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "ATEN_CPU_CAPABILITY": kernels},
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        f"error: --teacher-precision bf16: torch has no native bfloat16 arithmetic on this CPU "
        f"(torch runs its {kernels.upper()} kernels here); emulated it is slower than fp32 and some "
        "kernels fail: use fp32 or auto"
    ]
    assert not out.exists() and not out.with_name("run.trec.partial").exists()


def test_auto_is_bf16_where_torch_multiplies_in_bfloat16():
    """With the machine's best kernels: bf16 exactly where torch runs AVX512 kernels on bfloat16 units."""
    code = (
        "import torch; from tour_pyserini.devices import resolve_precision; "
        "print(torch.backends.cpu.get_cpu_capability(), "
        "torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported(), "
        "resolve_precision('auto', 'cpu'))"
    )
    kernels, units, auto = precision_in(None, code).stdout.split()
    assert DEFAULT_PRECISION == "auto"
    assert auto == ("bf16" if kernels == "AVX512" and units == "True" else "fp32")


def test_bad_precision_is_a_user_error_before_any_model_loads():
    with pytest.raises(UserError, match="precision 'fp16'"):
        CrossEncoderTeacher("/no/such/model", precision="fp16")  # the precision fails first
    with pytest.raises(UserError, match="fp32, bf16"):
        get_teacher(f"cross-encoder:{MODEL}", TeacherContext(precision="int4"))


def test_the_search_flag_reaches_the_teacher(capsys, dense_index):
    from tour_pyserini.commands.search import main, parser, search_spec
    from tour_pyserini.pipeline import build_teacher, plan

    common = [
        "--index",
        str(dense_index),
        "--topics",
        str(SCIFACT / "topics.test.tsv"),
        "--output",
        "x.trec",
        "--teacher",
        f"cross-encoder:{MODEL}",
    ]
    cases = [([], resolve_precision("auto", "cpu")), (["--teacher-precision", "fp32"], "fp32")]
    for flags, expected in cases + [(["--teacher-precision", "bf16"], "bf16")] * native_bf16("cpu"):
        spec = search_spec(parser().parse_args([*common, *flags]))
        assert build_teacher(plan(spec, asks_teacher=True)).precision == expected
    with pytest.raises(SystemExit) as exit_:
        main([*common, "--teacher-precision", "fp16"])
    assert exit_.value.code == 2 and "--teacher-precision: invalid choice" in capsys.readouterr().err


@pytest.mark.slow  # the shipped teacher at each precision loads in about 30 s
def test_a_residual_teachers_fingerprint_names_its_dense_index_by_content(teachers, dense_index):
    """Its scores add the index's similarities: a store filled on one index must not serve another index,
    even one in a folder of the same name."""
    teacher = teachers["fp32"]
    assert teacher.fingerprint.endswith(f" + 20.0 x {teacher.dense.fingerprint}")
    assert "dense index" in teacher.dense.fingerprint and dense_index.name not in teacher.dense.fingerprint
