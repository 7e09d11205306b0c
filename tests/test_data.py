"""The collections shipped in the repo and the loaders' handling of bad files."""

from __future__ import annotations

import filecmp
import json
import subprocess
import sys

import pytest
from conftest import ROOT, SCIFACT, SCIFACT_QRELS

from tour_pyserini.errors import UserError
from tour_pyserini.files import read_qrels, read_topics

SHARED = ROOT.parent / "shared" / "data" / "scifact"


def test_scifact_counts_and_qrels_docids_exist():
    docs = [json.loads(line) for line in (SCIFACT / "corpus.jsonl").open(encoding="utf-8")]
    assert len(docs) == 5183
    ids = {d["id"] for d in docs}
    assert len(ids) == 5183
    assert all(d["contents"] == f"{d['title']}\n{d['text']}" and d["title"] and d["text"] for d in docs)
    topics = read_topics(SCIFACT / "topics.test.tsv")
    assert len(topics) == 300
    assert len(SCIFACT_QRELS.read_text().splitlines()) == 339
    qrels = read_qrels(SCIFACT_QRELS)
    assert set(qrels) <= {t.qid for t in topics}
    assert {d for judged in qrels.values() for d in judged} <= ids


def test_scifact_train_split_is_disjoint_from_test():
    train = read_topics(SCIFACT / "topics.train.tsv")
    test = read_topics(SCIFACT / "topics.test.tsv")
    assert len(train) == 809 and not {t.qid for t in train} & {t.qid for t in test}
    # SciFact itself has two claim texts in both splits; a teacher trainer must drop them
    assert {t.text for t in train} & {t.text for t in test} == {
        "There is no association between HNF4A mutations and diabetes risks.",
        "Obesity decreases life quality.",
    }
    assert len((ROOT / "qrels/scifact.train.txt").read_text().splitlines()) == 919
    qrels = read_qrels(ROOT / "qrels/scifact.train.txt")
    assert set(qrels) == {t.qid for t in train}
    ids = {json.loads(line)["id"] for line in (SCIFACT / "corpus.jsonl").open(encoding="utf-8")}
    assert {d for judged in qrels.values() for d in judged} <= ids


def test_abstract_sentences_are_joined_not_glued():
    sys.path.insert(0, str(ROOT / "scripts"))
    from prepare_scifact import abstract_sentences

    cell = "['First sentence.'\n 'Second (1.4 +/-'\n '0.2).']"
    assert abstract_sentences(cell) == ["First sentence.", "Second (1.4 +/-", "0.2)."]
    assert abstract_sentences('["It\'s quoted."]') == ["It's quoted."]


@pytest.mark.skipif(not SHARED.exists(), reason="needs ../shared/data/scifact")
def test_prepare_script_reproduces_the_committed_files(tmp_path):
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "prepare_scifact.py"),
            "--source",
            str(SHARED),
            "--root",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
    )
    for rel in (
        "collections/scifact/corpus.jsonl",
        "collections/scifact/topics.test.tsv",
        "qrels/scifact.test.txt",
        "collections/scifact/topics.train.tsv",
        "qrels/scifact.train.txt",
    ):
        assert filecmp.cmp(tmp_path / rel, ROOT / rel, shallow=False), rel


def test_topics_tsv_and_jsonl(tmp_path):
    tsv = tmp_path / "t.tsv"
    tsv.write_text("1\tfirst query\n2\tsecond\twith tab\n")  # a blank line is refused: tests/test_file_checks.py
    assert [(t.qid, t.text) for t in read_topics(tsv)] == [("1", "first query"), ("2", "second\twith tab")]
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"qid": "a", "question": "who?", "answers": ["me"]}\n')
    assert read_topics(jsonl)[0].answers == ("me",)


@pytest.mark.parametrize(
    "name, content, message",
    [
        ("t.tsv", "1\tok\n2 no tab here\n", r"t.tsv:2: expected 'qid<TAB>text', found no tab"),
        ("t.tsv", "1\tok\n2\t   \n", r"t.tsv:2: query '2' has empty text"),
        ("t.tsv", "1\tok\n2\t\u200b\u200d \u3164\n", r"t.tsv:2: query '2' has empty text"),  # invisible characters
        ("t.tsv", "1\tok\n1\tagain\n", r"t.tsv:2: duplicate qid '1'"),
        ("t.jsonl", '{"qid": "a", "question": "q", "answers": "x"}\n', r"t.jsonl:1: 'answers' must be a list"),
        ("t.jsonl", "{oops\n", r"t.jsonl:1: not valid JSON"),
        # a run line is whitespace-separated: such a qid would give lines of 7 fields
        ("t.tsv", "1\tok\nq 2\tsecond\n", r"t.tsv:2: qid 'q 2' is empty or contains whitespace"),
        ("t.jsonl", '{"qid": "a\\tb", "question": "q"}\n', r"t.jsonl:1: qid 'a\\tb' is empty or contains whitespace"),
        ("t.tsv", "\tno qid\n", r"t.tsv:1: qid '' is empty"),
    ],
)
def test_malformed_topics_name_file_and_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(UserError, match=message):
        read_topics(path)


