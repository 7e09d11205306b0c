"""Teachers on real data: BM25 through Lucene, a real cross-encoder model, the oracle, fusion and the cache."""

from __future__ import annotations

import shutil
from collections.abc import Sequence

import numpy as np
import pytest

from tour_pyserini.encoders import bundled_model_dir
from tour_pyserini.errors import UserError
from tour_pyserini.files import read_qrels, read_topics
from tour_pyserini.index import DocStore
from tour_pyserini.results import Trace
from tour_pyserini.teachers import (
    ScoreCache,
    ScoreRequest,
    Teacher,
    TeacherContext,
    available_teachers,
    get_teacher,
    teacher_usages,
)
from tour_pyserini.teachers.cross_encoder import CrossEncoderTeacher
from tour_pyserini.teachers.oracle import OracleTeacher

pytestmark = pytest.mark.slow


def test_bm25_teacher_equals_lucene_searcher_scores(bm25_index, dense_index, mini_scifact):
    """The sibling BM25 index is found from the dense one, and scores equal LuceneSearcher's own BM25."""
    from tour_pyserini.search import Bm25Searcher

    teacher = get_teacher("bm25", TeacherContext(index_dir=str(dense_index)))
    assert teacher.index_dir == bm25_index
    topic = read_topics(mini_scifact["topics"])[0]
    hits = Bm25Searcher.from_index(bm25_index).retrieve([topic.text], [topic.qid], 10)[0].hits
    scores = teacher.score([ScoreRequest(topic.qid, topic.text, [h.docid for h in hits])])[0]
    assert np.allclose(scores, [h.score for h in hits], atol=1e-4)


def test_cross_encoder_scores_are_deterministic_and_batch_independent(cross_encoder_dir, dense_index):
    store = DocStore(dense_index / "docstore.sqlite")
    docids = (dense_index / "docid").read_text().split()[:12]
    request = ScoreRequest("q", "vitamin D and bone density", docids, store.get(docids))
    # in float32; bfloat16 matrix products round differently for different batch shapes
    a = CrossEncoderTeacher(cross_encoder_dir, batch_size=4, precision="fp32").score([request])[0]
    b = CrossEncoderTeacher(cross_encoder_dir, batch_size=32, precision="fp32").score([request])[0]
    assert a.shape == (12,) and np.isfinite(a).all() and np.ptp(a) > 0
    assert np.allclose(a, b, atol=1e-4)  # length-sorted batches: same scores, whatever the batch size
    short = CrossEncoderTeacher(cross_encoder_dir, max_length=16, precision="fp32").score([request])[0]
    assert not np.allclose(a, short)  # truncation to 16 tokens really truncates


def test_cross_encoder_refuses_a_model_without_a_classification_head(tmp_path):
    with pytest.raises(ValueError, match="not a sequence-classification model"):
        get_teacher(f"cross-encoder:{bundled_model_dir()}")
    with pytest.raises(ValueError, match="not a HuggingFace model directory"):
        get_teacher(f"cross-encoder:{tmp_path}")


def test_a_cross_encoder_directory_without_weights_is_one_line_before_loading(cross_encoder_dir, tmp_path):
    """A config and a tokenizer but no weights passed every check, and transformers' OSError was the traceback."""
    bare = tmp_path / "bare"
    shutil.copytree(cross_encoder_dir, bare, ignore=shutil.ignore_patterns("model.safetensors", "pytorch_model.bin"))
    with pytest.raises(
        UserError,
        match=rf"^cross-encoder '{bare}' has a config but no weights \(none of "
        r"model.safetensors, .*pytorch_model.bin",
    ):
        get_teacher(f"cross-encoder:{bare}")


def test_unknown_teacher_specs():
    with pytest.raises(ValueError, match="unknown teacher 'colbert'"):
        get_teacher("colbert")
    with pytest.raises(ValueError, match="needs qrels"):
        get_teacher("oracle")


def test_every_registered_teacher_is_listed_with_how_its_spec_is_written():
    """The CLI's help is built from the registry: a new teacher appears there with its own usage."""
    listed = teacher_usages().split(", ")
    assert len(listed) == len(available_teachers()) >= 7
    for usage, kind in zip(listed, sorted(available_teachers())):
        assert usage == kind or usage.startswith((f"{kind}:", f"{kind}["))
    assert "ensemble:FILE" in listed and "cross-encoder:PATH" in listed


