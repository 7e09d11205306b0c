"""Input files refused where the reference tools refuse them: trec_eval for qrels and runs (the trec_eval binary
Pyserini ships, 9.0.4), Anserini's topic readers (what Pyserini reads a topics file with) for topics. Each case was
scored by the toolkit before; each is now one error naming file and line."""

from __future__ import annotations

import platform
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest

from tour_pyserini.commands.eval import main as eval_main
from tour_pyserini.errors import UserError
from tour_pyserini.files import read_topics

QRELS = "1 0 a 1\n1 0 b 2\n2 0 c 1\n"
RUN = "1 Q0 a 1 2.0 t\n1 Q0 b 2 1.0 t\n2 Q0 c 1 1.0 t\n"

# (qrels, run, the error: file name and line, then what it says)
CASES = {
    "qrels-duplicate-judgement": (
        "1 0 a 1\n1 0 a 0\n2 0 c 1\n",
        RUN,
        "q.txt:2: docid 'a' is judged twice for query '1' (first at line 1)",
    ),
    "qrels-blank-line": ("1 0 a 1\n\n1 0 b 2\n2 0 c 1\n", RUN, "q.txt:2: a blank line"),
    "qrels-blank-last-line": (QRELS + "\n", RUN, "q.txt:4: a blank line"),
    "qrels-spaces-line": ("1 0 a 1\n   \n1 0 b 2\n2 0 c 1\n", RUN, "q.txt:2: a blank line"),
    "qrels-no-break-space": (
        "1\u00a00 a 1\n1 0 b 2\n2 0 c 1\n",
        RUN,
        "q.txt:1: expected 'qid iter docid relevance', found 3 fields (U+00A0 separates no fields",
    ),
    "qrels-file-separator": (
        "1 0\x1ca 1\n" + QRELS[8:],
        RUN,
        "q.txt:1: expected 'qid iter docid relevance', found 3 fields (U+001C",
    ),
    "qrels-nul": ("1 0 a\x00z 1\n" + QRELS[8:], RUN, "q.txt:1: a NUL byte at column 6"),
    "qrels-grade-too-large": (
        "1 0 a 4294967296\n" + QRELS[8:],
        RUN,
        "q.txt:1: relevance 4294967296 does not fit a 32-bit integer",
    ),
    "run-no-break-space": (
        QRELS,
        "1 Q0 a 1 2.0\u00a0t\n" + RUN[15:],
        "r.trec:1: expected 'qid Q0 docid rank score tag', found 5 fields (U+00A0",
    ),
    "run-next-line": (
        QRELS,
        "1 Q0 a 1\x852.0 t\n" + RUN[15:],
        "r.trec:1: expected 'qid Q0 docid rank score tag', found 5 fields (U+0085",
    ),
    "run-nul": (QRELS, "1 Q0 a\x00z 1 2.0 t\n" + RUN[15:], "r.trec:1: a NUL byte at column 7"),
    "run-empty": (QRELS, "", "r.trec: no results"),
    "run-blank-lines-only": (QRELS, "\n\n", "r.trec: no results"),
}


def write_case(tmp_path: Path, case: str) -> tuple[Path, Path, str]:
    qrels_text, run_text, message = CASES[case]
    qrels, run = tmp_path / "q.txt", tmp_path / "r.trec"
    qrels.write_bytes(qrels_text.encode())
    run.write_bytes(run_text.encode())
    return qrels, run, message


@pytest.mark.parametrize("case", list(CASES))
def test_a_file_trec_eval_refuses_is_refused_naming_file_and_line(case, tmp_path, capsys):
    qrels, run, message = write_case(tmp_path, case)
    with pytest.raises(UserError) as refused:
        eval_main(["--qrels", str(qrels), "--run", str(run), "--metrics", "NumRel", "AP"])
    text = str(refused.value)
    assert "\n" not in text and text.startswith(str(tmp_path / message.split(":")[0])) and message in text
    assert capsys.readouterr().out == ""


def trec_eval_binary(tmp_path: Path) -> Path:
    """The trec_eval binary inside the Anserini jar Pyserini ships (what ``pyserini.eval.trec_eval`` runs)."""
    if (platform.system(), platform.machine()) != ("Linux", "x86_64"):
        pytest.skip("the jar's trec_eval binaries are for other platforms")
    from tour_pyserini._java import anserini_jar

    out = tmp_path / "trec_eval"
    with zipfile.ZipFile(anserini_jar()) as jar:
        out.write_bytes(jar.read("trec_eval/trec_eval-linux-amd64"))
    out.chmod(out.stat().st_mode | stat.S_IEXEC)
    return out


def test_pyserinis_trec_eval_refuses_each_case_and_scores_the_good_files(tmp_path):
    """The reference: every case above makes trec_eval stop (an error or a crash), the good files do not."""
    binary = trec_eval_binary(tmp_path)

    def trec_eval(qrels: Path, run: Path) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(binary), "-c", "-m", "num_rel", "-m", "map", str(qrels), str(run)], capture_output=True, timeout=60
        )

    good_q, good_r = tmp_path / "good.q", tmp_path / "good.r"
    good_q.write_text(QRELS)
    good_r.write_text(RUN)
    assert trec_eval(good_q, good_r).returncode == 0
    for case in CASES:
        folder = tmp_path / case
        folder.mkdir()
        qrels, run, _ = write_case(folder, case)
        assert trec_eval(qrels, run).returncode != 0, case


