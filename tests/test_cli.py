"""The command-line programs, run as a user runs them: files in, files out, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tour_pyserini.commands.search import main as search_main
from tour_pyserini.files.runs import read_run
from tour_pyserini.files.sameness import diff_runs

pytestmark = pytest.mark.slow


def run_module(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, env=env, timeout=600)


def assert_strictly_decreasing_trec(path, hits):
    lines = [line.split() for line in path.read_text().splitlines()]
    assert all(len(f) == 6 and f[1] == "Q0" for f in lines)
    by_query: dict[str, list[tuple[int, float]]] = {}
    for qid, _, _, rank, score, _ in lines:
        by_query.setdefault(qid, []).append((int(rank), float(score)))
    for ranked in by_query.values():
        assert [r for r, _ in ranked] == list(range(1, len(ranked) + 1)) and len(ranked) <= hits
        assert all(a[1] > b[1] for a, b in zip(ranked, ranked[1:]))
    return by_query


def test_dense_and_bm25_runs(dense_index, bm25_index, mini_scifact, tmp_path, capsys):
    dense_run, bm25_run = tmp_path / "dense.trec", tmp_path / "bm25.trec"
    topics = str(mini_scifact["topics"])
    search_main(
        [
            "--index",
            str(dense_index),
            "--topics",
            topics,
            "--output",
            str(dense_run),
            "--hits",
            "100",
            "--batch-size",
            "16",
            "--run-tag",
            "minilm",
        ]
    )
    search_main(
        ["--index", str(bm25_index), "--topics", topics, "--output", str(bm25_run), "--hits", "100", "--remove-query"]
    )
    assert "s/query" in capsys.readouterr().out
    for path in (dense_run, bm25_run):
        by_query = assert_strictly_decreasing_trec(path, 100)
        assert len(by_query) == len(mini_scifact["topics"].read_text().splitlines())
    assert dense_run.read_text().split("\n")[0].endswith(" minilm")


def test_a_search_writes_its_run_and_trace_into_missing_directories(bm25_index, mini_scifact, tmp_path):
    """As every command does: the directories on an output's path are created (as Pyserini's search does)."""
    run, trace = tmp_path / "runs" / "new" / "bm25.trec", tmp_path / "traces" / "bm25.jsonl"
    search_main(
        [
            "--index",
            str(bm25_index),
            "--topics",
            str(mini_scifact["topics"]),
            "--output",
            str(run),
            "--hits",
            "10",
            "--trace",
            str(trace),
        ]
    )
    assert len(assert_strictly_decreasing_trec(run, 10)) == len(mini_scifact["topics"].read_text().splitlines())
    assert sorted(p.name for p in run.parent.iterdir()) == ["bm25.trec"] and trace.stat().st_size > 0


def test_resume_completes_an_interrupted_run(dense_index, mini_scifact, tmp_path, monkeypatch):
    """Interrupted in the middle of a batch, the rerun redoes that whole batch: byte-identical to a run
    never interrupted (at the same batch size and threads), although the batch's first queries were in
    the file already and a query's vector depends in its last bits on its batch."""
    from conftest import interrupted_at_the_third_batch

    out = tmp_path / "resumed.trec"
    args = [
        "--index",
        str(dense_index),
        "--topics",
        str(mini_scifact["topics"]),
        "--output",
        str(out),
        "--hits",
        "20",
        "--batch-size",
        "8",
    ]
    search_main(args)
    complete = out.read_text()
    out.unlink()
    interrupted_at_the_third_batch(monkeypatch, lambda: search_main(args))
    partial = out.with_name(out.name + ".partial")
    assert partial.read_text().count("\n") == 2 * 8 * 20  # the third batch, never recorded, is not kept
    with open(partial, "a") as f:  # and a batch cut off mid-line by a kill, which closes nothing
        f.write(complete.splitlines(keepends=True)[2 * 8 * 20][:10])
    search_main(args)
    assert out.read_text() == complete
    assert not partial.exists()


