"""Bad input to a command: one line naming the flag, exit status 2, before any work, and nothing left behind."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tour_pyserini.commands.outputs import locked_output, staged_output
from tour_pyserini.commands.runner import run_cli
from tour_pyserini.errors import UserError
from tour_pyserini.numbers import Number, fraction, non_negative_float, positive_int, probability

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": "none"}


def cli(*args, cwd: Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "tour_pyserini", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=ENV, cwd=cwd, timeout=120)


def one_line_error(stderr: str, *fragments: str) -> str:
    """The single ``error:`` line of ``stderr``, which says nothing else (no usage, no traceback)."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    assert all(f in lines[0] for f in fragments), lines[0]
    return lines[0]


def fake_dense_index(where: Path) -> Path:
    """What ``index_kind`` calls a dense index; enough for commands that must fail before they read it."""
    where.mkdir()
    (where / "index").write_bytes(b"")
    (where / "docid").write_text("d1\n")
    return where


# --- the flag types ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, text, ok",
    [
        (positive_int, "3", True),
        (positive_int, "0", False),
        (positive_int, "-1", False),
        (non_negative_float, "0", True),
        (non_negative_float, "nan", False),
        (non_negative_float, "inf", False),
        (non_negative_float, "-1e-9", False),
        (fraction, "0.5", True),
        (fraction, "1", False),
        (fraction, "0", False),
        (probability, "1", True),
        (probability, "0", True),
        (probability, "1.5", False),
        (probability, "-inf", False),
    ],
)
def test_a_number_type_refuses_what_is_out_of_range_naming_the_flag(kind: Number, text, ok):
    value = kind(text)
    if ok:
        kind.check("--x", value)
    else:
        with pytest.raises(UserError, match=f"^--x must be {re.escape(kind.rule)}, got"):
            kind.check("--x", value)


def parsers():
    from tour_pyserini.commands import compare, eval, fit_ensemble, index, search, train_ict, train_qa, train_reranker
    from tour_pyserini.commands import ttt as ttt_command

    ttt = ttt_command.parser()
    (subparsers,) = [a for a in ttt._actions if a.choices and "fit" in a.choices]
    subs = {f"ttt {name}": sub for name, sub in subparsers.choices.items()}
    modules = {
        "search": search,
        "index": index,
        "eval": eval,
        "compare": compare,
        "fit-ensemble": fit_ensemble,
        "train-reranker": train_reranker,
        "train-ict": train_ict,
        "train-qa": train_qa,
    }
    return {**{name: m.parser() for name, m in modules.items()}, **subs}


def test_every_numeric_flag_of_every_command_has_a_checked_type():
    """A flag typed plainly int or float would take 0, -1, nan or inf without a word (the rewriters' own
    flags included: they declare Numbers too)."""
    plain = [
        f"{name} {action.option_strings[0]}"
        for name, ap in parsers().items()
        for action in ap._actions
        if (
            action.type in (int, float)
            or isinstance(action.default, (int, float))
            and action.type is None
            and action.nargs != 0
        )
    ]
    assert not plain


# --- bad numbers, as a user types them ----------------------------------------------------------------

REWARDS = ["ttt", "rewards", "--index", "i", "--topics", "t", "--teacher", "bm25", "--output", "r.tsv"]
FIT = ["ttt", "fit", "--rewards", "r.tsv", "--scope", "task", "--output", "s.safetensors"]
SEARCH = ["search", "--index", "i", "--topics", "t", "--output", "run.trec"]


