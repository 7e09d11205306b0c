"""python -m tour_pyserini.ttt as a user runs it: a teacher's rewards under a budget, a fitted state, errors."""

from __future__ import annotations

import pytest

from tour_pyserini.commands.runner import run_cli
from tour_pyserini.commands.ttt import main
from tour_pyserini.rewriters import Identity, QueryBatch
from tour_pyserini.rewriters.ttt_embed import TttEmbed
from tour_pyserini.ttt.magnitude import GRID
from tour_pyserini.ttt.rewards import read_rewards
from tour_pyserini.ttt.state import State

pytestmark = pytest.mark.slow


def test_rewards_from_the_dense_teacher_load_the_encoder_once(dense_index, mini_scifact, tmp_path, encoder_loads):
    """The teacher shares the searcher's query encoder and index, as in a search."""
    rewards = tmp_path / "r.tsv"
    main(
        [
            "rewards",
            "--index",
            str(dense_index),
            "--topics",
            str(mini_scifact["topics"]),
            "--teacher",
            "dense",
            "--budget",
            "1",
            "--output",
            str(rewards),
        ]
    )
    assert read_rewards([rewards]).num_pairs == 40 and len(encoder_loads) == 1


def test_rewards_then_fit_then_search(dense_index, bm25_index, mini_scifact, searcher, tmp_path, capsys):
    rewards, state_file = tmp_path / "r.tsv", tmp_path / "task.safetensors"
    main(
        [
            "rewards",
            "--index",
            str(dense_index),
            "--topics",
            str(mini_scifact["topics"]),
            "--teacher",
            "bm25",
            "--budget",
            "2",
            "--task",
            "mini",
            "--output",
            str(rewards),
        ]
    )
    judged = read_rewards([rewards])
    assert judged.num_pairs == 80 and len(judged.judgments["mini"]) == 8  # 2 x 40 queries: 8 with their top 10
    assert judged.provenance[str(rewards)]["teacher"] == "bm25"
    main(["fit", "--rewards", str(rewards), "--output", str(state_file), "--scope", "task"])
    assert "1 residual(s) from 8 rewarded queries" in capsys.readouterr().out
    assert not list(tmp_path.glob("*.partial"))  # the staging files are the outputs now, their locks released
    state = State.load(state_file)
    assert state.keys == [("mini", None)] and state.counts == [8] and state.alphas == [8 / 9]
    assert state.fit["objective"] == "kd" and state.encoder["weights_sha256"]
    # a warm start begins at the given state (0 steps: exactly it) and says so; another scope is refused
    warm_file = tmp_path / "warm.safetensors"
    main(
        [
            "fit",
            "--rewards",
            str(rewards),
            "--output",
            str(warm_file),
            "--scope",
            "task",
            "--init",
            str(state_file),
            "--steps",
            "0",
        ]
    )
    warm = State.load(warm_file)
    assert (warm.vectors == state.vectors).all() and warm.vectors.any()
    assert warm.provenance["warm start"]["state"] == str(state_file)
    with pytest.raises(SystemExit) as exited:
        run_cli(
            main,
            [
                "fit",
                "--rewards",
                str(rewards),
                "--output",
                str(tmp_path / "g.safetensors"),
                "--scope",
                "global",
                "--init",
                str(state_file),
            ],
        )
    assert exited.value.code == 2 and "holds a task state; this fit is of the global scope" in capsys.readouterr().err
    # α chosen by cross-validation over the 8 rewarded queries: whatever it is, the state applies it and says why
    chosen_file = tmp_path / "cv.safetensors"
    main(["fit", "--rewards", str(rewards), "--output", str(chosen_file), "--scope", "task", "--alpha-rule", "cv"])
    chosen = State.load(chosen_file)
    assert chosen.alpha_rule == "cv" and chosen.alphas[0] in (0.0, *GRID) and (chosen.vectors == state.vectors).all()
    assert f"alpha {chosen.alphas[0]:g}" in capsys.readouterr().out and chosen.provenance["magnitude"]["queries"] == 8
    # judged by the held-out queries' re-searched top 10 instead (the task's own index searched again)
    ranked_file = tmp_path / "ranked.safetensors"
    main(["fit", "--rewards", str(rewards), "--output", str(ranked_file), "--scope", "task", "--alpha-rule", "ranking"])
    ranked = State.load(ranked_file)
    assert ranked.provenance["magnitude"]["rule"] == "ranking" and ranked.alphas[0] in (0.0, *GRID)
    assert ranked.provenance["magnitude"]["queries"] <= 8 and "alpha" in capsys.readouterr().out
    # the scope chosen too: the one task's state where its α is kept, else query states; each scope tried is said
    auto_file = tmp_path / "auto.safetensors"
    main(["fit", "--rewards", str(rewards), "--output", str(auto_file), "--scope", "auto"])
    auto, said = State.load(auto_file), capsys.readouterr().out
    tried = auto.provenance["scope"]
    assert tried["chosen"] == auto.scope == ("task" if chosen.alphas[0] > 0 else "query") != "auto"
    assert tried["task"]["alpha"] == chosen.alphas[0]
    assert all(f"{s} state by cross-validation" in said for s in ("task", "global", "neighbours"))
    from tour_pyserini.files import read_topics

    topics = read_topics(mini_scifact["topics"])
    batch = QueryBatch([t.qid for t in topics], [t.text for t in topics], searcher.encode([t.text for t in topics]))
    moved = searcher.retrieve_vectors(batch.texts, batch.qids, batch.vectors, 10, rewriter=TttEmbed(state_file))
    plain = searcher.retrieve_vectors(batch.texts, batch.qids, batch.vectors, 10, rewriter=Identity())
    assert sum([h.docid for h in a.hits] != [h.docid for h in b.hits] for a, b in zip(moved, plain)) > 0
    # the same state from the search command line
    from tour_pyserini.commands.search import main as search_main
    from tour_pyserini.files.runs import read_run

    run = tmp_path / "ttt.trec"
    search_main(
        [
            "--index",
            str(dense_index),
            "--topics",
            str(mini_scifact["topics"]),
            "--output",
            str(run),
            "--hits",
            "10",
            "--rewriter",
            "ttt-embed",
            "--state",
            str(state_file),
        ]
    )
    assert {q: list(docs) for q, docs in read_run(run).items()} == {r.qid: [h.docid for h in r.hits] for r in moved}


