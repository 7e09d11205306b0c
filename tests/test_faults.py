"""Faults a user meets, each run as the user runs it (a subprocess on small real fixtures).

Ctrl-C mid-search, two searches on one output, a killed search, corpora that would lose documents,
bad flags and files: each must end in a resumable state or one clear line, never a traceback, a
silent loss or a half-written file.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tour_pyserini.errors import UserError
from tour_pyserini.files.runs import read_run

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
SCIFACT_TOPICS = ROOT / "collections" / "scifact" / "topics.test.tsv"
N_MANY = 100  # queries of a dense search that lasts long enough to be interrupted or raced


def env() -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def cli(command_name: str, *args, timeout: int = 600) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "tour_pyserini", command_name, *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env(), timeout=timeout)


def default_sigint() -> None:
    """In the child: SIGINT as a terminal delivers it. A test suite started as a shell's background job
    (``make test &``) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_search(args: list, log: Path) -> subprocess.Popen:
    # stderr to a file: tqdm writes a lot, and a full pipe would stall the search
    with open(log, "w") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "tour_pyserini.search", *map(str, args)],
            stdout=subprocess.DEVNULL,
            stderr=f,
            env=env(),
            preexec_fn=default_sigint,
        )


def wait_for(condition, proc: subprocess.Popen, what: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"the search ended (status {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"no {what} after {timeout} s"
        time.sleep(0.02)


def partial_of(path: Path) -> Path:
    return path.with_name(path.name + ".partial")


def qids_in(path: Path) -> list[str]:
    """Distinct qids of a run file, in order."""
    return list(dict.fromkeys(line.split(" ", 1)[0] for line in path.read_text().splitlines()))


def host_note(line: str) -> bool:
    """Pyserini 2.x offline: the line that says its catalogue's names are unavailable (once per command)."""
    return line.startswith("warning: Pyserini's catalogue could not be fetched")


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-3000:]
    for fragment in fragments:
        assert fragment in lines[0]
    return lines[0]


def assert_nothing_left(output: Path) -> None:
    left = [p.name for p in output.parent.glob(output.name + "*")]
    assert left == [], left


# --- Ctrl-C -----------------------------------------------------------------------------------------


def test_a_search_beside_a_busy_core_writes_the_bytes_it_writes_alone(dense_index, mini_scifact, tmp_path):
    """What else the machine runs may change how fast a command runs, never what it writes: beside a process
    spinning on a core, the same search writes the same bytes as without it. One query per batch: its encoder's
    matrix-vector products round differently on 1 and 2 threads (which a thread count chosen from the load
    changed)."""
    args = ["--index", dense_index, "--topics", mini_scifact["topics"], "--hits", 100, "--batch-size", 1]
    alone, beside = tmp_path / "alone.trec", tmp_path / "beside.trec"
    assert cli("search", *args, "--output", alone).returncode == 0
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        proc = cli("search", *args, "--output", beside)
    finally:
        spinner.kill()
        spinner.wait()
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert beside.read_bytes() == alone.read_bytes()


def first_topics(source: Path, n: int, out: Path) -> Path:
    out.write_text("".join(source.read_text().splitlines(keepends=True)[:n]))
    return out


def search_args(case: str, tmp_path: Path, *, mini_topics: Path, cross_encoder: Path) -> list:
    """A search that lasts long enough to be interrupted after its second query, and not much longer."""
    if case == "dense":  # fast per query: many queries, one at a time
        topics = first_topics(SCIFACT_TOPICS, N_MANY, tmp_path / "many.tsv")
        return ["--topics", topics, "--hits", 100, "--batch-size", 1]
    common = ["--topics", first_topics(mini_topics, 8, tmp_path / "topics.tsv"), "--hits", 100, "--batch-size", 1]
    if case == "tour-bm25":
        return [*common, "--rewriter", "tour-soft", "--teacher", "bm25", "--preset", "passage", "--depth", 20]
    return [
        *common,
        "--rewriter",
        "rerank",
        "--depth",
        5,
        "--teacher",
        f"cross-encoder:{cross_encoder}",
        "--teacher-max-length",
        128,
    ]