def test_oracle_and_cache_counting(mini_scifact):
    qrels = read_qrels(mini_scifact["qrels"])
    qid, judged = next(iter(qrels.items()))
    relevant = next(iter(judged))
    teacher = get_teacher(f"oracle:{mini_scifact['qrels']}")
    assert teacher.oracle and teacher.label == "oracle"
    cache = ScoreCache(teacher)
    trace = Trace()
    first = cache.score([qid], ["q"], [[relevant, "unjudged"]], [trace])[0]
    assert first.tolist() == [10.0 * judged[relevant], 0.0]
    cache.score([qid], ["q"], [["unjudged", "other", relevant]], [trace])
    assert (trace.teacher_calls, trace.cache_hits) == (3, 2)  # each candidate scored once per query

    uncached, trace2 = ScoreCache(teacher, enabled=False), Trace()
    uncached.score([qid], ["q"], [[relevant, "unjudged"]], [trace2])
    again = uncached.score([qid], ["q"], [[relevant, "unjudged"]], [trace2])[0]
    assert (trace2.teacher_calls, trace2.cache_hits) == (4, 0) and again.tolist() == first.tolist()


class _FixedTeacher(Teacher):
    """Gives every pair one fixed score: NaN (no score, as an API may answer) or an infinity (a broken teacher)."""

    needs_text = False
    label = "fixed"

    def __init__(self, value: float):
        self.value = value

    @classmethod
    def from_spec(cls, argument, context):
        return cls(float(argument))

    def score(self, requests: Sequence[ScoreRequest]) -> list[np.ndarray]:
        return [np.full(len(r.docids), self.value) for r in requests]


def test_infinite_teacher_scores_are_an_error_and_nan_is_no_score():
    with pytest.raises(ValueError, match="infinite"):
        ScoreCache(_FixedTeacher(np.inf)).score(["q"], ["text"], [["d1"]], [Trace()])
    trace = Trace()
    scores = ScoreCache(_FixedTeacher(np.nan)).score(["q"], ["text"], [["d1", "d2"]], [trace])
    assert np.isnan(scores[0]).all() and (trace.teacher_calls, trace.unscored, trace.judgments) == (2, 2, {})


def test_fusion_standardises_with_the_first_lists_statistics(mini_scifact, bm25_index):
    qrels = read_qrels(mini_scifact["qrels"])
    qid, judged = next(iter(qrels.items()))
    fusion = get_teacher(f"fusion:oracle:{mini_scifact['qrels']}+bm25:{bm25_index}")
    assert fusion.oracle and "oracle" in fusion.label
    docids = [next(iter(judged)), *(bm25_index.parent / "mini.minilm" / "docid").read_text().split()[:4]]
    memo: dict = {}  # what the per-search score cache keeps for this query
    both = fusion.score([ScoreRequest(qid, "cancer cells", docids, memo=memo)])[0]
    later = fusion.score([ScoreRequest(qid, "cancer cells", docids[:2], memo=memo)])[0]
    assert np.allclose(both[:2], later)  # the same candidate keeps its fused score in a later call
    fresh = fusion.score([ScoreRequest(qid, "cancer cells", docids[:2])])[0]
    assert not np.allclose(fresh, later)  # a new search starts from its own statistics
    assert isinstance(fusion.parts[0], OracleTeacher)


def test_fusion_keeps_no_state_between_searches(searcher, mini_scifact, bm25_index, cross_encoder_dir):
    """Two different queries through ``searcher.search`` (same default qid) score exactly as each does alone."""
    from tour_pyserini.rewriters.rerank import Rerank

    spec = f"fusion:bm25:{bm25_index}+cross-encoder:{cross_encoder_dir}"
    first, second = (t.text for t in read_topics(mini_scifact["topics"])[:2])
    shared = Rerank(get_teacher(spec), depth=10)
    searcher.retrieve([first], ["q"], 10, rewriter=shared)
    after_another = searcher.retrieve([second], ["q"], 10, rewriter=shared)[0].hits
    alone = searcher.retrieve([second], ["q"], 10, rewriter=Rerank(get_teacher(spec), depth=10))[0].hits
    assert [(h.docid, h.score) for h in after_another] == [(h.docid, h.score) for h in alone]


