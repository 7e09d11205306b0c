"""Pyserini's encoder classes through our glue, on tiny random-weight models built here from transformers
configs (no download): vectors equal to Pyserini's own query and document encoders', indexes that record
the class, searches with TOUR and Rocchio on top, and one line for each misuse."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from tour_pyserini._java import import_pyserini
from tour_pyserini.encoders import EncoderSettings, EncoderSpec, bundled_model_dir
from tour_pyserini.encoders.document import DocumentEncoder
from tour_pyserini.encoders.pyserini_compat import add_post_init
from tour_pyserini.encoders.query import QueryEncoder
from tour_pyserini.errors import UserError

TEXTS = [
    "what causes cells to divide",
    "0-dimensional biomaterials show inductive properties.",
    "what causes cells to grow",
    "a",
    "BRCA1 mutations raise the risk of breast cancer in women",
]
TITLES = ["Cell division", "", "Growth", "A", "BRCA1"]
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)


def _bert_tokenizer(out: Path) -> None:
    from transformers import AutoTokenizer

    AutoTokenizer.from_pretrained(bundled_model_dir()).save_pretrained(out)


def _bpe_files(out: Path) -> tuple[str, str]:
    """A byte-level BPE vocabulary learnt from SciFact abstracts (RoBERTa's and Qwen's tokenizer kind)."""
    from tokenizers import ByteLevelBPETokenizer

    root = Path(__file__).resolve().parents[1]
    with open(root / "collections" / "scifact" / "corpus.jsonl", encoding="utf-8") as f:
        lines = [next(f) for _ in range(300)]
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        lines, vocab_size=600, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>", "<|endoftext|>"]
    )
    out.mkdir(parents=True, exist_ok=True)
    bpe.save_model(str(out))
    return str(out / "vocab.json"), str(out / "merges.txt")


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """One directory per model family the classes map to, seeded random weights."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers import models as st
    from transformers import (
        BertConfig,
        BertModel,
        DPRConfig,
        DPRContextEncoder,
        DPRQuestionEncoder,
        Qwen2Tokenizer,
        Qwen3Config,
        Qwen3Model,
        RobertaConfig,
        RobertaTokenizer,
    )

    root = tmp_path_factory.mktemp("tiny-encoders")
    dirs = {name: root / name for name in ("bert", "dpr-q", "dpr-ctx", "roberta", "qwen", "pipeline")}
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=30522, **SMALL)).save_pretrained(dirs["bert"])
    _bert_tokenizer(dirs["bert"])
    for name, cls in (("dpr-q", DPRQuestionEncoder), ("dpr-ctx", DPRContextEncoder)):
        cls(DPRConfig(vocab_size=30522, **SMALL)).save_pretrained(dirs[name])
        _bert_tokenizer(dirs[name])
    vocab, merges = _bpe_files(root / "bpe")
    add_post_init()
    ance = import_pyserini("pyserini.encode").AnceEncoder
    model = ance(RobertaConfig(vocab_size=610, pad_token_id=1, max_position_embeddings=520, **SMALL))
    model.save_pretrained(dirs["roberta"])
    # Pyserini 2.x reads ANCE weights from pytorch_model.bin only, 1.6.0 from model.safetensors first: both, alike
    torch.save(model.state_dict(), dirs["roberta"] / "pytorch_model.bin")
    RobertaTokenizer(vocab, merges).save_pretrained(dirs["roberta"])
    qwen = Qwen3Config(
        vocab_size=610,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        intermediate_size=64,
        max_position_embeddings=512,
    )
    Qwen3Model(qwen).save_pretrained(dirs["qwen"])
    Qwen2Tokenizer(vocab, merges, pad_token="<|endoftext|>", eos_token="<|endoftext|>").save_pretrained(dirs["qwen"])
    pipeline = SentenceTransformer(
        modules=[
            st.Transformer(str(dirs["bert"]), max_seq_length=128),
            st.Pooling(32, "mean"),
            st.Dense(32, 16),
            st.Normalize(),
        ]
    )
    pipeline.save(str(dirs["pipeline"]))
    return dirs