@pytest.mark.parametrize("case", ["dense", "tour-bm25", "cross-encoder"])
def test_ctrl_c_stops_at_once_keeps_the_finished_queries_and_the_rerun_resumes_identically(
    case, dense_index, bm25_index, mini_scifact, cross_encoder_dir, tmp_path
):
    options = search_args(case, tmp_path, mini_topics=mini_scifact["topics"], cross_encoder=cross_encoder_dir)
    args = ["--index", dense_index, *options]
    reference = tmp_path / "reference.trec"  # as a command, as the interrupted run and its resumption run
    assert cli("search", *args, "--output", reference).returncode == 0

    out, trace, log = tmp_path / "run.trec", tmp_path / "trace.jsonl", tmp_path / "stderr.txt"
    args += ["--output", out, "--trace", trace]
    proc = start_search(args, log)
    wait_for(lambda: len(qids_in(partial_of(out))) >= 2 if partial_of(out).exists() else False, proc, "2 queries")
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    status = proc.wait(timeout=60)
    seconds = time.monotonic() - sent
    print(f"{case}: exit {status} {seconds:.2f} s after SIGINT")
    stderr = log.read_text()
    assert status == 130, stderr[-3000:]
    assert seconds < 3.0, f"took {seconds:.2f} s to stop"
    assert "Traceback" not in stderr and "terminate called" not in stderr
    last = stderr.strip().splitlines()[-1]
    kept = qids_in(partial_of(out))
    assert last == (
        f"interrupted: search stopped: {partial_of(out)} keeps {len(kept)} finished queries; "
        "run the same command again to resume"
    )
    assert not out.exists() and [json.loads(r)["qid"] for r in open(f"{trace}.partial")] == kept

    rerun = cli("search", *args)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "resuming" in rerun.stdout
    assert out.read_bytes() == reference.read_bytes()
    assert [json.loads(r)["qid"] for r in open(trace)] == qids_in(out)
    assert not partial_of(out).exists() and not Path(f"{trace}.partial").exists()


def test_sigterm_unwinds_like_ctrl_c_and_leaves_no_staged_model(tmp_path):
    """``kill`` / ``timeout`` during training: exit 143, one line, and neither the model nor its staging dir."""
    (tmp_path / "corpus").mkdir()
    lines = (ROOT / "collections/scifact/corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "corpus/corpus.jsonl").write_text("".join(lines[:40]), encoding="utf-8")
    out, log = tmp_path / "ict", tmp_path / "stderr.txt"
    args = [
        "--collection",
        tmp_path / "corpus",
        "--output",
        out,
        "--steps",
        1000,
        "--batch-size",
        4,
        "--held-out",
        8,
        "--eval-every",
        1000,
        "--max-wordpieces",
        96,
    ]
    with open(log, "w") as f:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tour_pyserini", "train-ict", *map(str, args)],
            stdout=subprocess.DEVNULL,
            stderr=f,
            env=env(),
        )
    wait_for(lambda: "ict:" in log.read_text(), proc, "a training step")  # the staged model is being trained
    assert list(tmp_path.glob("ict.tmp-*"))
    proc.send_signal(signal.SIGTERM)
    status = proc.wait(timeout=60)
    stderr = log.read_text()
    assert status == 143, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == "terminated" and "Traceback" not in stderr
    assert_nothing_left(out)


# --- one writer per output, and a killed writer -------------------------------------------------------


def test_a_second_search_on_the_same_output_is_refused_and_a_killed_one_blocks_nothing(dense_index, tmp_path):
    out, log = tmp_path / "run.trec", tmp_path / "first.txt"
    topics = first_topics(SCIFACT_TOPICS, N_MANY, tmp_path / "many.tsv")
    args = ["--index", dense_index, "--topics", topics, "--hits", 100, "--batch-size", 1, "--output", out]
    first = start_search(args, log)
    # the output is locked before any model loads: start the second search while the first is loading
    wait_for(partial_of(out).exists, first, "a partial file")
    second = cli("search", *args)
    assert_one_line_error(second, f"{partial_of(out)} is locked: another search is writing this run")
    assert first.wait(timeout=600) == 0, log.read_text()[-3000:]
    run = read_run(out)  # raises if a docid appears twice for a query
    assert list(run) == qids_in(out) and len(run) == N_MANY
    assert sum(1 for _ in open(out)) == N_MANY * 100

    # SIGKILL: no cleanup runs, yet the kernel drops the lock and the rerun resumes the run and its trace
    killed, trace = tmp_path / "killed.trec", tmp_path / "killed.trace.jsonl"
    args = [*args[:-1], killed, "--trace", trace]
    proc = start_search(args, tmp_path / "killed.txt")
    wait_for(lambda: partial_of(killed).exists() and len(qids_in(partial_of(killed))) >= 3, proc, "3 queries")
    proc.kill()
    proc.wait(timeout=60)
    rerun = cli("search", *args)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "resuming" in rerun.stdout
    assert killed.read_bytes() == out.read_bytes()
    assert [json.loads(r)["qid"] for r in open(trace)] == qids_in(killed)


