"""Query encoding: padded chunks pool as Pyserini pools each text alone; bf16 as an option; threads that share."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from tour_pyserini.devices import native_bf16
from tour_pyserini.encoders.query import AUTO_PRECISION, QueryEncoder, padded_chunks, resolve_query_precision
from tour_pyserini.errors import UserError
from tour_pyserini.files import read_topics


def test_padded_chunks_sort_by_length_and_keep_ties_in_order():
    assert padded_chunks([3, 1, 2, 1, 5], 2) == [[1, 3], [2, 0], [4]]
    assert padded_chunks([], 4) == []


@pytest.fixture(scope="module")
def texts(mini_scifact) -> list[str]:
    texts = [t.text for t in read_topics(mini_scifact["topics"])]
    return texts + ["tumours", texts[0] + " in mice"]  # lengths far apart: chunks pad


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_padded_chunks_give_pyserinis_vectors_of_each_text_alone(searcher, texts, pooling):
    import torch

    pyserini = copy.copy(searcher.query_encoder.pyserini)
    pyserini.pooling = pooling  # Pyserini's auto class: mean, else the first token
    encoder = QueryEncoder(pyserini, searcher.encoder)
    encoder.chunk = 3
    lengths = [len(i) for i in pyserini.tokenizer(texts)["input_ids"]]
    assert any(len({lengths[r] for r in rows}) > 1 for rows in padded_chunks(lengths, 3))  # padding happens
    with torch.inference_mode():
        each = np.stack([pyserini.encode(t) for t in texts])
    together = encoder.encode(texts)
    np.testing.assert_allclose(together, each, rtol=0, atol=1e-6)
    assert np.array_equal(encoder.encode(texts[:1])[0], each[0])  # alone: Pyserini's own call, bit for bit
    if pooling == "cls":  # the first token is not the mean: the two poolings really differ
        assert np.abs(each - searcher.query_encoder.encode(texts)).max() > 1e-2


def test_auto_precision_is_float32_and_bad_values_fail_before_a_model_loads():
    assert AUTO_PRECISION == "fp32"
    assert resolve_query_precision(None) == resolve_query_precision("auto") == "fp32"
    with pytest.raises(UserError, match="--encoder-precision 'fp16'"):
        resolve_query_precision("fp16")
    if not native_bf16("cpu"):  # the AVX2 kernel set: bf16 refused in one line
        with pytest.raises(UserError, match="--encoder-precision bf16: torch has no native bfloat16"):
            resolve_query_precision("bf16")


@pytest.mark.skipif(not native_bf16("cpu"), reason="torch runs no native bfloat16 kernels here")
def test_bf16_vectors_stay_near_float32_and_rank_the_same_top(searcher, texts):
    fp32 = searcher.query_encoder.encode(texts)
    bf16 = QueryEncoder(searcher.query_encoder.pyserini, searcher.encoder, precision="bf16").encode(texts)
    difference = np.abs(bf16 - fp32).max()
    assert 0 < difference < 5e-3  # bfloat16 really ran, and moved the vectors only a little
    top = [searcher.search_vectors(v, 1)[0][0].docid for v in (fp32, bf16)]
    assert top[0] == top[1]


def test_the_search_flag_reaches_the_encoder_and_refuses_pre_encoded_queries(dense_index, mini_scifact, tmp_path):
    from tour_pyserini.commands.search import parser, search_spec
    from tour_pyserini.pipeline import plan

    common = ["--index", str(dense_index), "--topics", str(mini_scifact["topics"]), "--output", "x.trec"]
    spec = search_spec(parser().parse_args([*common, "--encoder-precision", "fp32"]))
    assert spec.encoder_precision == "fp32"
    plan(spec)
    encoded = tmp_path / "encoded"
    encoded.mkdir()
    (encoded / "embedding.pkl").write_bytes(b"")
    spec = search_spec(parser().parse_args([*common, "--encoded-queries", str(encoded), "--encoder-precision", "bf16"]))
    with pytest.raises(UserError, match="--encoded-queries replaces the query encoder"):
        plan(spec)


SHARE = (
    "import json, os; from tour_pyserini.commands.runner import run_cli; "
    "run_cli(lambda argv: print(json.dumps({k: os.environ.get(k) for k in "
    "('OMP_WAIT_POLICY', 'OMP_NUM_THREADS')})), [])"
)


def command_threads(env: dict) -> dict:
    """What a command (run_cli) leaves in its environment for torch and Faiss, beside a process spinning on a core."""
    import json

    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        out = subprocess.run([sys.executable, "-c", SHARE], env=env, capture_output=True, text=True, check=True)
    finally:
        spinner.kill()
        spinner.wait()
    return json.loads(out.stdout)


def clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    return {**env, **extra}


def test_a_command_beside_a_busy_core_sleeps_as_it_waits_and_keeps_its_thread_count():
    """The thread count changes the arithmetic, so the load may not choose it: only the wait policy changes."""
    assert command_threads(clean_env()) == {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": None}


def test_the_users_own_openmp_settings_are_left_alone():
    assert command_threads(clean_env(OMP_WAIT_POLICY="ACTIVE")) == {
        "OMP_WAIT_POLICY": "ACTIVE",
        "OMP_NUM_THREADS": None,
    }
    assert command_threads(clean_env(OMP_NUM_THREADS="2")) == {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "2"}