# (our class, model, settings given, Pyserini's flags for the same search): every text class with a
# model this test can build; dkrr (its tokenizer is fixed to bert-base-uncased, a download), bpr (binary
# codes for a hashing index), aggretriever and cosdpr (their checkpoints' own heads) and openai-api (an API)
# are left out here
QUERY_CASES = [
    ("auto", "bert", EncoderSettings(encoder_class="auto"), dict(pooling="cls", l2_norm=False)),
    (
        "auto",
        "bert",
        EncoderSettings(encoder_class="auto", pooling="cls", l2_norm=True),
        dict(pooling="cls", l2_norm=True),
    ),
    (
        "auto",
        "bert",
        EncoderSettings(encoder_class="auto", pooling="mean", query_prefix="query:"),
        dict(pooling="mean", l2_norm=False, prefix="query:"),
    ),
    ("sentence", "bert", EncoderSettings(encoder_class="sentence"), {}),
    ("contriever", "bert", EncoderSettings(encoder_class="contriever"), {}),
    ("dpr", "dpr-q", EncoderSettings(encoder_class="dpr"), {}),
    ("tct_colbert", "bert", EncoderSettings(encoder_class="tct_colbert"), {}),
    ("ance", "roberta", EncoderSettings(encoder_class="ance"), {}),
    ("arctic", "bert", EncoderSettings(encoder_class="arctic"), {}),
    (
        "qwen3",
        "qwen",
        EncoderSettings(encoder_class="qwen3", l2_norm=True, query_prefix="Instruct: find\nQuery:"),
        dict(l2_norm=True, prefix="Instruct: find\nQuery:"),
    ),
]


def pyserini_query_encoder(model_dir: Path, encoder_class: str, flags: dict):
    """What ``python -m pyserini.search.faiss --encoder DIR --encoder-class CLASS ...`` builds."""
    init = import_pyserini("pyserini.search.faiss.__main__").init_query_encoder
    return init(
        str(model_dir),
        encoder_class,
        None,
        None,
        None,
        "cpu",
        256,
        flags.get("pooling", "cls"),
        flags.get("l2_norm", False),
        flags.get("prefix"),
    )


@pytest.mark.parametrize(
    "encoder_class, model, settings, flags", QUERY_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(QUERY_CASES)]
)
def test_query_vectors_are_pyserinis(models, encoder_class, model, settings, flags):
    spec = EncoderSpec.resolve(str(models[model]), settings=settings)
    ours = QueryEncoder.build(spec)
    theirs = pyserini_query_encoder(models[model], encoder_class, flags)
    assert type(ours.pyserini) is type(theirs)
    alone = np.stack([ours.encode([t])[0] for t in TEXTS])
    expected = np.stack([np.asarray(theirs.encode(t), dtype=np.float32).reshape(-1) for t in TEXTS])
    assert np.array_equal(alone, expected)  # one text per call: Pyserini's vectors bit for bit
    together = ours.encode(TEXTS)
    assert np.abs(together - expected).max() <= 1e-6  # batched where the class allows it
    assert ours.dimension == expected.shape[1]


# (class, model, settings, pyserini.encode's class name and flags)
DOCUMENT_CASES = [
    (
        "auto",
        "bert",
        EncoderSettings(encoder_class="auto", pooling="mean", l2_norm=True, doc_prefix="passage:"),
        "auto",
        dict(pooling="mean", l2_norm=True, prefix="passage:"),
    ),
    ("sentence", "bert", EncoderSettings(encoder_class="sentence-transformers"), "sentence-transformers", {}),
    ("contriever", "bert", EncoderSettings(encoder_class="contriever"), "contriever", {}),
    ("dpr", "dpr-ctx", EncoderSettings(encoder_class="dpr"), "dpr", {}),
    ("tct_colbert", "bert", EncoderSettings(encoder_class="tct_colbert"), "tct_colbert", {}),
    ("ance", "roberta", EncoderSettings(encoder_class="ance"), "ance", {}),
    ("arctic", "bert", EncoderSettings(encoder_class="arctic"), "arctic", {}),
    ("qwen3", "qwen", EncoderSettings(encoder_class="qwen3", l2_norm=True), "qwen3", dict(l2_norm=True)),
]


@pytest.mark.parametrize(
    "encoder_class, model, settings, pyserini_class, flags", DOCUMENT_CASES, ids=[c[0] for c in DOCUMENT_CASES]
)
def test_document_vectors_are_pyserini_encodes(models, encoder_class, model, settings, pyserini_class, flags):
    spec = EncoderSpec.resolve(str(models[model]), settings=settings, side="document")
    assert spec.encoder_class == encoder_class
    ours = DocumentEncoder(spec).encode(TEXTS, TITLES)
    init = import_pyserini("pyserini.encode.__main__").init_encoder
    theirs = init(
        str(models[model]),
        pyserini_class,
        "cpu",
        flags.get("pooling", "cls"),
        flags.get("l2_norm", False),
        flags.get("prefix"),
        False,
        False,
    )
    expected = theirs.encode(texts=TEXTS, titles=TITLES, max_length=spec.max_length, fp16=False, add_sep=False)
    assert np.abs(ours - np.asarray(expected, dtype=np.float32)).max() <= 1e-6