def start_index(args: list, log: Path) -> subprocess.Popen:
    with open(log, "w") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "tour_pyserini", "index", *map(str, args)],
            stdout=f,
            stderr=subprocess.STDOUT,
            env=env(),
            preexec_fn=default_sigint,
        )


def start_lucene_build(out: Path, log: Path) -> subprocess.Popen:
    """A BM25 build of SciFact's 5,183 abstracts (about 5 s in Lucene), once Lucene has started indexing (which
    Lucene logs with --verbose only)."""
    proc = start_index(["--bm25", "--collection", ROOT / "collections/scifact", "--output", out, "--verbose"], log)
    wait_for(lambda: "Starting to index" in log.read_text(), proc, "Lucene's indexing")
    return proc


def test_a_second_index_on_the_same_output_is_refused_while_the_first_builds(tmp_path):
    out = tmp_path / "bm25"
    first = start_lucene_build(out, tmp_path / "first.txt")
    second = cli("index", "--bm25", "--collection", ROOT / "collections/scifact", "--output", out)
    assert_one_line_error(second, f"{partial_of(out)} is locked: another command is writing this --output")
    assert first.wait(timeout=600) == 0, (tmp_path / "first.txt").read_text()[-3000:]
    assert "bm25 index" in (tmp_path / "first.txt").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bm25", "first.txt"]  # no lock or staging left
    third = cli("index", "--bm25", "--collection", ROOT / "collections/scifact", "--output", out)
    assert third.returncode == 0 and third.stdout.startswith(f"reusing bm25 index {out}: 5183 docs"), third.stderr


def test_ctrl_c_stops_a_bm25_index_build_within_a_second_leaving_nothing(tmp_path):
    """Lucene's indexing runs in a Java process of its own, stopped at once (in-process it held Ctrl-C for ~5 s)."""
    out, log = tmp_path / "bm25", tmp_path / "log.txt"
    proc = start_lucene_build(out, log)
    time.sleep(1.0)  # well into Lucene's indexing
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    status = proc.wait(timeout=60)
    stopped = time.monotonic() - started
    assert status == 130 and log.read_text().strip().splitlines()[-1] == "interrupted", log.read_text()[-3000:]
    assert stopped < 1.5, f"stopped {stopped:.1f} s after Ctrl-C"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.txt"]


# --- corpora that would lose documents -----------------------------------------------------------------

GOOD = '{"id": "d1", "title": "Alpha", "text": "apple", "contents": "Alpha apple"}\n'
BAD_CORPORA = {
    # the bad line is line 3: a JSON error's own line number (1, within the line) would be wrong
    "not-json": (GOOD + '{"id": "d2", "contents": "b"}\n{"id": "d3", "contents": \n', "corpus.jsonl:3: not valid JSON"),
    "not-utf8": (
        GOOD.encode() + b'{"id": "d2", "contents": "caf\xe9"}\n',
        "corpus.jsonl:2: not valid UTF-8 (byte 0xe9",
    ),
    "duplicate-id": (
        GOOD + '{"id": "d2", "text": "b"}\n' + GOOD,
        "corpus.jsonl:3: duplicate document id 'd1' (first at",
    ),
    "no-id": (GOOD + '{"contents": "b"}\n', "corpus.jsonl:2: document has no 'id', '_id' or 'docid' field"),
    "no-text": (GOOD + '{"id": "d2", "body": "b"}\n', "corpus.jsonl:2: document 'd2' has no text field"),
    "not-an-object": (GOOD + '["d2", "b"]\n', "corpus.jsonl:2: expected a JSON object, got list"),
    "id-with-space": (GOOD + '{"id": "d 2", "text": "b"}\n', "corpus.jsonl:2: document id 'd 2' is empty or contains"),
    "empty": ("", "corpus.jsonl: the corpus holds no documents"),
    "all-empty-text": (
        '{"id": "d1", "text": ""}\n{"id": "d2", "title": " ", "contents": ""}\n',
        "corpus.jsonl: all 2 documents have empty text; there is nothing to index",
    ),
}