def test_cross_encoder_max_length_from_the_spec_context(cross_encoder_dir):
    teacher = get_teacher(f"cross-encoder:{cross_encoder_dir}", TeacherContext(max_length=64))
    assert teacher.max_length == 64
    assert get_teacher(f"cross-encoder:{cross_encoder_dir}").max_length == 512


def test_trainer_and_teacher_build_the_same_inputs_and_long_queries_fit(cross_encoder_dir, dense_index, mini_scifact):
    """One function builds cross-encoder inputs; a short query is never cut, a very long one leaves room."""
    from transformers import AutoTokenizer

    from tour_pyserini.teachers.cross_encoder import pair_inputs, pair_text

    tokenizer = AutoTokenizer.from_pretrained(str(cross_encoder_dir))
    store = DocStore(dense_index / "docstore.sqlite")
    docids = (dense_index / "docid").read_text().split()[:8]
    texts = [pair_text(d) for d in store.get(docids)]
    queries = [t.text for t in read_topics(mini_scifact["topics"])[:8]]
    ours = pair_inputs(tokenizer, queries, texts, 128)
    only_document_cut = tokenizer(
        queries, texts, truncation="only_second", max_length=128, padding=True, return_tensors="pt"
    )
    assert ours["input_ids"].tolist() == only_document_cut["input_ids"].tolist()
    long_query = " ".join(["information need about aerodynamic heating of slender bodies"] * 40)  # ~320 tokens
    teacher = CrossEncoderTeacher(cross_encoder_dir, max_length=128)
    scores = teacher.score_pairs([long_query] * 2, texts[:2])
    assert np.isfinite(scores).all() and scores[0] != scores[1]  # the documents still count


class _CountingTeacher(OracleTeacher):
    """The oracle teacher, counting the pairs it is really asked to score."""

    def __init__(self, qrels):
        super().__init__(qrels)
        self.pairs = 0

    def score(self, requests):
        self.pairs += sum(len(r.docids) for r in requests)
        return super().score(requests)


def test_score_store_is_a_persistent_layer_of_the_cache(mini_scifact, tmp_path, bm25_index):
    from tour_pyserini.errors import UserError
    from tour_pyserini.teachers import ScoreStore

    teacher = _CountingTeacher(read_qrels(mini_scifact["qrels"]))
    qid, judged = next(iter(teacher.qrels.items()))
    docids = [[*judged, "d1", "d2"]]
    store = ScoreStore(tmp_path / "scores.sqlite", teacher.label)
    first = ScoreCache(teacher, store=store).score([qid], ["text"], docids, [Trace()])
    trace = Trace()
    second = ScoreCache(teacher, store=store).score([qid], ["text"], docids, [trace])  # a new search
    assert np.array_equal(first[0], second[0]) and teacher.pairs == len(docids[0])  # scored once
    assert trace.teacher_calls == len(docids[0])  # the budget counts the pair all the same
    with pytest.raises(UserError, match="holds scores of teacher 'oracle', not 'bm25'"):
        ScoreStore(tmp_path / "scores.sqlite", "bm25")
    fusion = get_teacher(f"fusion:oracle:{mini_scifact['qrels']}+bm25:{bm25_index}")
    with pytest.raises(ValueError, match="cannot be stored"):
        ScoreCache(fusion, store=ScoreStore(tmp_path / "fusion.sqlite", fusion.label))


def test_dense_teacher_scores_are_the_retrievers_similarities(searcher, dense_index, bm25_index, mini_scifact):
    """dense: the retriever as a teacher; fused with BM25 it is a real teacher with two views of relevance."""
    topics = read_topics(mini_scifact["topics"])[:3]
    teacher = get_teacher("dense", TeacherContext(index_dir=str(dense_index)))
    for result in searcher.retrieve([t.text for t in topics], [t.qid for t in topics], 10):
        topic = next(t for t in topics if t.qid == result.qid)
        scores = teacher.score([ScoreRequest(topic.qid, topic.text, [h.docid for h in result.hits])])[0]
        assert np.allclose(scores, [h.score for h in result.hits], atol=1e-5)
    fusion = get_teacher("fusion:bm25+dense", TeacherContext(index_dir=str(dense_index)))
    assert fusion.label == f"fusion(bm25+dense:{dense_index.name})" and fusion.pairwise is False