def test_documents_are_cut_where_pyserini_encode_cuts_them_by_default(models):
    """A DPR context encoder, which has no sentence-transformers config, reads a long document's first 256 tokens,
    as python -m pyserini.encode does without --max-length (its parser's default, read from its source)."""
    import inspect
    import re

    source = inspect.getsource(import_pyserini("pyserini.encode.__main__"))
    pyserini_default = int(re.search(r"'--max-length', type=int, help='max length', default=(\d+)", source).group(1))
    spec = EncoderSpec.resolve(str(models["dpr-ctx"]), settings=EncoderSettings(encoder_class="dpr"), side="document")
    assert spec.max_length == pyserini_default == 256
    long = [" ".join(["cells divide and grow"] * 120)]  # about 480 tokens
    ours = DocumentEncoder(spec).encode(long, [""])
    init = import_pyserini("pyserini.encode.__main__").init_encoder
    theirs = init(str(models["dpr-ctx"]), "dpr", "cpu", "cls", False, None, False, False)
    expected = theirs.encode(texts=long, titles=[""], max_length=pyserini_default, fp16=False, add_sep=False)
    assert np.abs(ours - np.asarray(expected, dtype=np.float32)).max() <= 1e-6
    longer = theirs.encode(texts=long, titles=[""], max_length=512, fp16=False, add_sep=False)
    assert np.abs(ours - np.asarray(longer, dtype=np.float32)).max() > 1e-4  # the cut is what makes them equal


def test_dpr_pairs_title_and_text_and_pipeline_is_sentence_transformers_own(models):
    """DPR's context encoder reads title and text as a pair; st-pipeline runs Dense layers after pooling."""
    from sentence_transformers import SentenceTransformer
    from transformers import AutoTokenizer

    dpr = DocumentEncoder(
        EncoderSpec.resolve(str(models["dpr-ctx"]), settings=EncoderSettings(encoder_class="dpr"), side="document")
    )
    tokenizer = AutoTokenizer.from_pretrained(models["dpr-ctx"])
    pair = tokenizer("Cell division", "what causes cells to divide")["input_ids"]
    assert pair.count(tokenizer.sep_token_id) == 2  # the pair the class encodes: [CLS] title [SEP] text [SEP]
    assert not np.allclose(dpr.encode(TEXTS[:1], TITLES[:1]), dpr.encode(TEXTS[:1], None))

    settings = EncoderSettings(encoder_class="st-pipeline", query_prefix="query: ")
    ours = QueryEncoder.build(EncoderSpec.resolve(str(models["pipeline"]), settings=settings)).encode(TEXTS)
    theirs = SentenceTransformer(str(models["pipeline"])).encode(TEXTS, prompt="query: ")
    assert ours.shape == (len(TEXTS), 16)  # the Dense layer's size, not the transformer's 32
    assert np.abs(ours - theirs).max() <= 1e-6


def test_bundled_minilm_through_its_pipeline_gives_todays_vectors():
    today = QueryEncoder.build(EncoderSpec.resolve()).encode(TEXTS)
    pipeline = QueryEncoder.build(EncoderSpec.resolve(settings=EncoderSettings(encoder_class="st-pipeline")))
    assert np.abs(pipeline.encode(TEXTS) - today).max() <= 1e-6


def test_an_ance_checkpoint_in_either_format_gives_the_same_vectors(models, tmp_path):
    """Pyserini 2.x loads ANCE from ``pytorch_model.bin`` only; a directory with safetensors weights alone is loaded
    as 1.6.0 loads it: the same weights, bit for bit, and so the same vectors on either host (within 1e-6: MKL's
    float32 products on some CPUs, an AMD EPYC here, change in the last bits with the operands' memory alignment,
    which differs between a mapped safetensors file and a ``torch.load``)."""
    encoders = []
    for kept in ("model.safetensors", "pytorch_model.bin"):
        copy = tmp_path / kept
        shutil.copytree(models["roberta"], copy)
        (copy / ({"model.safetensors", "pytorch_model.bin"} - {kept}).pop()).unlink()
        spec = EncoderSpec.resolve(str(copy), settings=EncoderSettings(encoder_class="ance"))
        encoders.append(QueryEncoder.build(spec))
    weights = [e.pyserini.model.state_dict() for e in encoders]
    assert weights[0].keys() == weights[1].keys()
    assert all(np.array_equal(weights[0][name].numpy(), weights[1][name].numpy()) for name in weights[0])
    first, second = (e.encode(TEXTS) for e in encoders)
    assert np.abs(first - second).max() <= 1e-6 and np.abs(first).sum() > 0