REWARDS = ["rewards", "--index", "{dense}", "--topics", "{topics}", "--teacher", "bm25", "--output", "r.tsv"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["fit", "--rewards", "missing.tsv", "--output", "s.safetensors", "--scope", "task"], "does not exist"),
        ([*REWARDS, "--budget", "0"], "--budget must be positive"),
        ([*REWARDS, "--budget", "101"], "is the most there is"),
        (
            ["fit", "--rewards", "r.tsv", "--output", "s.safetensors", "--scope", "query", "--alpha-rule", "cv"],
            "held-out queries cannot judge it",
        ),
        (
            ["fit", "--rewards", "r.tsv", "--output", "s.safetensors", "--scope", "auto", "--alpha-rule", "count"],
            "--scope auto chooses the scope and its alpha by cross-validation",
        ),
        (
            ["fit", "--rewards", "r.tsv", "--output", "s.safetensors", "--scope", "task", "--cv-folds", "1"],
            "--cv-folds must be at least 2",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, dense_index, mini_scifact, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = [a.format(dense=dense_index, topics=mini_scifact["topics"]) for a in argv]
    with pytest.raises(SystemExit) as exited:
        run_cli(main, argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2 and err.startswith("error: ") and message in err and err.count("\n") == 1
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_recycle_a_searchs_judgments_into_rewards(dense_index, bm25_index, mini_scifact, tmp_path, capsys):
    """TOUR's trace holds every judgment it paid for (one per teacher call); recycled, they fit a state."""
    import json

    from tour_pyserini.commands.search import main as search_main
    from tour_pyserini.teachers import ScoreRequest, TeacherContext, get_teacher

    trace, rewards, state = tmp_path / "tour.jsonl", tmp_path / "r.tsv", tmp_path / "s.safetensors"
    search_main(
        [
            "--index",
            str(dense_index),
            "--topics",
            str(mini_scifact["topics"]),
            "--hits",
            "10",
            "--output",
            str(tmp_path / "tour.trec"),
            "--trace",
            str(trace),
            "--rewriter",
            "tour-soft",
            "--teacher",
            "bm25",
            "--depth",
            "10",
        ]
    )
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert all(len(r["judgments"]) == r["teacher_calls"] > 0 for r in records)
    main(
        [
            "recycle",
            "--trace",
            str(trace),
            "--index",
            str(dense_index),
            "--topics",
            str(mini_scifact["topics"]),
            "--task",
            "mini",
            "--output",
            str(rewards),
        ]
    )
    judged = read_rewards([rewards])
    assert judged.num_pairs == sum(r["teacher_calls"] for r in records)
    assert judged.provenance[str(rewards)]["teacher"] == "bm25"
    first = records[0]
    teacher = get_teacher("bm25", TeacherContext(index_dir=str(dense_index)))
    from tour_pyserini.files import read_topics

    text = next(t.text for t in read_topics(mini_scifact["topics"]) if t.qid == first["qid"])
    docids = list(first["judgments"])
    (scores,) = teacher.score([ScoreRequest(first["qid"], text, docids)])
    assert [judged.judgments["mini"][first["qid"]][d] for d in docids] == scores.tolist()
    main(["fit", "--rewards", str(rewards), "--output", str(state), "--scope", "task"])
    assert State.load(state).counts == [len(records)]
    # a trace without judgments, and a line that is not a trace record: one line, exit 2
    plain = tmp_path / "plain.jsonl"
    search_main(
        [
            "--index",
            str(dense_index),
            "--topics",
            str(mini_scifact["topics"]),
            "--hits",
            "10",
            "--output",
            str(tmp_path / "plain.trec"),
            "--trace",
            str(plain),
        ]
    )
    broken = tmp_path / "broken.jsonl"
    broken.write_text(trace.read_text().splitlines()[0] + "\nnot json\n")
    capsys.readouterr()
    for path, message in ((plain, "no teacher judgments in"), (broken, f"{broken}:2: not a trace record")):
        with pytest.raises(SystemExit) as exited:
            run_cli(
                main,
                [
                    "recycle",
                    "--trace",
                    str(path),
                    "--index",
                    str(dense_index),
                    "--topics",
                    str(mini_scifact["topics"]),
                    "--output",
                    str(tmp_path / "x.tsv"),
                ],
            )
        err = capsys.readouterr().err
        assert exited.value.code == 2 and message in err and err.count("\n") == 1
    assert not (tmp_path / "x.tsv").exists()