@pytest.mark.parametrize(
    "argv, message",
    [
        ([*REWARDS, "--budget", "nan"], "--budget must be positive and finite, got nan"),
        ([*REWARDS, "--budget", "inf"], "--budget must be positive and finite, got inf"),
        ([*REWARDS, "--budget", "2", "--depth", "0"], "--depth must be positive, got 0"),
        ([*FIT, "--lr", "nan"], "--lr must be positive and finite, got nan"),
        ([*FIT, "--steps", "-5"], "--steps must be at least 0, got -5"),
        ([*FIT, "--tau-teacher", "0"], "--tau-teacher must be positive and finite, got 0"),
        ([*FIT, "--ridge", "-1"], "--ridge must be at least 0 and finite, got -1"),
        ([*FIT, "--task", "scifact"], "unrecognized arguments: --task scifact"),  # fit has no --task to ignore
        ([*SEARCH, "--hits", "0"], "--hits must be positive, got 0"),
        ([*SEARCH, "--batch-size", "0"], "--batch-size must be positive, got 0"),
        ([*SEARCH, "--bm25-k1", "nan"], "--bm25-k1 must be at least 0 and finite, got nan"),
        ([*SEARCH, "--bm25-b", "2"], "--bm25-b must be in [0, 1], got 2"),
        ([*SEARCH, "--hits", "ten"], "argument --hits: invalid int value: 'ten'"),
        ([*SEARCH, "--workers", "3"], "--workers needs --ray"),
        (["index", "--collection", "c", "--output", "o", "--M", "0"], "--M must be positive, got 0"),
        (["eval", "--qrels", "q", "--run", "r", "--topk", "1", "0"], "--topk must be positive, got 0"),
        (["compare", "--qrels", "q", "--baseline", "b", "--run", "r", "--trials", "0"], "--trials must be positive"),
        (
            [
                "fit-ensemble",
                "--index",
                "i",
                "--topics",
                "t",
                "--teachers",
                "bm25",
                "dense",
                "--output",
                "e.json",
                "--l2",
                "inf",
            ],
            "--l2 must be at least 0 and finite, got inf",
        ),
        (
            ["train-reranker", "--index", "i", "--topics", "t", "--output", "m", "--max-steps", "-1"],
            "--max-steps must be at least 0, got -1",
        ),
        (
            ["train-reranker", "--index", "i", "--topics", "t", "--output", "m", "--dev-fraction", "1"],
            "--dev-fraction must be in (0, 1), got 1",
        ),
        (
            ["train-ict", "--collection", "c", "--output", "m", "--temperature", "nan"],
            "--temperature must be positive and finite, got nan",
        ),
        (
            ["train-qa", "--index", "i", "--topics", "t", "--output", "m", "--warmup", "-0.1"],
            "--warmup must be in [0, 1], got -0.1",
        ),
        (["run-pyserini", "search"], "run-pyserini needs one of Pyserini's modules first"),
        (["compare", "--baseline", "b", "--run", "r", "--diff", "--plot", "p.png"], "--diff computes none"),
        (
            ["compare", "--qrels", "q", "--baseline", "b", "--run", "b", "--plot", "p.png"],
            "give a --run that is not it",
        ),
        (["eval", "--qrels", "q", "--run", "r", "--write-answer-qrels", "a.qrels"], "needs --answers"),
        (["compare", "--qrels", "q", "--baseline", "b", "--run", "r", "--plot", "diff"], "--plot diff: name a file"),
    ],
)
def test_a_bad_flag_is_one_line_naming_it_before_anything_is_read(argv, message, tmp_path):
    """The files named do not exist: the flag is refused before any of them is opened."""
    proc = cli(*argv, cwd=tmp_path)
    assert proc.returncode == 2
    one_line_error(proc.stderr, message)
    assert not list(tmp_path.iterdir())