@pytest.mark.parametrize("kind", ["bm25", "dense"])
@pytest.mark.parametrize("case", list(BAD_CORPORA))
def test_a_bad_corpus_is_refused_with_file_and_line_before_anything_is_built(case, kind, tmp_path):
    content, message = BAD_CORPORA[case]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes(content if isinstance(content, bytes) else content.encode())
    out = tmp_path / "index"
    proc = cli("index", "--collection", corpus, "--output", out, *(["--bm25"] if kind == "bm25" else []))
    assert_one_line_error(proc, message, str(corpus))
    assert [p.name for p in tmp_path.iterdir()] == ["corpus.jsonl"]


@pytest.mark.parametrize("kind", ["bm25", "dense"])
def test_an_unwritable_index_output_is_one_line(kind, tmp_path):
    (tmp_path / "corpus.jsonl").write_text(GOOD)
    (tmp_path / "a-file").write_text("")
    out = tmp_path / "a-file" / "index"
    proc = cli("index", "--collection", tmp_path, "--output", out, *(["--bm25"] if kind == "bm25" else []))
    assert_one_line_error(proc, f"cannot write --output {out}: {out.parent} is a file, not a directory")


MIXED = [  # every way the project reads a document's text; Anserini alone would index only d4 and d5
    {"id": "d1", "title": "Alpha", "text": "apple banana"},
    {"id": "d2", "text": "cherry"},
    {"id": "d3", "title": "durian"},
    {"id": "d4", "contents": "elderberry"},
    {"id": "d5", "contents": "fig", "title": "grape", "text": "honeydew"},
    {"_id": "d6", "title": "kiwi", "text": "lemon"},
    {"id": "d7", "contents": "", "title": "mango"},
]


def test_bm25_indexes_every_document_whatever_its_fields(tmp_path):
    from tour_pyserini._java import import_pyserini
    from tour_pyserini.search import Bm25Searcher

    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in MIXED))
    out = tmp_path / "bm25"
    proc = cli("index", "--bm25", "--collection", tmp_path, "--output", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bm25 index" in proc.stdout and ": 7 docs" in proc.stdout
    assert import_pyserini("pyserini.index.lucene").LuceneIndexReader(str(out)).stats()["documents"] == 7
    searcher = Bm25Searcher.from_index(out)
    # a document is found by its contents when it has them, else by its title and text
    expected = {
        "apple": "d1",
        "cherry": "d2",
        "durian": "d3",
        "elderberry": "d4",
        "fig": "d5",
        "lemon": "d6",
        "mango": "d7",
    }
    for word, docid in expected.items():
        assert [h.docid for h in searcher.retrieve([word], ["q"], 3)[0].hits] == [docid]


def test_dense_indexes_every_document_whatever_its_fields(tmp_path):
    import faiss

    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in MIXED) + "\n")  # and a blank line
    out = tmp_path / "dense"
    proc = cli("index", "--collection", tmp_path, "--output", out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert faiss.read_index(str(out / "index")).ntotal == 7
    assert (out / "docid").read_text().split() == [f"d{i}" for i in range(1, 8)]


def test_documents_with_empty_text_are_named_not_lost_silently(tmp_path):
    docs = [{"id": "d1", "title": "Alpha", "text": "apple"}, {"id": "d2", "title": "", "text": "", "contents": "\n"}]
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    proc = cli("index", "--bm25", "--collection", tmp_path, "--output", tmp_path / "bm25")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warning: " in proc.stderr and "1 documents have empty text and are not in the BM25 index (first: d2)" in (
        proc.stderr
    )


def test_an_index_that_lost_documents_is_not_kept(tmp_path):
    from tour_pyserini.errors import UserError
    from tour_pyserini.index.build import build_index, check_count

    def lossy_build(tmp: Path):
        (tmp / "index").write_text("half-built")
        check_count(tmp_path / "corpus.jsonl", indexer="Lucene", indexed=30, expected=33)

    with pytest.raises(UserError, match=r"corpus.jsonl: Lucene indexed 30 of 33 documents; no index was written"):
        build_index(tmp_path / "index", lossy_build)
    assert list(tmp_path.iterdir()) == []