def test_unknown_topics_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="unknown topics"):
        read_topics(tmp_path / "missing.tsv")


@pytest.mark.parametrize(
    "content, message",
    [
        ("1 0 d1 1\n1 0 d2\n", r"q.txt:2: expected 'qid iter docid relevance', found 3 fields"),
        ("1 0 d1 high\n", r"q.txt:1: relevance 'high' is not an integer"),
    ],
)
def test_malformed_qrels(tmp_path, content, message):
    path = tmp_path / "q.txt"
    path.write_text(content)
    with pytest.raises(UserError, match=message):
        read_qrels(path)


QA = ROOT / "collections" / "qa-topics"


@pytest.mark.parametrize(
    "name, count",
    [("nq", 3610), ("trivia", 11313), ("curated", 694), ("wq", 2032), ("squad", 10570)],
)
def test_dpr_topic_files(name, count):
    topics = read_topics(QA / "dpr" / f"topics.dpr.{name}.test.txt")
    assert len(topics) == count
    assert [t.qid for t in topics[:3]] == ["0", "1", "2"]  # Pyserini's DPR qids: 0-based line numbers
    assert all(t.answers for t in topics)


def test_dpr_csv_quoted_answers_and_nq_open():
    nq = read_topics(QA / "dpr" / "topics.dpr.nq.test.txt")
    assert nq[36].answers == ("Solange Knowles", "Destiny 's Child")  # "['..', ""..""]" unquoted as Pyserini does
    nq_open = read_topics(QA / "nq-open" / "NQ-open.dev.jsonl")
    assert len(nq_open) == 3610 and all(t.answers for t in nq_open)


def test_entityquestions_relations():
    topics = read_topics(QA / "entityquestions" / "test")
    assert len(topics) == 22075
    relations = {t.relation for t in topics}
    assert len(relations) == 24 and "P106" in relations
    one = read_topics(QA / "entityquestions" / "test" / "P106.test.json")
    assert len(one) == sum(t.relation == "P106" for t in topics) and one[0].qid == "P106-0"


def test_beir_folder_and_missing_ir_datasets(tmp_path, monkeypatch):
    (tmp_path / "queries.jsonl").write_text('{"_id": "q1", "text": "first"}\n{"_id": "q2", "text": "second"}\n')
    assert [t.qid for t in read_topics(tmp_path)] == ["q1", "q2"]
    monkeypatch.setenv("IR_DATASETS_HOME", str(tmp_path / "ird"))
    with pytest.raises(FileNotFoundError, match="unknown topics 'not/a-dataset'"):
        read_topics("not/a-dataset")


def test_dpr_line_without_answer_list(tmp_path):
    path = tmp_path / "dpr.txt"
    path.write_text("who?\t['me']\nwhat?\tnot a list\n")
    with pytest.raises(ValueError, match=r"dpr.txt:2: expected 'question<TAB>\[answers\]'"):
        read_topics(path)


def test_cranfield_counts_and_qrels_mapping():
    docs = [json.loads(line) for line in (ROOT / "collections/cranfield/corpus.jsonl").open(encoding="utf-8")]
    assert len(docs) == 1400 and {d["id"] for d in docs} == {str(i) for i in range(1, 1401)}
    topics = read_topics(ROOT / "collections/cranfield/topics.tsv")
    assert [t.qid for t in topics] == [str(i) for i in range(1, 226)]  # order of appearance, not the .I numbers
    assert topics[2].text.startswith("what problems of heat conduction")  # .I 004 in cran.qry is query 3
    qrels = read_qrels(ROOT / "qrels/cranfield.txt")
    assert set(qrels) == {t.qid for t in topics}
    assert {d for judged in qrels.values() for d in judged} <= {d["id"] for d in docs}
    assert qrels["1"]["184"] == 3  # original grade 2 (high relevance) -> 3
    grades = [g for judged in qrels.values() for g in judged.values()]
    assert sorted(set(grades)) == [0, 1, 2, 3, 4] and grades.count(4) == 128


SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.mark.skipif(not SHARED_DATA.exists(), reason="needs ../shared/data")
@pytest.mark.parametrize(
    "script, source, outputs",
    [
        (
            "prepare_cranfield.py",
            "cranfield",
            ["collections/cranfield/corpus.jsonl", "collections/cranfield/topics.tsv", "qrels/cranfield.txt"],
        ),
        (
            "prepare_nq_oracle.py",
            "nq-open",
            [
                "collections/nq-oracle/corpus.jsonl",
                "collections/nq-oracle/topics.train.jsonl",
                "collections/nq-oracle/topics.test.jsonl",
            ],
        ),
    ],
)
def test_prepare_scripts_reproduce_committed_files(script, source, outputs, tmp_path):
    cmd = [
        sys.executable,
        str(ROOT / "scripts" / script),
        "--source",
        str(SHARED_DATA / source),
        "--root",
        str(tmp_path),
    ]
    subprocess.run(cmd, check=True, capture_output=True)
    for rel in outputs:
        assert filecmp.cmp(tmp_path / rel, ROOT / rel, shallow=False), rel


# --- byte-order marks and bytes that are not UTF-8, in every text input -----------------------------------


def _readers():
    from tour_pyserini.files.runs import read_run
    from tour_pyserini.index.corpus import read_jsonl_corpus
    from tour_pyserini.ttt.rewards import read_rewards

    return {
        "topics.tsv": ("148\tfirst query\n149\tsecond\n", lambda p: read_topics(p)[0].qid, "148"),
        "topics.jsonl": ('{"qid": "148", "question": "q"}\n', lambda p: read_topics(p)[0].qid, "148"),
        "topics.json": ('[{"question": "q", "answers": ["a"]}]\n', lambda p: read_topics(p)[0].text, "q"),
        "qrels.txt": ("148 0 d1 1\n", lambda p: next(iter(read_qrels(p))), "148"),
        "run.trec": ("148 Q0 d1 1 2.0 tag\n", lambda p: next(iter(read_run(p))), "148"),
        "corpus.jsonl": ('{"id": "d1", "text": "t"}\n', lambda p: next(read_jsonl_corpus(p)).docid, "d1"),
        "rewards.tsv": (
            "# task: t\tidx\ttopics\n148\td1\t1.0\tt\n",
            lambda p: next(iter(read_rewards([p]).judgments["t"])),
            "148",
        ),
    }


@pytest.mark.parametrize("name", list(_readers()))
def test_a_leading_byte_order_mark_is_not_part_of_the_first_field(tmp_path, name):
    content, first, expected = _readers()[name]
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + content.encode())
    assert first(path) == expected


@pytest.mark.parametrize("name", list(_readers()))
def test_bytes_that_are_not_utf8_are_one_error_naming_file_and_line(tmp_path, name):
    content, first, _ = _readers()[name]
    path = tmp_path / name
    lines = content.encode().splitlines(keepends=True)
    at = len(lines)  # the last line: its number must be the file's, not 1
    path.write_bytes(b"".join(lines[:-1]) + lines[-1].rstrip(b"\n") + b"\xe9\n")
    with pytest.raises(UserError, match=rf"^{path}:{at}: not valid UTF-8 \(byte 0xe9 at column \d+\)$"):
        first(path)


def test_eval_reads_a_bom_and_refuses_latin1_in_one_line(tmp_path):
    qrels, run = tmp_path / "qrels.txt", tmp_path / "run.trec"
    qrels.write_bytes(b"\xef\xbb\xbf148 0 d1 1\n149 0 d2 1\n")
    run.write_bytes(b"\xef\xbb\xbf148 Q0 d1 1 2.0 t\n149 Q0 d2 1 1.0 t\n")

    def evaluate(*files):
        command = [
            sys.executable,
            "-m",
            "tour_pyserini.eval",
            "--qrels",
            str(qrels),
            "--run",
            *map(str, files),
            "--metrics",
            "nDCG@10",
            "--json",
        ]
        return subprocess.run(command, capture_output=True, text=True, timeout=300)

    done = evaluate(run)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"nDCG@10": 1.0}  # the first query is found in both files
    latin1 = tmp_path / "latin1.trec"
    latin1.write_bytes(b"148 Q0 d1 1 2.0 t\n149 Q0 caf\xe9 1 1.0 t\n")
    done = evaluate(latin1)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"error: {latin1}:2: not valid UTF-8 (byte 0xe9 at column 11)\n"


def test_a_corpus_with_a_bom_reaches_the_indexers_as_a_normalised_copy(tmp_path):
    from tour_pyserini.index.corpus import check_corpus

    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(b'{"id": "d1", "title": "A", "text": "t", "contents": "A t"}\n')
    assert check_corpus(corpus).lucene_ready and check_corpus(corpus).pyserini_ready
    corpus.write_bytes(b"\xef\xbb\xbf" + corpus.read_bytes())  # Anserini and Pyserini read the file as it is
    assert not check_corpus(corpus).lucene_ready and not check_corpus(corpus).pyserini_ready