def test_a_run_begun_through_openvino_starts_over_where_the_runtime_extra_is_gone(
    dense_index, mini_scifact, tmp_path, monkeypatch
):
    """The default runtime resolves from the flags, the model and whether the runtime extra is installed: a run
    interrupted under OpenVINO and rerun without the extra (so through torch) is not resumed, which would mix
    the two ways' queries in one file; it is torch's run from the start."""
    import sys

    from conftest import interrupted_at_the_third_batch

    out, torch_run = tmp_path / "run.trec", tmp_path / "torch.trec"
    args = ["--index", str(dense_index), "--topics", str(mini_scifact["topics"]), "--hits", "20", "--batch-size", "8"]
    search_main([*args, "--output", str(torch_run), "--encoder-runtime", "torch"])
    interrupted_at_the_third_batch(monkeypatch, lambda: search_main([*args, "--output", str(out)]))
    monkeypatch.undo()
    assert out.with_name(out.name + ".partial").read_text().count("\n") == 2 * 8 * 20
    monkeypatch.setitem(sys.modules, "openvino", None)  # as if the extra were not installed
    search_main([*args, "--output", str(out)])
    assert out.read_bytes() == torch_run.read_bytes()


def test_matches_pyserini_faiss_cli(dense_index, mini_scifact, tmp_path):
    """Same index, topics and encoder settings: the same ranking as ``python -m pyserini.search.faiss``."""
    from tour_pyserini.encoders import bundled_model_dir

    ours, theirs = tmp_path / "ours.trec", tmp_path / "pyserini.trec"
    search_main(
        ["--index", str(dense_index), "--topics", str(mini_scifact["topics"]), "--output", str(ours), "--hits", "100"]
    )
    proc = run_module(
        "tour_pyserini",
        "run-pyserini",
        "pyserini.search.faiss",
        "--index",
        str(dense_index),
        "--topics",
        str(mini_scifact["topics"]),
        "--encoder",
        str(bundled_model_dir()),
        "--encoder-class",
        "auto",
        "--pooling",
        "mean",
        "--l2-norm",
        "--output",
        str(theirs),
        "--hits",
        "100",
        "--batch-size",
        "64",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Pyserini encodes one text at a time, we encode texts of one length together (vectors within ~1e-7)
    diff = diff_runs(read_run(ours), read_run(theirs))
    assert diff.same, diff.summary()


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing-index", "error: index directory"),
        ("bad-topics", "topics.tsv:2: expected 'qid<TAB>text'"),
        ("empty-query", "topics.tsv:2: query '2' has empty text"),
    ],
)
def test_search_errors_are_one_line_and_write_nothing(case, message, dense_index, tmp_path):
    topics = tmp_path / "topics.tsv"
    topics.write_text({"bad-topics": "1\tok\n2 broken\n", "empty-query": "1\tok\n2\t \n"}.get(case, "1\tok\n"))
    index = tmp_path / "no-index" if case == "missing-index" else dense_index
    out = tmp_path / "run.trec"
    proc = run_module("tour_pyserini.search", "--index", str(index), "--topics", str(topics), "--output", str(out))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists() and not out.with_name("run.trec.partial").exists()


def test_eval_errors(tmp_path, mini_scifact):
    run = tmp_path / "r.trec"
    run.write_text("nope Q0 d 1 1.0 t\n")
    proc = run_module("tour_pyserini.eval", "--qrels", str(mini_scifact["qrels"]), "--run", str(run))
    assert proc.returncode == 2 and "no query in common" in proc.stderr and "Traceback" not in proc.stderr


def test_console_script_lists_commands():
    from tour_pyserini.commands import SUBCOMMANDS

    proc = run_module("tour_pyserini")
    assert proc.returncode == 2 and all(name in proc.stderr for name in SUBCOMMANDS)
    listing = run_module("tour_pyserini", "--help")
    assert listing.returncode == 0
    assert all(f"e.g. tour-pyserini {name} " in listing.stderr for name in SUBCOMMANDS)  # one example each
    proc = run_module("tour_pyserini", "train-reranker", "--help")
    assert proc.returncode == 0 and "--exclude-texts-from" in proc.stdout