def test_class_inference_follows_pyserini():
    from tour_pyserini.encoders.classes import infer_class

    assert infer_class("facebook/dpr-question_encoder-multiset-base") == "dpr"
    assert infer_class("castorini/tct_colbert-v2-hnp-msmarco") == "tct_colbert"
    assert infer_class("castorini/ance-msmarco-passage") == "ance"
    assert infer_class("facebook/contriever-msmarco") == "contriever"
    assert infer_class("Qwen/Qwen3-Embedding-0.6B") == "qwen3"
    assert infer_class("sentence-transformers/all-MiniLM-L6-v2") == "sentence"
    assert infer_class("BAAI/bge-base-en-v1.5") == "auto"
    assert infer_class("castorini/cosdpr-distil") == "cosdpr"  # before dpr, in Pyserini's order


def _index(collection: Path, out: Path, *argv: str) -> dict:
    from tour_pyserini.commands import index

    index.main(["--collection", str(collection), "--output", str(out), "--no-prebuilt", "--batch-size", "32", *argv])
    return json.loads((out / "tour_pyserini.json").read_text())


def _search(*argv: str) -> None:
    from tour_pyserini.commands import search

    search.main(list(argv))


def _run_qids(path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in path.read_text().splitlines():
        qid = line.split()[0]
        counts[qid] = counts.get(qid, 0) + 1
    return counts


@pytest.mark.slow
def test_dpr_pair_index_and_search_with_tour_and_rocchio(models, mini_scifact, index_root, bm25_index, tmp_path):
    """An index built by DPR's context encoder records its class; searches name the question encoder and run
    TOUR (BM25 teacher) and Rocchio to complete runs; each misuse is one line."""
    dense = index_root / "mini.dpr"
    meta = _index(mini_scifact["collection"], dense, "--encoder", str(models["dpr-ctx"]), "--encoder-class", "dpr")
    assert (meta["encoder"]["encoder_class"], meta["encoder"]["pooling"], meta["dimension"]) == ("dpr", None, 32)
    topics = str(mini_scifact["topics"])
    n = len(mini_scifact["topics"].read_text().splitlines())
    base = ["--index", str(dense), "--topics", topics, "--encoder", str(models["dpr-q"]), "--hits", "50"]
    for name, extra in {
        "tour": ["--rewriter", "tour-hard", "--teacher", "bm25", "--depth", "10"],
        "rocchio": ["--rewriter", "rocchio", "--prf-depth", "5"],
    }.items():
        out = tmp_path / f"{name}.trec"
        _search(*base, *extra, "--output", str(out))
        counts = _run_qids(out)
        assert len(counts) == n and set(counts.values()) == {50}

    with pytest.raises(UserError, match="context encoder; its queries need the question encoder"):
        _search("--index", str(dense), "--topics", topics, "--output", str(tmp_path / "x.trec"))
    with pytest.raises(UserError, match="cannot search index .* Pyserini's dpr document encoder"):
        _search(*base, "--encoder-class", "ance", "--output", str(tmp_path / "x.trec"))
    with pytest.raises(UserError, match="dpr query encoder takes no prefix"):
        _search(*base, "--query-prefix", "question:", "--output", str(tmp_path / "x.trec"))
    assert not (tmp_path / "x.trec").exists()


# (model, index flags, what the index records): searched without --encoder, each takes its recorded class,
# pooling and prefixes back
FAMILIES = {
    "ance": ("roberta", ["--encoder-class", "ance"], {"encoder_class": "ance", "pooling": None}),
    "qwen3": (
        "qwen",
        [
            "--encoder-class",
            "qwen3",
            "--l2-norm",
            "--query-prefix",
            "Instruct: find\nQuery:",
            "--doc-prefix",
            "Passage: ",
        ],
        {
            "encoder_class": "qwen3",
            "pooling": "last",
            "l2_norm": True,
            "query_prefix": "Instruct: find\nQuery:",
            "doc_prefix": "Passage: ",
        },
    ),
    "st-pipeline": ("pipeline", ["--encoder-class", "st-pipeline"], {"encoder_class": "st-pipeline"}),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_each_family_indexes_records_itself_and_runs_tour(
    models, mini_scifact, index_root, bm25_index, tmp_path, family
):
    from tour_pyserini.index.query_side import query_encoder_spec

    model, flags, recorded = FAMILIES[family]
    dense = index_root / f"mini.{family}"
    meta = _index(mini_scifact["collection"], dense, "--encoder", str(models[model]), *flags)
    assert {key: meta["encoder"][key] for key in recorded} == recorded
    spec = query_encoder_spec(dense)  # the metadata round-trips into the query side
    assert {key: getattr(spec, key) for key in recorded} == recorded
    n = len(mini_scifact["topics"].read_text().splitlines())
    out = tmp_path / "tour.trec"
    _search(
        "--index",
        str(dense),
        "--topics",
        str(mini_scifact["topics"]),
        "--hits",
        "20",
        "--rewriter",
        "tour-hard",
        "--teacher",
        "bm25",
        "--depth",
        "10",
        "--output",
        str(out),
    )
    assert set(_run_qids(out).values()) == {20} and len(_run_qids(out)) == n


def test_bad_encoder_input_is_one_line(models, dense_index, mini_scifact, tmp_path, capsys):
    topics = str(mini_scifact["topics"])
    base = ["--index", str(dense_index), "--topics", topics, "--output", str(tmp_path / "x.trec")]
    for name, message in (
        ("colbert", "colbert': unknown encoder class; choose from dkrr, cosdpr, dpr"),
        ("clip", "clip: Pyserini's image and multimodal encoders are not supported"),
    ):
        with pytest.raises(SystemExit) as stop:
            _search(*base, "--encoder-class", name)
        err = capsys.readouterr().err
        assert stop.value.code == 2 and message in err and len(err.strip().splitlines()) == 1
    with pytest.raises(UserError, match="auto encoder pools only cls or mean"):
        _search(*base, "--encoder", str(models["bert"]), "--encoder-class", "auto", "--pooling", "last")
    with pytest.raises(UserError, match="makes 32-d vectors but index .* holds 384-d vectors"):
        _search(*base, "--encoder", str(models["bert"]), "--encoder-class", "auto")
    broken = tmp_path / "no-weights"
    broken.mkdir()
    (broken / "config.json").write_text((models["bert"] / "config.json").read_text())
    with pytest.raises(UserError, match="Pyserini's auto query encoder cannot load it"):
        _search(*base, "--encoder", str(broken), "--encoder-class", "auto")
    with pytest.raises(UserError, match="needs a download"):
        _search(*base, "--encoded-queries", "dpr_multi-nq-test")
    assert not (tmp_path / "x.trec").exists()

    # a prefix the index was not built for: a warning, on stderr as the command line shows it
    from tour_pyserini.commands import search
    from tour_pyserini.commands.runner import run_cli

    run_cli(search.main, [*base, "--query-prefix", "query:", "--hits", "5"])
    assert "warning: index" in (err := capsys.readouterr().err) and "was built for queries with no query prefix" in err


def test_encoded_queries_in_pyserinis_format(searcher, dense_index, mini_scifact, tmp_path):
    """Pre-encoded queries (embedding.pkl, Pyserini's format) give the run the encoder gives through torch (the
    searcher's); a topic whose text has no vector is one line."""
    import pandas as pd

    from tour_pyserini.files import read_topics

    topics = read_topics(mini_scifact["topics"])
    vectors = searcher.encode([t.text for t in topics])
    encoded = tmp_path / "encoded"
    encoded.mkdir()
    pd.DataFrame({"text": [t.text for t in topics], "embedding": list(vectors)}).to_pickle(encoded / "embedding.pkl")
    base = ["--index", str(dense_index), "--topics", str(mini_scifact["topics"]), "--hits", "20"]
    _search(*base, "--encoder-runtime", "torch", "--output", str(tmp_path / "model.trec"))
    _search(*base, "--encoded-queries", str(encoded), "--output", str(tmp_path / "encoded.trec"))
    assert (tmp_path / "model.trec").read_text() == (tmp_path / "encoded.trec").read_text()

    pd.DataFrame({"text": [t.text for t in topics[1:]], "embedding": list(vectors[1:])}).to_pickle(
        encoded / "embedding.pkl"
    )
    with pytest.raises(
        UserError,
        match=rf"1 of {len(topics)} topics have no usable vector: 1 missing \(first: topic "
        rf"{topics[0].qid}\)",
    ):
        _search(*base, "--encoded-queries", str(encoded), "--output", str(tmp_path / "missing.trec"))
    assert not (tmp_path / "missing.trec").exists()


def tiny_faiss_index(where: Path, dimension: int = 4) -> Path:
    """A real Faiss index of three unit vectors and its docids: all a search reads before its encoder loads."""
    import faiss

    where.mkdir()
    index = faiss.IndexFlatIP(dimension)
    index.add(np.eye(3, dimension, dtype=np.float32))
    faiss.write_index(index, str(where / "index"))
    (where / "docid").write_text("d1\nd2\nd3\n")
    return where


def _pickled(value) -> bytes:
    import pickle

    return pickle.dumps(value)


def _frame(**columns) -> bytes:
    import pandas as pd

    return _pickled(pd.DataFrame(columns))


QUERY_TEXTS = ["alpha", "beta", "gamma"]
GOOD_VECTORS = [np.full(4, 0.5, dtype=np.float32)] * 3
BAD_ENCODED = {  # case: (embedding.pkl's bytes, the error's words)
    "not-a-pickle": (b"this is not a pickle at all", "cannot be read as a pickled table (UnpicklingError"),
    "empty": (b"", "cannot be read as a pickled table (EOFError"),
    "truncated": (_frame(text=QUERY_TEXTS, embedding=GOOD_VECTORS)[:200], "cannot be read as a pickled table"),
    "a-dict": (_pickled(dict(zip(QUERY_TEXTS, GOOD_VECTORS))), "holds a dict, not a table (a pandas DataFrame"),
    "a-list": (_pickled(GOOD_VECTORS), "holds a list, not a table"),
    "no-text": (_frame(query=QUERY_TEXTS, embedding=GOOD_VECTORS), "has no column 'text'"),
    "no-embedding": (_frame(text=QUERY_TEXTS, vector=GOOD_VECTORS), "has no column 'embedding'"),
    "no-rows": (_frame(text=[], embedding=[]), "holds no queries"),
    "other-dimension": (_frame(text=QUERY_TEXTS, embedding=[np.ones(8)] * 3), "holds 8-d vectors; the index holds 4-d"),
    "strings": (_frame(text=QUERY_TEXTS, embedding=["0.5 0.5 0.5 0.5"] * 3), "holds no finite vector of numbers"),
    "bad-rows": (
        _frame(text=["alpha", "beta", "delta"], embedding=[np.array([np.nan, 0, 0, 0]), ["x"] * 4, GOOD_VECTORS[0]]),
        "3 of 3 topics have no usable vector: 1 not finite (first: topic 1); 1 not a vector of numbers "
        "(first: topic 2); 1 missing (first: topic 3)",
    ),
}


@pytest.mark.parametrize("case", list(BAD_ENCODED))
def test_pre_encoded_queries_are_checked_before_the_jvm_or_a_model_loads(case, tmp_path, monkeypatch):
    from tour_pyserini.commands import search

    def nothing_may_load(*args, **kwargs):
        raise AssertionError("the searcher (JVM, encoder) was opened before the pre-encoded queries were checked")

    monkeypatch.setattr(search, "batch_searcher", nothing_may_load)
    index = tiny_faiss_index(tmp_path / "index")
    (tmp_path / "topics.tsv").write_text("".join(f"{i}\t{t}\n" for i, t in enumerate(QUERY_TEXTS, 1)))
    (tmp_path / "encoded").mkdir()
    content, message = BAD_ENCODED[case]
    (tmp_path / "encoded" / "embedding.pkl").write_bytes(content)
    with pytest.raises(UserError, match=re.escape(message)):
        search.main(
            [
                "--index",
                str(index),
                "--topics",
                str(tmp_path / "topics.tsv"),
                "--output",
                str(tmp_path / "run.trec"),
                "--encoded-queries",
                str(tmp_path / "encoded"),
            ]
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["encoded", "index", "topics.tsv"]


def test_minilm_as_sentence_class_gives_todays_run(dense_index, mini_scifact, tmp_path):
    base = ["--index", str(dense_index), "--topics", str(mini_scifact["topics"]), "--hits", "100"]
    _search(*base, "--output", str(tmp_path / "today.trec"))
    _search(
        *base,
        "--encoder",
        "sentence-transformers/all-MiniLM-L6-v2",
        "--encoder-class",
        "sentence",
        "--output",
        str(tmp_path / "sentence.trec"),
    )
    assert (tmp_path / "today.trec").read_text() == (tmp_path / "sentence.trec").read_text()