TOPICS = {  # Anserini's readers stop on a blank line; DprNqTopicReader's CSV parser skips an empty one
    "topics.tsv": ("1\tq one\n\n2\tq two\n", "topics.tsv:2: a blank line", "TsvStringTopicReader"),
    "first.tsv": ("\n1\tq one\n", "first.tsv:1: a blank line", "TsvStringTopicReader"),
    "spaces.tsv": ("1\tq one\n \n", "spaces.tsv:2: a blank line", "TsvStringTopicReader"),
    "end.tsv": ("1\tq one\n2\tq two\n\n", "end.tsv:3: a blank line", "TsvIntTopicReader"),
    "dpr.txt": ("q one\t['a']\n  \nq two\t['b']\n", "dpr.txt:2: a blank line", "DprNqTopicReader"),
    "topics.jsonl": (
        '{"id": "1", "title": "a"}\n\n{"id": "2", "title": "b"}\n',
        "topics.jsonl:2: a blank line",
        "JsonStringTopicReader",
    ),
    "dpr.jsonl": ('{"question": "a", "answer": ["x"]}\n\n', "dpr.jsonl:2: a blank line", "DprJsonlTopicReader"),
}


@pytest.mark.parametrize("name", list(TOPICS))
def test_a_topics_file_with_a_blank_line_is_refused(name, tmp_path):
    content, message, _ = TOPICS[name]
    (tmp_path / name).write_text(content)
    with pytest.raises(UserError, match=message):
        read_topics(tmp_path / name)


def test_an_empty_line_in_dpr_tsv_topics_is_skipped_and_numbers_no_question(tmp_path):
    (tmp_path / "dpr.txt").write_text("q one\t['a']\n\nq two\t['b']\n")
    assert [(t.qid, t.text, t.answers) for t in read_topics(tmp_path / "dpr.txt")] == [
        ("0", "q one", ("a",)),
        ("1", "q two", ("b",)),
    ]


@pytest.mark.slow
def test_anserinis_topic_readers_refuse_the_same_files(tmp_path):
    from tour_pyserini._java import import_pyserini

    search = import_pyserini("pyserini.search")

    def read(reader: str, path: Path) -> dict:
        reader = f"io.anserini.search.topicreader.{reader}"
        if hasattr(search, "load_topics_from_file"):  # Pyserini 2.x: the file first
            return search.load_topics_from_file(str(path), reader)
        return search.get_topics_with_reader(reader, str(path))

    for name, (content, _, reader) in TOPICS.items():
        (tmp_path / name).write_text(content)
        with pytest.raises(ValueError, match="Unable to initialize TopicReader"):
            read(reader, tmp_path / name)
    (tmp_path / "ok.txt").write_text("q one\t['a']\n\nq two\t['b']\n")
    topics = read("DprNqTopicReader", tmp_path / "ok.txt")
    assert {q: t["title"] for q, t in topics.items()} == {0: "q one", 1: "q two"}


# --- a run of other topics, in answers mode ----------------------------------------------------------------------


def qa_files(tmp_path: Path, run_lines: str) -> tuple[Path, Path, Path]:
    import json

    collection = tmp_path / "passages"
    collection.mkdir()
    docs = [("p0", "Moon", "Apollo 17 left the Moon in December 1972."), ("p1", "Paris", "Paris is in France.")]
    (collection / "corpus.jsonl").write_text(
        "".join(json.dumps({"id": i, "title": t, "text": x}) + "\n" for i, t, x in docs)
    )
    topics = tmp_path / "topics.jsonl"
    topics.write_text(
        '{"qid": "0", "question": "when did anyone leave the moon", "answers": ["December 1972"]}\n'
        '{"qid": "1", "question": "where is paris", "answers": ["France"]}\n'
    )
    run = tmp_path / "run.trec"
    run.write_text(run_lines)
    return topics, collection, run


def test_a_run_of_other_topics_is_refused_in_one_line_naming_both_files(tmp_path):
    from test_cli import run_module

    topics, collection, run = qa_files(tmp_path, "7 Q0 p0 1 2.0 t\n8 Q0 p1 1 2.0 t\n")
    proc = run_module(
        "tour_pyserini.eval", "--answers", str(topics), "--collection", str(collection), "--run", str(run)
    )
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (
        f"error: {run} and {topics} have no query in common (the run's 2: 7, 8; the topics' 2: "
        "0, 1): a run of other topics?\n"
    )


@pytest.mark.slow
def test_a_run_that_leaves_questions_out_or_holds_others_is_named(tmp_path, caplog, capsys):
    import json
    import logging

    topics, collection, run = qa_files(tmp_path, "0 Q0 p0 1 2.0 t\n9 Q0 p1 1 2.0 t\n")
    with caplog.at_level(logging.WARNING, logger="tour_pyserini"):
        eval_main(
            ["--answers", str(topics), "--collection", str(collection), "--run", str(run), "--topk", "1", "--json"]
        )
    assert json.loads(capsys.readouterr().out) == {"Acc@1": 0.5}  # question 1 is missing: it counts as 0
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        f"{run}: 1 of the 2 questions of {topics} are not in the run and count as 0 (is it a run of these topics?)",
        f"{run}: 1 of its 2 queries (9) are not questions of {topics} and are not scored",
    ]