def test_two_logit_models_score_the_log_odds():
    """l1 - l0: invariant to a shift of both logits (the model's probabilities do not change)."""
    import torch

    from tour_pyserini.teachers.cross_encoder import logits_to_scores

    two = torch.tensor([[0.5, 2.0], [3.0, 1.0]])
    assert logits_to_scores(two).tolist() == [1.5, -2.0]
    assert logits_to_scores(two + 7.0).tolist() == [1.5, -2.0]
    assert logits_to_scores(torch.tensor([[0.25], [-1.0]])).tolist() == [0.25, -1.0]


def test_a_fingerprint_names_everything_the_scores_depend_on(dense_index, bm25_index, mini_scifact, tmp_path):
    """What a score store checks: the index by content (a copy has the same one), the encoder, the qrels."""
    import json
    import shutil

    from tour_pyserini.teachers.ensemble import EnsembleTeacher
    from tour_pyserini.teachers.fusion import FusionTeacher

    bm25 = get_teacher(f"bm25:{bm25_index}")
    copy = shutil.copytree(bm25_index, tmp_path / "copy.bm25")
    assert bm25.fingerprint.startswith("bm25 k1 0.9 b 0.4 index ")
    assert get_teacher(f"bm25:{copy}").fingerprint == bm25.fingerprint
    meta = json.loads((copy / "tour_pyserini.json").read_text())
    (copy / "tour_pyserini.json").write_text(json.dumps({**meta, "corpus": {**meta["corpus"], "sha256": "0" * 64}}))
    assert get_teacher(f"bm25:{copy}").fingerprint != bm25.fingerprint  # the same files of another corpus

    dense = get_teacher(f"dense:{dense_index}")
    weights = json.loads((dense_index / "tour_pyserini.json").read_text())["encoder"]["weights_sha256"]
    assert dense.fingerprint.startswith("dense index ") and f"weights {weights[:16]}" in dense.fingerprint
    assert dense.fingerprint.split()[2] != bm25.fingerprint.split()[-1]  # the two indexes differ

    qrels = read_qrels(mini_scifact["qrels"])
    oracle, same = OracleTeacher(qrels), OracleTeacher({q: dict(d) for q, d in qrels.items()})
    fewer = OracleTeacher(dict(list(qrels.items())[1:]))
    assert oracle.fingerprint == same.fingerprint != fewer.fingerprint

    assert (
        EnsembleTeacher([bm25, oracle], [1, 2]).fingerprint
        == f"ensemble(1.0*{bm25.fingerprint}+2.0*{oracle.fingerprint})"
    )
    assert FusionTeacher([bm25, dense]).fingerprint == f"fusion({bm25.fingerprint}+{dense.fingerprint})"


def test_teachers_sharing_one_set_of_flags_each_take_the_ones_they_read():
    from tour_pyserini.teachers import check_shared_teacher_options, options_for

    options = {"runtime": "openvino"}
    check_shared_teacher_options(["bm25", "cross-encoder:some/model"], options)  # the cross-encoder reads it
    assert options_for("cross-encoder:some/model", options) == options and options_for("bm25", options) == {}
    with pytest.raises(UserError, match="--teacher-runtime: not an option of any of the teachers"):
        check_shared_teacher_options(["bm25", "dense"], options)
    with pytest.raises(UserError, match="not an option of the bm25 teacher"):
        check_shared_teacher_options(["bm25"], options)


def test_a_teacher_spec_is_split_in_one_place():
    from tour_pyserini.teachers import TeacherSpec

    assert TeacherSpec.parse("cross-encoder:models/x") == TeacherSpec("cross-encoder", "models/x")
    assert TeacherSpec.parse("openai:http://127.0.0.1:8000/v1").argument == "http://127.0.0.1:8000/v1"  # one split
    assert TeacherSpec.parse("bm25") == TeacherSpec("bm25") and str(TeacherSpec("bm25")) == "bm25"
    assert str(TeacherSpec.parse("ensemble:a/e.json").with_argument("b/e.json")) == "ensemble:b/e.json"
    with pytest.raises(UserError, match="unknown teacher 'nope:x'; choose one of: .*bm25"):
        TeacherSpec.parse("nope:x").teacher_class()
