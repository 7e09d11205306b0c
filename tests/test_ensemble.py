"""The ensemble teacher (weighted raw scores of other teachers) and the fit of its weights."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tour_pyserini.errors import UserError
from tour_pyserini.files import read_topics
from tour_pyserini.teachers import ScoreRequest, TeacherContext, get_teacher
from tour_pyserini.teachers.ensemble import read_ensemble, resolve_part, write_ensemble
from tour_pyserini.training.ensemble_fit import ensemble_loss, fit_weights


def requests(dense_index, mini_scifact, n=3):
    from tour_pyserini.index import DocStore

    docids = (dense_index / "docid").read_text().split()[:12]
    docs = DocStore(dense_index / "docstore.sqlite").get(docids)
    return [ScoreRequest(t.qid, t.text, docids, docs) for t in read_topics(mini_scifact["topics"])[:n]]


def test_ensemble_is_the_weighted_sum_of_its_parts(dense_index, bm25_index, mini_scifact, tmp_path):
    context = TeacherContext(index_dir=str(dense_index))
    path = tmp_path / "ensemble.json"
    write_ensemble(path, [("bm25", 0.25), ("dense", 12.0)], {"note": "test"})
    ensemble = get_teacher(f"ensemble:{path}", context)
    assert ensemble.pairwise and not ensemble.needs_text
    reqs = requests(dense_index, mini_scifact)
    bm25, dense = (get_teacher(s, context).score(reqs) for s in ("bm25", "dense"))
    for got, b, d in zip(ensemble.score(reqs), bm25, dense):
        np.testing.assert_allclose(got, 0.25 * b + 12.0 * d, rtol=1e-12)
    assert "0.25" in ensemble.fingerprint and "12.0" in ensemble.fingerprint


def test_part_paths_are_read_beside_the_file(tmp_path):
    (tmp_path / "model").mkdir()
    assert resolve_part("cross-encoder:model", tmp_path) == f"cross-encoder:{tmp_path / 'model'}"
    assert resolve_part("cross-encoder:.", tmp_path) == f"cross-encoder:{tmp_path / '.'}"
    assert resolve_part("bm25", tmp_path) == "bm25"
    assert resolve_part("cross-encoder:org/hub-model", tmp_path) == "cross-encoder:org/hub-model"


@pytest.mark.parametrize(
    "content, message",
    [
        ("{", "not JSON"),
        ('{"parts": []}', "needs"),
        ('{"parts": [{"teacher": "bm25", "weight": "x"}]}', "finite"),
        ('{"parts": [{"teacher": "bm25", "weight": true}]}', "finite"),
        ('{"parts": [{"teacher": "bm25", "weight": 0}, {"teacher": "dense", "weight": 0.0}]}', "every weight is 0"),
    ],
)
def test_bad_ensemble_files_are_one_line_errors(tmp_path, content, message):
    path = tmp_path / "e.json"
    path.write_text(content)
    with pytest.raises(UserError, match=message):
        read_ensemble(path)
    with pytest.raises(UserError, match="no such file"):
        read_ensemble(tmp_path / "missing.json")


def test_fit_puts_weight_on_the_informative_teacher():
    """Relevance follows feature 1 (with noise); feature 0 is noise: the fit must prefer feature 1."""
    rng = np.random.default_rng(0)
    features, relevant = [], []
    for _ in range(60):
        f = rng.standard_normal((20, 2))
        rel = np.zeros(20, dtype=bool)
        rel[np.argmax(f[:, 1] + 0.3 * rng.standard_normal(20))] = True
        features.append(f)
        relevant.append(rel)
    features.append(rng.standard_normal((5, 2)))  # a query without a relevant candidate is ignored
    relevant.append(np.zeros(5, dtype=bool))
    w = fit_weights(features, relevant, l2=1e-4, init=[1.0, 0.0])
    assert w[1] > 2.0 and abs(w[0]) < 0.5 * w[1]
    import torch

    def loss(v):
        return float(ensemble_loss(torch.tensor(v, dtype=torch.float64), features[:-1], relevant[:-1], 1e-4))

    assert loss(w) < loss([1.0, 0.0]) and loss(w) <= loss(w * 1.1) and loss(w) <= loss(w * 0.9)


def test_fit_ensemble_cli_writes_a_loadable_teacher(
    dense_index, bm25_index, mini_scifact, tmp_path, capsys, encoder_loads
):
    from tour_pyserini.commands.fit_ensemble import main

    out, subset = tmp_path / "ens.json", tmp_path / "topics.tsv"
    topics = read_topics(mini_scifact["topics"])[:20]  # the qrels judge more queries than are fitted on
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
            "bm25",
            "--depth",
            "20",
            "--output",
            str(out),
        ]
    )
    assert len(encoder_loads) == 1  # the dense teacher shares the searcher's encoder
    record = json.loads(out.read_text())
    assert [p["teacher"] for p in record["parts"]] == ["dense", "bm25"]
    assert record["fitted_on"]["queries"] == len(topics)
    # "dense alone" is the retriever's own top-20 ranking, scored over the fit queries only
    from tour_pyserini.eval import evaluate
    from tour_pyserini.files import read_qrels
    from tour_pyserini.search import TourSearcher

    ranked = TourSearcher.from_index(dense_index).batch_search([t.text for t in topics], [t.qid for t in topics], 20)
    qrels = read_qrels(mini_scifact["qrels"])
    base = evaluate(
        {t.qid: qrels[t.qid] for t in topics},
        {q: {h.docid: h.score for h in hits} for q, hits in ranked.items()},
        ["nDCG@10"],
    ).means["nDCG@10"]
    assert record["fitted_on"]["alone"]["dense"] == pytest.approx(base, abs=1e-9)
    assert "ensemble" in capsys.readouterr().out
    teacher = get_teacher(f"ensemble:{out}", TeacherContext(index_dir=str(dense_index)))
    assert teacher.weights == [p["weight"] for p in record["parts"]]


def test_fit_ensemble_cli_refuses_bad_input_before_loading(tmp_path):
    from tour_pyserini.commands.fit_ensemble import main

    with pytest.raises(UserError, match="at least two"):
        main(["--index", "x", "--topics", "t", "--teachers", "bm25", "--output", str(tmp_path / "e.json")])
    (tmp_path / "a-file").write_text("")
    with pytest.raises(UserError, match="a-file is a file, not a directory"):
        main(
            [
                "--index",
                "x",
                "--topics",
                "t",
                "--teachers",
                "bm25",
                "dense",
                "--output",
                str(tmp_path / "a-file/e.json"),
            ]
        )


def test_a_stored_part_is_scored_once_across_searches(dense_index, bm25_index, mini_scifact, tmp_path):
    from tour_pyserini.teachers import ScoreStore, StoredTeacher
    from tour_pyserini.teachers.ensemble import EnsembleTeacher

    context = TeacherContext(index_dir=str(dense_index))
    bm25 = get_teacher("bm25", context)
    store = ScoreStore(tmp_path / "bm25.sqlite", bm25.fingerprint)
    request = requests(dense_index, mini_scifact, n=1)[0]
    store.put(request.query, {request.docids[0]: 123.0})  # a stored score is read, not recomputed
    ensemble = EnsembleTeacher([StoredTeacher(bm25, store), get_teacher("dense", context)], [2.0, 0.0])
    got = ensemble.score([request])[0]
    expected = bm25.score([request])[0]
    assert got[0] == 246.0 and np.allclose(got[1:], 2.0 * expected[1:])
    kept = store.get(request.query, request.docids)
    assert np.allclose([kept[d] for d in request.docids[1:]], expected[1:])  # the new ones were kept


def test_relevant_documents_outside_the_candidates_are_one_line_before_any_teacher_loads(
    dense_index, mini_scifact, tmp_path
):
    from tour_pyserini.errors import UserError
    from tour_pyserini.training.ensemble_fit import fit_ensemble

    topics = read_topics(mini_scifact["topics"])[:3]
    qrels = {t.qid: {"not-in-the-index": 1} for t in topics}  # judged, but never among the candidates
    with pytest.raises(UserError, match=r"no query of t.tsv has a relevant document \(qrels\) in its dense top 5"):
        fit_ensemble(
            dense_index,
            topics,
            qrels,
            ["cross-encoder:/no/such/model", "bm25"],
            tmp_path / "e.json",
            depth=5,
            topics_name="t.tsv",
        )
    assert not list(tmp_path.iterdir())


def test_ensemble_files_naming_themselves_or_a_directory_are_one_line(tmp_path):
    (tmp_path / "self.json").write_text(json.dumps({"parts": [{"teacher": "ensemble:self.json", "weight": 1}]}))
    (tmp_path / "a.json").write_text(json.dumps({"parts": [{"teacher": "ensemble:b.json", "weight": 1}]}))
    (tmp_path / "b.json").write_text(
        json.dumps({"parts": [{"teacher": "bm25", "weight": 0.5}, {"teacher": "ensemble:a.json", "weight": 1}]})
    )
    with pytest.raises(UserError, match=r"self.json names itself through its parts: .*self.json -> .*self.json$"):
        get_teacher(f"ensemble:{tmp_path / 'self.json'}")
    with pytest.raises(UserError, match=r"a.json names itself through its parts: .*a.json -> .*b.json -> .*a.json$"):
        get_teacher(f"ensemble:{tmp_path / 'a.json'}")
    with pytest.raises(UserError, match="is a directory; name the JSON file in it"):
        get_teacher(f"ensemble:{tmp_path}")


def test_a_teacher_flag_no_part_reads_is_one_line(tmp_path):
    from tour_pyserini.teachers import check_teacher_options

    path = tmp_path / "e.json"
    path.write_text(json.dumps({"parts": [{"teacher": "bm25", "weight": 1}, {"teacher": "dense", "weight": 1}]}))
    for spec in (f"ensemble:{path}", "fusion:bm25+dense"):
        with pytest.raises(UserError, match="--teacher-instruction: not an option of the"):
            check_teacher_options(spec, {"instruction": "Find claims"})
    path.write_text(json.dumps({"parts": [{"teacher": "llm:model", "weight": 1}, {"teacher": "bm25", "weight": 1}]}))
    check_teacher_options(f"ensemble:{path}", {"instruction": "Find claims"})  # its llm part reads it
    check_teacher_options("fusion:bm25+openai:http://127.0.0.1:9/v1", {"model": "m"})