def test_a_rewriter_flag_out_of_range_is_refused_before_the_searcher_opens(tmp_path):
    index = fake_dense_index(tmp_path / "index")  # not a Faiss file: reading it would fail otherwise
    (tmp_path / "t.tsv").write_text("1\tquery\n")
    proc = cli(
        *SEARCH[:2],
        index,
        "--topics",
        "t.tsv",
        "--output",
        "run.trec",
        "--rewriter",
        "rerank",
        "--teacher",
        "bm25",
        "--depth",
        "0",
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    one_line_error(proc.stderr, "--depth must be positive, got 0")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index", "t.tsv"]


def test_the_old_flag_k_is_depth_with_a_warning(tmp_path):
    """--k, the re-ranking depth's old flag, still works for one release: the same value, one warning."""
    from tour_pyserini.commands.search import parser

    old, new = (parser().parse_args([*SEARCH[1:], flag, "7"]) for flag in ("--k", "--depth"))
    assert old.depth == new.depth == 7
    index = fake_dense_index(tmp_path / "index")
    (tmp_path / "t.tsv").write_text("1\tquery\n")
    proc = cli(
        *SEARCH[:2],
        index,
        "--topics",
        "t.tsv",
        "--output",
        "run.trec",
        "--rewriter",
        "rerank",
        "--teacher",
        "bm25",
        "--k",
        "0",
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == (
        "warning: --k is the old name of --depth (same meaning); it will be removed in the next release"
    )
    assert proc.stderr.splitlines()[1:] == ["error: --depth must be positive, got 0"]


def test_max_steps_0_is_documented_as_no_limit():
    from tour_pyserini.commands.train_reranker import parser

    assert "(0: no limit, every epoch) (default: 0)" in " ".join(parser().format_help().split())


# --- outputs ------------------------------------------------------------------------------------------


OUTPUT_COMMANDS = [
    "ttt rewards",
    "ttt recycle",
    "ttt fit",
    "fit-ensemble",
    "compare --plot",
    "eval --write-answer-qrels",
]


def output_case(command: str, tmp_path: Path) -> tuple[list, str]:
    """Each command with an output flag, its other inputs only as real as the command reads before writing."""
    index = fake_dense_index(tmp_path / "index")
    cases = {
        "ttt rewards": (
            [*REWARDS[:2], "--index", index, "--topics", "t", "--teacher", "bm25", "--budget", "1"],
            "--output",
        ),
        "ttt recycle": (["ttt", "recycle", "--trace", "trace.jsonl", "--index", index, "--topics", "t"], "--output"),
        "ttt fit": (FIT[:-2], "--output"),
        "fit-ensemble": (
            ["fit-ensemble", "--index", index, "--topics", "t", "--teachers", "bm25", "dense"],
            "--output",
        ),
        "compare --plot": (["compare", "--qrels", "q", "--baseline", "b", "--run", "r"], "--plot"),
        "eval --write-answer-qrels": (
            ["eval", "--answers", "t", "--collection", "c", "--run", "r"],
            "--write-answer-qrels",
        ),
    }
    return cases[command]


@pytest.mark.parametrize("where", ["under-a-file", "a-directory", "read-only-directory"])
@pytest.mark.parametrize("command", OUTPUT_COMMANDS)
def test_an_output_that_cannot_be_written_is_refused_before_any_work(command, where, tmp_path):
    if where == "read-only-directory" and os.geteuid() == 0:
        pytest.skip("root writes into read-only directories")
    argv, flag = output_case(command, tmp_path)
    target = {
        "under-a-file": tmp_path / "a-file" / "sub" / "out.png",
        "a-directory": tmp_path / "out.png",
        "read-only-directory": tmp_path / "locked" / "new" / "out.png",
    }[where]
    if where == "under-a-file":
        (tmp_path / "a-file").write_text("")
    elif where == "a-directory":
        target.mkdir()
    else:
        target.parent.parent.mkdir()
        target.parent.parent.chmod(0o555)
    before = sorted(tmp_path.rglob("*"))
    proc = cli(*argv, flag, target, cwd=tmp_path)
    assert proc.returncode == 2
    one_line_error(
        proc.stderr,
        flag,
        {
            "under-a-file": "a-file is a file, not a directory",
            "a-directory": "is a directory",
            "read-only-directory": "locked is read-only",
        }[where],
    )
    assert sorted(tmp_path.rglob("*")) == before  # nothing written, nothing staged


def test_every_output_in_a_missing_directory_is_written_there(tmp_path):
    """One rule for every command: the missing directories on an output's path are created (as Pyserini's are)."""
    from tour_pyserini.commands.compare import main as compare_main

    (tmp_path / "q.txt").write_text("1 0 d1 1\n2 0 d2 1\n")
    (tmp_path / "base.trec").write_text("1 Q0 d2 1 2.0 t\n1 Q0 d1 2 1.0 t\n2 Q0 d2 1 1.0 t\n")
    (tmp_path / "run.trec").write_text("1 Q0 d1 1 2.0 t\n1 Q0 d2 2 1.0 t\n2 Q0 d1 1 1.0 t\n")
    plot = tmp_path / "new" / "deeper" / "diff.png"
    compare_main(
        [
            "--qrels",
            str(tmp_path / "q.txt"),
            "--baseline",
            str(tmp_path / "base.trec"),
            "--run",
            str(tmp_path / "run.trec"),
            "--trials",
            "10",
            "--plot",
            str(plot),
        ]
    )
    assert plot.stat().st_size > 0 and sorted(p.name for p in plot.parent.iterdir()) == ["diff.png"]
    with locked_output(tmp_path / "other" / "r.tsv") as out:
        out.write_text("rewards")
    assert (tmp_path / "other" / "r.tsv").read_text() == "rewards"


SAME_FILE = {  # case: (--trace, --score-store) given beside --output run.trec
    "trace-is-the-run": (["--trace", "run.trec"], "--trace run.trec and --output run.trec are the same file"),
    "trace-links-to-the-run": (["--trace", "link.jsonl"], "--trace link.jsonl and --output run.trec are the same"),
    "trace-is-the-run's-staging": (["--trace", "run.trec.partial"], "--trace run.trec.partial and --output run.trec"),
    "store-is-the-trace": (
        ["--trace", "t.jsonl", "--teacher", "bm25", "--rewriter", "rerank", "--score-store", "./t.jsonl"],
        "--score-store ./t.jsonl and --trace t.jsonl are the same file",
    ),
    "trace-is-a-directory": (["--trace", "traces"], "--trace traces is a directory; name a file"),
    "trace-under-a-file": (["--trace", "t.tsv/trace.jsonl"], "t.tsv is a file, not a directory"),
}


@pytest.mark.parametrize("case", list(SAME_FILE))
def test_the_outputs_of_a_search_are_distinct_writable_files_before_anything_loads(case, tmp_path):
    index = fake_dense_index(tmp_path / "index")
    (tmp_path / "t.tsv").write_text("1\tquery\n")
    (tmp_path / "traces").mkdir()
    (tmp_path / "link.jsonl").symlink_to(tmp_path / "run.trec")  # dangling until the run exists
    before = sorted(tmp_path.rglob("*"))
    flags, message = SAME_FILE[case]
    proc = cli("search", "--index", index, "--topics", "t.tsv", "--output", "run.trec", *flags, cwd=tmp_path)
    assert proc.returncode == 2
    one_line_error(proc.stderr, message)
    assert sorted(tmp_path.rglob("*")) == before  # nothing written, nothing staged


def test_a_staged_output_appears_whole_or_not_at_all(tmp_path):
    out = tmp_path / "plot.png"
    out.write_text("the previous plot")
    with pytest.raises(RuntimeError), staged_output(out) as staged:
        assert staged.parent == tmp_path and staged.suffix == ".png"  # the writer may choose its format by it
        staged.write_text("half a plo")
        raise RuntimeError("the writer crashed")
    assert out.read_text() == "the previous plot" and sorted(tmp_path.iterdir()) == [out]
    with staged_output(out) as staged:
        staged.write_text("the new plot")
    assert out.read_text() == "the new plot" and sorted(tmp_path.iterdir()) == [out]


def test_compare_plot_and_answer_qrels_are_written_whole(tmp_path, capsys):
    from tour_pyserini.commands.compare import main as compare_main
    from tour_pyserini.commands.eval import main as eval_main

    (tmp_path / "q.txt").write_text("1 0 d1 1\n2 0 d2 1\n")
    (tmp_path / "base.trec").write_text("1 Q0 d2 1 2.0 t\n1 Q0 d1 2 1.0 t\n2 Q0 d2 1 1.0 t\n")
    (tmp_path / "run.trec").write_text("1 Q0 d1 1 2.0 t\n1 Q0 d2 2 1.0 t\n2 Q0 d1 1 1.0 t\n")
    compare_main(
        [
            "--qrels",
            str(tmp_path / "q.txt"),
            "--baseline",
            str(tmp_path / "base.trec"),
            "--run",
            str(tmp_path / "run.trec"),
            "--plot",
            str(tmp_path / "diff.png"),
            "--trials",
            "10",
        ]
    )
    assert (tmp_path / "diff.png").read_bytes().startswith(b"\x89PNG")
    (tmp_path / "corpus.jsonl").write_text(
        '{"id": "d1", "contents": "Paris is in France"}\n{"id": "d2", "contents": "Rome is in Italy"}\n'
    )
    (tmp_path / "topics.jsonl").write_text(
        '{"qid": "1", "text": "France?", "answers": ["Paris"]}\n{"qid": "2", "text": "Italy?", "answers": ["Rome"]}\n'
    )
    eval_main(
        [
            "--answers",
            str(tmp_path / "topics.jsonl"),
            "--collection",
            str(tmp_path),
            "--run",
            str(tmp_path / "run.trec"),
            "--topk",
            "1",
            "--write-answer-qrels",
            str(tmp_path / "a.qrels"),
        ]
    )
    assert (tmp_path / "a.qrels").read_text().splitlines() == ["1 0 d1 1", "2 0 d1 0"]  # top 1: d1 for both
    assert not list(tmp_path.glob("*.partial*"))
    capsys.readouterr()


# --- one writer per output ----------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["rewards", "fit"])
def test_a_second_command_on_the_same_output_is_refused_while_the_first_runs(command, tmp_path, monkeypatch, capsys):
    """The second command starts while the first is in its work (its teacher judging, its fit)."""
    from tour_pyserini.commands import ttt

    monkeypatch.chdir(tmp_path)
    fake_dense_index(tmp_path / "index")
    (tmp_path / "t.tsv").write_text("1\tquery\n")
    (tmp_path / "r.tsv").write_text(f"{open_rewards_header()}1\td1\t0.5\tmini\n")
    argv = {
        "rewards": [
            "rewards",
            "--index",
            "index",
            "--topics",
            "t.tsv",
            "--teacher",
            "bm25",
            "--budget",
            "1",
            "--output",
            "out",
        ],
        "fit": ["fit", "--rewards", "r.tsv", "--scope", "task", "--output", "out"],
    }[command]
    refusals = []

    def second_command(*args, **kwargs):
        with pytest.raises(SystemExit) as exited:
            run_cli(ttt.main, argv)
        refusals.append((exited.value.code, capsys.readouterr().err))

    monkeypatch.setattr(ttt, "judge_rewards" if command == "rewards" else "run_fit", second_command)
    ttt.main(argv)
    [(code, err)] = refusals
    assert code == 2
    one_line_error(err, "out.partial is locked: another command is writing this --output")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index", "r.tsv", "t.tsv"]  # the first left nothing


def open_rewards_header() -> str:
    return "# ttt-embed rewards: qid<TAB>docid<TAB>reward<TAB>task\n# task: mini\tindex\tt.tsv\n"


def test_a_killed_commands_lock_goes_with_it(tmp_path):
    out = tmp_path / "s.safetensors"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
        import time
        from tour_pyserini.commands.outputs import locked_output
        with locked_output({str(out)!r}):
            print("locked", flush=True)
            time.sleep(120)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        refused = cli(*FIT[:-1], out, cwd=tmp_path)
        assert refused.returncode == 2
        one_line_error(refused.stderr, f"{out}.partial is locked")
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
    rerun = cli(*FIT[:-1], out, cwd=tmp_path)  # past the lock: to the missing rewards file
    assert rerun.returncode == 2
    one_line_error(rerun.stderr, "rewards file 'r.tsv' does not exist")
    assert not list(tmp_path.iterdir())  # the killed holder's partial file is gone with the rerun


def test_locked_output_leaves_nothing_when_the_work_fails(tmp_path):
    out = tmp_path / "r.tsv"
    with pytest.raises(UserError, match="bad rewards"), locked_output(out):
        (tmp_path / "r.tsv.partial").write_text("half")
        raise UserError("bad rewards")
    assert not list(tmp_path.iterdir())


# --- flags that would be ignored ----------------------------------------------------------------------


def test_task_with_a_global_state_is_refused(tmp_path):
    import numpy as np

    from tour_pyserini.rewriters.ttt_embed import TttEmbed
    from tour_pyserini.ttt.objectives import FitConfig
    from tour_pyserini.ttt.state import State

    state = tmp_path / "global.safetensors"
    State("global", [(None, None)], np.zeros((1, 4)), [3], ["scifact"], FitConfig().to_json(), {}).save(state)
    TttEmbed(state)
    with pytest.raises(UserError, match="--task scifact: this state is global"):
        TttEmbed(state, task="scifact")


def test_fit_ensemble_without_a_relevant_document_is_refused_before_the_teachers_load(tmp_path):
    (tmp_path / "t.tsv").write_text("1\tfirst\n2\tsecond\n")
    (tmp_path / "q.txt").write_text("1 0 d1 0\n3 0 d3 1\n")  # query 1 judged not relevant, 3 is not a topic
    proc = cli(
        "fit-ensemble",
        "--index",
        fake_dense_index(tmp_path / "index"),
        "--topics",
        "t.tsv",
        "--qrels",
        "q.txt",
        "--teachers",
        "cross-encoder:/no/such/model",
        "bm25",
        "--output",
        "e.json",
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    one_line_error(proc.stderr, "no query of t.tsv has a relevant document in q.txt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index", "q.txt", "t.tsv"]


def test_ttt_fit_flags_say_the_fit_config_defaults():
    from dataclasses import asdict

    from tour_pyserini.ttt.objectives import FitConfig

    fit = parsers()["ttt fit"]
    helps = {a.option_strings[0]: " ".join((a.help or "").split()) for a in fit._actions if a.option_strings}
    for name in ("objective", "tau_teacher", "tau_student", "ridge", "steps", "lr"):
        assert f"(default: {asdict(FitConfig())[name]})" in helps[f"--{name.replace('_', '-')}"], name


def test_the_fit_config_names_the_value_it_refuses():
    """From Python by the parameter's name; the command line (the table above) and a request name their own."""
    from tour_pyserini.serve.requests import as_request
    from tour_pyserini.ttt.allocation import allocate
    from tour_pyserini.ttt.objectives import FitConfig

    with pytest.raises(UserError, match="^tau_teacher must be positive and finite, got 0$") as refused:
        FitConfig(tau_teacher=0)
    assert refused.value.naming(refused.value.flag) == "--tau-teacher must be positive and finite, got 0"
    assert str(as_request(refused.value)) == "parameter 'tau-teacher' must be positive and finite, got 0"
    with pytest.raises(UserError, match="^lr must be positive and finite, got nan"):
        FitConfig(lr=float("nan"))
    with pytest.raises(UserError, match="^objective must be one of kd, rkl, grpo, got 'kl'"):
        FitConfig(objective="kl")
    with pytest.raises(UserError, match="budget must be a finite number"):
        allocate([["1", "2"]], float("inf"))