# --- flags and files ------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--hits", "--batch-size", "--threads", "--workers"])
def test_non_positive_counts_are_refused_before_anything_loads(flag, dense_index, mini_scifact, tmp_path):
    out = tmp_path / "run.trec"
    proc = cli("search", "--index", dense_index, "--topics", mini_scifact["topics"], "--output", out, flag, 0)
    assert_one_line_error(proc, f"{flag} must be positive, got 0")
    assert_nothing_left(out)


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--device", "cuda"], "--device cuda: this torch build"),
        (["--device", "gpu"], "--device must be cpu, cuda or cuda:N, got 'gpu'"),
        (["--ef-search", "64"], "--ef-search applies to HNSW indexes; "),
    ],
)
def test_devices_and_index_knobs_that_do_not_exist_are_refused(flags, message, dense_index, mini_scifact, tmp_path):
    import torch

    if torch.cuda.is_available() and "cuda" in flags:
        pytest.skip("this machine has a GPU")
    out = tmp_path / "run.trec"
    proc = cli("search", "--index", dense_index, "--topics", mini_scifact["topics"], "--output", out, *flags)
    assert_one_line_error(proc, message)
    assert_nothing_left(out)


def test_unknown_index_and_topics_names_are_refused():
    """Pyserini 1.6.0 ships its catalogues: an unknown name is told from a known one offline. Pyserini 2.x fetches
    them, so offline every name is one line saying the catalogue could not be fetched (tests/test_hosts.py)."""
    # in-process: looking a name up in Pyserini's catalogues starts the JVM, which prints its own start-up line
    from tour_pyserini._java import pyserini_version
    from tour_pyserini.files import read_topics
    from tour_pyserini.index.pyserini_catalogue import is_prebuilt_name, resolve_index

    if pyserini_version().startswith("1."):
        assert is_prebuilt_name("wikipedia-dpr-100w.dpr-multi") and not is_prebuilt_name("wikipedia-dpr-100w.typo")
        assert resolve_index("wikipedia-dpr-100w.typo") == "wikipedia-dpr-100w.typo"  # then: no such directory
        with pytest.raises(FileNotFoundError, match="'dpr-nq-typo': no such file, and not a Pyserini topics name"):
            read_topics("dpr-nq-typo")
    else:
        with pytest.raises(UserError, match="catalogue of prebuilt indexes could not be fetched"):
            resolve_index("wikipedia-dpr-100w.typo")
        with pytest.raises(UserError, match="Pyserini's topics could not be fetched"):
            read_topics("dpr-nq-typo")


def test_a_qid_with_whitespace_is_refused_with_file_and_line(dense_index, tmp_path):
    topics, out = tmp_path / "topics.tsv", tmp_path / "run.trec"
    topics.write_text("1\tfirst query\nq 2\tsecond query\n")
    proc = cli("search", "--index", dense_index, "--topics", topics, "--output", out)
    assert_one_line_error(proc, f"{topics}:2: qid 'q 2' is empty or contains whitespace")
    assert_nothing_left(out)


@pytest.mark.parametrize("where", ["under-a-file", "read-only-directory"])
def test_an_unwritable_output_is_one_line_before_anything_loads(where, dense_index, mini_scifact, tmp_path):
    if where == "read-only-directory":
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only directories")
        parent = tmp_path / "ro"
        parent.mkdir(mode=0o555)
    else:
        parent = tmp_path / "a-file"
        parent.write_text("")
    started = time.monotonic()
    proc = cli("search", "--index", dense_index, "--topics", mini_scifact["topics"], "--output", parent / "run.trec")
    assert_one_line_error(proc, f"cannot write --output {parent / 'run.trec'}")
    assert time.monotonic() - started < 60  # no model or JVM was loaded (they print progress lines anyway)


@pytest.mark.parametrize("command", ["eval", "compare"])
@pytest.mark.parametrize("score", ["nan", "inf"])
def test_runs_with_non_finite_scores_are_refused(command, score, mini_scifact, tmp_path):
    qid, docid = mini_scifact["qrels"].read_text().split()[0:3:2]
    run, base = tmp_path / "bad.trec", tmp_path / "base.trec"
    run.write_text(f"{qid} Q0 {docid} 1 2.0 t\n{qid} Q0 other 2 {score} t\n")
    base.write_text(f"{qid} Q0 {docid} 1 2.0 t\n")
    runs = ["--run", run] if command == "eval" else ["--baseline", base, "--run", run]
    proc = cli(command, "--qrels", mini_scifact["qrels"], *runs)
    assert_one_line_error(proc, f"{run}:2: score '{score}' is not a finite number")


@pytest.mark.parametrize(
    "options, message",
    [
        (["--rewriter", "rerank", "--teacher", "bm25", "--depth", "100000"], "larger than the index"),
        (["--rewriter", "tour-soft", "--teacher", "bm25", "--depth", "10", "--lr", "nan"], ""),
    ],
    ids=["k-beyond-the-index", "lr-nan"],
)
def test_a_search_refused_before_its_first_query_leaves_no_file(
    options, message, dense_index, bm25_index, mini_scifact, tmp_path
):
    out = tmp_path / "run.trec"
    proc = cli("search", "--index", dense_index, "--topics", mini_scifact["topics"], "--output", out, *options)
    assert proc.returncode == 2 and message in proc.stderr.strip().splitlines()[-1], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert_nothing_left(out)