@pytest.mark.parametrize("typed, hint", [("serch", " (did you mean search?)"), ("frobnicate", "")])
def test_an_unknown_command_is_one_error_line_with_the_closest_command(typed, hint):
    proc = run_module("tour_pyserini", typed, "--index", "x")
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        f"error: unknown command {typed!r}{hint}; tour-pyserini --help lists the commands"
    ]


def test_each_rewriter_declares_its_own_flags(dense_index, mini_scifact, tmp_path):
    """--help groups the flags by rewriter; another rewriter's flag or a bad value fails before any model loads."""
    out = tmp_path / "run.trec"
    common = [
        "tour_pyserini.search",
        "--index",
        str(dense_index),
        "--topics",
        str(mini_scifact["topics"]),
        "--output",
        str(out),
    ]
    help_text = run_module("tour_pyserini.search", "--help").stdout
    assert "rocchio options" in help_text and "tour-hard options" in help_text and "--soft-stop" in help_text
    assert "ensemble:FILE" in help_text and "dense[:DIR]" in help_text  # teachers listed from their registry
    stray = run_module(*common, "--rewriter", "rocchio", "--lr", "0.2")
    assert stray.returncode == 2 and "error: --lr: not an option of --rewriter rocchio" in stray.stderr
    for flags, fragments in [
        (["--smoothing", "0"], ["--smoothing must be positive"]),
        (["--lr", "-5"], ["--lr must be at least 0 and finite, got -5"]),
        (["--lr", "nan"], ["--lr", "nan"]),
    ]:
        proc = run_module(*common, "--rewriter", "tour-soft", "--teacher", "cross-encoder:/no/such/model", *flags)
        [line] = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and line.startswith("error: ") and all(f in line for f in fragments)
    missing = run_module(*common, "--rewriter", "tour-soft", "--teacher", "cross-encoder:/no/such/model")
    assert missing.returncode == 2
    assert "error: cross-encoder '/no/such/model': no such model directory" in missing.stderr
    assert not list(tmp_path.iterdir())


def test_the_old_teacher_flags_still_work_for_one_release(caplog):
    from tour_pyserini.commands.search import parser

    ap = parser()
    common = ["--index", "i", "--topics", "t", "--output", "o"]
    args = ap.parse_args([*common, "--reranker", "bm25", "--reranker-max-length", "64"])
    assert (args.teacher, args.teacher_max_length) == ("bm25", 64) and not hasattr(args, "reranker")
    assert "--reranker is the old name of --teacher" in caplog.text
    assert "--reranker-max-length is the old name of --teacher-max-length" in caplog.text
    assert "--reranker" not in ap.format_help()


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--rewriter", "ttt-embed"], "--rewriter ttt-embed needs --state"),
        (
            ["--teacher", "bm25"],
            "--teacher is for the rewriters that ask one (refit, rerank, tour-hard, tour-soft); "
            "--rewriter none asks none",
        ),
        (["--rewriter", "rerank"], "rewriter 'rerank' needs a teacher (--teacher TEACHER)"),
        (["--rewriter", "rocchio", "--rocchio-topk", "-1"], "--rocchio-topk must be positive, got -1"),
    ],
)
def test_what_a_rewriter_needs_is_checked_before_any_model_loads(flags, message, dense_index, mini_scifact, tmp_path):
    out = tmp_path / "run.trec"
    proc = run_module(
        "tour_pyserini.search",
        "--index",
        str(dense_index),
        "--topics",
        str(mini_scifact["topics"]),
        "--output",
        str(out),
        *flags,
    )
    assert proc.returncode == 2 and "Loading weights" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [f"error: {message}"]
    assert not list(tmp_path.iterdir())
