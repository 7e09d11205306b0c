"""The transfer protocol: no query is moved by a state fitted on its own rewards, the folds cover every query once,
and the report's rows are Holm-corrected over their table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tour_pyserini.errors import UserError
from tour_pyserini.experiments.transfer import rewarded_rows

TRANSFER = """name: carry
title: Does it carry over?
folds: 4
judged: 5
collections:
  mini: {metric: nDCG@10}
  twin: {metric: nDCG@10}
teachers:
  oracle: oracle
  bm25: bm25
tables:
  main: {scopes: [task, neighbours], rules: [count], shares: [0.75]}
  held: {scopes: [global], rules: [count, cv], held_out: true, teachers: [oracle]}
expect:
  held oracle global cv 1: {mini: 0.0}
"""


@pytest.fixture
def lab(tmp_path, monkeypatch, mini_scifact, dense_index, bm25_index) -> Path:
    """Collections ``mini`` and ``twin`` (the same files, indexes and judgments under two names) and ``carry``."""
    for name in ("mini", "twin"):
        mine = tmp_path / "collections" / name
        mine.mkdir(parents=True)
        for file in ("corpus.jsonl", "topics.tsv", "qrels.txt"):
            (mine / file).symlink_to(mini_scifact["collection"] / file)
        (mine / "collection.yaml").write_text(
            f"name: {name}\ncorpus: corpus.jsonl\njudged_by: qrels\nmetrics: [nDCG@10]\n"
            "splits:\n  test: {topics: topics.tsv, qrels: qrels.txt}\n"
        )
        (tmp_path / "indexes").mkdir(exist_ok=True)
        (tmp_path / "indexes" / f"{name}.minilm").symlink_to(dense_index)
        (tmp_path / "indexes" / f"{name}.bm25").symlink_to(bm25_index)
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "carry.yaml").write_text(TRANSFER)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_rewarded_rows_are_never_the_held_out_folds_and_grow_by_nesting():
    fold = np.arange(50) % 5
    for held in range(5):
        smaller, larger = rewarded_rows(fold, held, 0.2, seed=7), rewarded_rows(fold, held, 0.6, seed=7)
        assert not set(larger) & set(np.flatnonzero(fold == held)) and set(smaller) < set(larger)
        assert (len(smaller), len(larger)) == (10, 30)
    assert len(rewarded_rows(fold, 0, 1.0, seed=7)) == 40  # every row of the other folds, no more


@pytest.mark.parametrize(
    "change, message",
    [
        (("folds: 4", "folds: 1"), "folds: a whole number of at least 2 was expected, got 1"),
        (("shares: [0.75]", "shares: [1.5]"), "shares are in (0, 1], got 1.5"),
        (("scopes: [global]", "scopes: [task]"), "table 'held': scopes: a list of some of global"),
        (("rules: [count]", "rules: [sum]"), "rules: a list of some of count, cv"),
        (("held_out: true,", "held_out: true, shares: [0.5],"), "fitted on all the others' queries: no shares"),
        (("bm25: bm25", "bm25: {mini: bm25}"), "teacher 'bm25': one spec, or a spec for each of mini, twin"),
        (("{metric: nDCG@10}", "{metric: P@5}"), "metric 'P@5' is not one it scores (nDCG@10)"),
        (("held oracle global cv 1", "held bm25 global cv 1"), "expect 'held bm25 global cv 1': no such row"),
        (("twin: {metric: nDCG@10}", "twin: {encoder: 3}"), "collection 'twin': encoder names a directory or an"),
        (("twin: {metric: nDCG@10}", "twin: {base: twin}"), "collection 'twin': base 'twin' is not another of its"),
        (("twin: {metric: nDCG@10}", "twin: {seed: 1}"), "a mapping of base, collection, encoder, metric was"),
        (("shares: [0.75]}", "shares: [0.75], collections: [nope]}"), "collections: a list of some of mini, twin"),
        (("teachers: [oracle]}", "teachers: [oracle], collections: [mini]}"), "held-out table needs two collections"),
    ],
)
def test_a_wrong_transfer_file_is_one_line_naming_it(lab, change, message):
    from tour_pyserini.files.experiments import find_experiment

    path = lab / "experiments" / "carry.yaml"
    path.write_text(TRANSFER.replace(*change, 1))
    with pytest.raises(UserError) as e:
        find_experiment("carry")
    assert message in str(e.value) and str(e.value).startswith(str(Path("experiments/carry.yaml")))


def test_no_query_is_moved_by_its_own_rewards(lab):
    """Rewards of the queries a fold holds out change nothing of that fold's rows; a held-out collection's own
    rewards change nothing of its rows. Every query of every collection is unseen exactly once."""
    from tour_pyserini.experiments.transfer import TransferTask, fold_of, run_variant
    from tour_pyserini.files.experiments import find_experiment
    from tour_pyserini.pipeline import Resources

    transfer = find_experiment("carry")
    resources = Resources()
    tasks = [TransferTask.load(transfer.collections[c], "test", 5, resources) for c in ("mini", "twin")]
    labels = [t.labels() for t in tasks]
    assert labels[0].shape == (len(tasks[0].qids), 5) and labels[0].max() >= 1  # qrels grades of the judged top 5
    noise = np.random.default_rng(0).random(labels[0].shape)
    fold = fold_of(tasks[0], transfer.folds)
    for variant in transfer.variants:
        if variant.teacher != "oracle" or variant.rule != "count":
            continue
        first = run_variant(transfer, tasks, labels, variant)
        assert all(set(first[t.col.name]["delta"]) == set(t.qids) for t in tasks)
        assert any(d != 0 for d in first["mini"]["delta"].values())  # the states do move queries
        changed = labels[0].copy()
        own = fold == 0 if not variant.held_out else np.ones(len(fold), bool)
        changed[own] = noise[own]
        second = run_variant(transfer, tasks, [changed, labels[1]], variant)
        for i in np.flatnonzero(own):
            qid = tasks[0].qids[i]
            assert second["mini"]["delta"][qid] == first["mini"]["delta"][qid], (variant.key, qid)


@pytest.mark.slow
def test_the_command_writes_holm_corrected_tables_and_checks_what_the_file_expects(lab, capsys):
    from tour_pyserini.commands.experiment import main

    main(["carry", "--teachers", "oracle", "--tables", "held", "--output", "runs/carry"])
    report = json.loads((lab / "runs/carry.json").read_text())
    assert [r["key"] for r in report] == ["held oracle global count 1", "held oracle global cv 1"]
    cells = [c for r in report for c in r["collections"].values()]
    assert all(c["p_holm"] >= c["p"] and "per_query" not in c for c in cells)
    assert "| oracle | global | cv | others |" in (lab / "runs/carry.md").read_text()
    stored = (lab / "runs/carry.rows.jsonl").read_text()
    delta = report[1]["collections"]["mini"]["delta"]
    run = ["carry", "--teachers", "oracle", "--tables", "held", "--output", "runs/carry", "--check"]
    path = lab / "experiments" / "carry.yaml"
    path.write_text(TRANSFER.replace("{mini: 0.0}", f"{{mini: {delta!r}}}"))
    main(run)  # as expected: exit 0
    path.write_text(TRANSFER.replace("{mini: 0.0}", f"{{mini: {delta + 0.001!r}}}"))
    with pytest.raises(SystemExit) as e:
        main(run)
    assert e.value.code == 1 and "held oracle global cv 1 mini" in capsys.readouterr().out
    assert (lab / "runs/carry.rows.jsonl").read_text() == stored  # resumed: nothing measured again


def test_a_transfer_files_words_are_ttt_embeds():
    from tour_pyserini.files import transfers
    from tour_pyserini.ttt import magnitude, state

    assert transfers.ALPHA_RULES == magnitude.ALPHA_RULES
    assert set(transfers.SHARED_SCOPES) == set(state.SCOPES) - {"query"} == set(magnitude.SHARED)
    assert transfers.AUTO_SCOPE == magnitude.AUTO_SCOPE


def test_an_entry_with_its_own_encoder_is_compared_with_its_base(lab):
    """An entry that encodes mini's queries with the bundled encoder, named as its own, under base mini: its dense
    run is mini's to the last bit (Δ 0 against the base), so its moved queries gain against the base what they gain
    against their own dense run. Tables without ``collections:`` leave it out."""
    from tour_pyserini.encoders.spec import bundled_model_dir
    from tour_pyserini.experiments.transfer import run_transfer, with_holm
    from tour_pyserini.files.experiments import find_experiment

    path = lab / "experiments" / "carry.yaml"
    entry = f"  same: {{collection: mini, encoder: {bundled_model_dir()}, base: mini}}\n"
    table = "  own: {scopes: [task], rules: [count], shares: [0.75], teachers: [oracle], collections: [same]}\n"
    path.write_text(TRANSFER.replace("teachers:\n", entry + "teachers:\n", 1).replace("expect:\n", table + "expect:\n"))
    transfer = find_experiment("carry")
    assert all(v.collections == ("mini", "twin") for v in transfer.variants if v.table != "own")
    own = [v for v in transfer.variants if v.table == "own"]
    rows = with_holm(run_transfer(transfer, ["mini", "twin", "same"], own, str(lab / "runs" / "own")))
    cell = rows[0]["collections"]["same"]
    versus = cell["versus_base"]
    assert list(rows[0]["collections"]) == ["same"] and versus["base"] == "mini"
    assert versus["dense_delta"] == 0 and versus["base_dense"] == cell["dense"] and versus["dense_p"] == 1
    assert versus["delta"] == pytest.approx(cell["delta"], abs=1e-12) and cell["delta"] != 0
    assert versus["p_holm"] >= versus["p"] and cell["p_holm"] >= cell["p"]


def test_a_missing_encoder_is_named_with_the_tables_that_need_it(lab):
    from tour_pyserini.commands.experiment import main

    entry = "  same: {collection: mini, encoder: models/missing, base: mini}\n"
    table = "  own: {scopes: [task], rules: [count], shares: [0.75], collections: [same]}\n"
    text = TRANSFER.replace("teachers:\n", entry + "teachers:\n", 1).replace("expect:\n", table + "expect:\n")
    (lab / "experiments" / "carry.yaml").write_text(text)
    with pytest.raises(UserError, match="its encoder models/missing is not there: train it first, or leave out"):
        main(["carry"])
    main(["carry", "--tables", "main", "--dry-run"])  # the other tables run without it