def test_duplicate_ids_in_a_collection_read_for_answers_are_one_line(tmp_path):
    corpus, topics, run = tmp_path / "corpus.jsonl", tmp_path / "topics.jsonl", tmp_path / "r.trec"
    corpus.write_text('{"id": "d1", "text": "Paris"}\n{"id": "d1", "text": "Lyon"}\n')
    topics.write_text('{"qid": "q1", "question": "capital of France?", "answers": ["Paris"]}\n')
    run.write_text("q1 Q0 d1 1 1.0 t\n")
    proc = cli("eval", "--answers", topics, "--collection", tmp_path, "--run", run)
    assert_one_line_error(proc, f"{corpus}:2: duplicate document id 'd1' (first at {corpus}:1)")


def test_bm25_queries_without_hits_are_reported(bm25_index, tmp_path):
    topics, out = tmp_path / "topics.tsv", tmp_path / "run.trec"
    topics.write_text("en1\tvitamin D deficiency\nar\tمرحبا بالعالم\nhe\tשלום עולם\nzh\t你好世界\nen2\tcancer cells\n")
    proc = cli("search", "--index", bm25_index, "--topics", topics, "--output", out, "--hits", 10)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert qids_in(out) == ["en1", "en2"]
    warning = [line for line in proc.stderr.splitlines() if line.startswith("warning: ") and not host_note(line)]
    assert warning == [
        "warning: 3 of 5 queries got no hits (first: ar, he, zh) and are absent from the run; "
        "trec_eval -c and ir-measures count them as 0"
    ]


# --- cross-encoder inputs, TOUR option ranges, a truncated Faiss index ------------------------------------


def test_a_missing_cross_encoder_is_one_line(dense_index, mini_scifact, tmp_path):
    out = tmp_path / "run.trec"
    proc = cli(
        "search",
        "--index",
        dense_index,
        "--topics",
        mini_scifact["topics"],
        "--output",
        out,
        "--rewriter",
        "rerank",
        "--depth",
        5,
        "--teacher",
        f"cross-encoder:{tmp_path / 'no-model'}",
    )
    assert_one_line_error(proc, str(tmp_path / "no-model"))
    assert_nothing_left(out)


def test_a_cross_encoder_reads_queries_longer_than_its_length(dense_index, mini_scifact, cross_encoder_dir, tmp_path):
    words = (mini_scifact["collection"] / "corpus.jsonl").read_text().split()
    topics, out = tmp_path / "topics.tsv", tmp_path / "run.trec"
    topics.write_text(f"long1\t{' '.join(words[:700])}\nlong2\t{' '.join(words[700:1400])}\n".replace('"', ""))
    proc = cli(
        "search",
        "--index",
        dense_index,
        "--topics",
        topics,
        "--output",
        out,
        "--rewriter",
        "rerank",
        "--depth",
        5,
        "--hits",
        10,
        "--teacher",
        f"cross-encoder:{cross_encoder_dir}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert qids_in(out) == ["long1", "long2"]


@pytest.mark.parametrize("options", [["--smoothing", "0", "--lr", "-5"], ["--lr", "-5"], ["--smoothing", "0"]])
def test_out_of_range_tour_options_are_refused(options, dense_index, bm25_index, mini_scifact, tmp_path):
    out = tmp_path / "run.trec"
    proc = cli(
        "search",
        "--index",
        dense_index,
        "--topics",
        mini_scifact["topics"],
        "--output",
        out,
        "--rewriter",
        "tour-soft",
        "--teacher",
        "bm25",
        "--depth",
        10,
        *options,
    )
    assert_one_line_error(proc)
    assert_nothing_left(out)


def test_a_truncated_faiss_index_is_one_line(dense_index, mini_scifact, tmp_path):
    import shutil

    index = tmp_path / "index"
    shutil.copytree(dense_index, index)
    data = (index / "index").read_bytes()
    (index / "index").write_bytes(data[: len(data) // 2])
    proc = cli("search", "--index", index, "--topics", mini_scifact["topics"], "--output", tmp_path / "run.trec")
    assert_one_line_error(proc, str(index / "index"))
