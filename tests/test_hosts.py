"""Two hosts, one code base: Pyserini 1.6.0 (Python 3.11, Lucene 9) and Pyserini 2.x (Python 3.12+, Lucene 10).
Each test runs on whichever host the suite runs on, and says what it expects of each."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tour_pyserini._java import LUCENE_OF_PYSERINI, lucene_major, pyserini_version
from tour_pyserini.index.layout import lucene_created_major

PYSERINI_2 = int(pyserini_version().split(".")[0]) >= 2
ROOT = Path(__file__).resolve().parents[1]

# a process without a network: every host name fails to resolve, as on an air-gapped machine
OFFLINE = """
import socket
def refuse(*args, **kwargs):
    raise socket.gaierror(-2, "Name or service not known")
socket.getaddrinfo = refuse
"""
RECORD_LOG = """
import logging
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append(record.getMessage())
logging.getLogger("tour_pyserini").addHandler(Keep())
logging.getLogger("tour_pyserini").setLevel(logging.INFO)
"""


def run_python(*parts: str) -> subprocess.CompletedProcess:
    code = "\n".join(textwrap.dedent(part) for part in parts)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_pyserini_imports_offline_and_says_once_that_its_names_need_the_network():
    """Pyserini 2.x fetches five catalogue files while ``pyserini.prebuilt_index_info`` is imported: offline, every
    ``import pyserini.search`` raised URLError. Through the plugin the imports finish, one line says what is lost,
    and a prebuilt index name or a Pyserini topics name is one line naming the network. 1.6.0 fetches nothing."""
    code = """
    import json
    from tour_pyserini._java import import_pyserini
    from tour_pyserini.errors import UserError
    from tour_pyserini.index.pyserini_catalogue import resolve_index
    from tour_pyserini.files.topics import read_topics
    for module in ("pyserini.search.faiss", "pyserini.search.lucene", "pyserini.encode", "pyserini.index",
                   "pyserini.search"):
        import_pyserini(module)
    import pyserini.search.faiss as faiss
    errors = []
    for name, read in (("msmarco-v1-passage.bge-base-en-v1.5", resolve_index), ("msmarco-passage-dev-subset",
                                                                                 read_topics)):
        try:
            read(name)
        except UserError as e:
            errors.append(str(e))
    print(json.dumps({"log": records, "errors": errors, "searcher": faiss.FaissSearcher.__name__}))
    """
    report = json.loads(run_python(OFFLINE, RECORD_LOG, code).stdout.strip().splitlines()[-1])
    assert report["searcher"] == "FaissSearcher"
    if PYSERINI_2:
        assert len(report["log"]) == 1 and "unavailable offline" in report["log"][0], report["log"]
        assert "could not be fetched" in report["errors"][0] and "pass an index directory" in report["errors"][0]
        assert "could not be fetched" in report["errors"][1] and "pass a topics file" in report["errors"][1]
    else:
        assert report["log"] == []
        assert "could not be downloaded" in report["errors"][0] and "could not be downloaded" in report["errors"][1]


@pytest.mark.slow
@pytest.mark.skipif(not PYSERINI_2, reason="Pyserini 1.6.0 fetches no catalogue")
def test_online_the_catalogue_is_pyserinis_own():
    """With the catalogue reachable (here a stand-in for GitHub that serves every file), the import asks for it as
    Pyserini does, keeps what it read, and says nothing."""
    code = """
    import io, json, urllib.request
    asked = []
    def github(url, *args, **kwargs):
        asked.append(url)
        names = ["msmarco-v1-passage.unicoil", "msmarco-v2-passage.unicoil-0shot"]
        return io.BytesIO(json.dumps([{"name": n, "description": "d", "filename": "f", "urls": ["u"], "md5": "m",
                                       "size": 1} for n in names]).encode())
    urllib.request.urlopen = github
    from tour_pyserini._java import import_pyserini
    info = import_pyserini("pyserini.prebuilt_index_info")
    alias = info.IMPACT_INDEX_INFO_MSMARCO_ALIASES["msmarco-passage-unicoil-d2q"]
    print(json.dumps({"log": records, "asked": len(asked), "alias": alias["description"],
                      "still_online": info.urlopen is github}))
    """
    report = json.loads(run_python(RECORD_LOG, code).stdout.strip().splitlines()[-1])
    assert report == {"log": [], "asked": 5, "alias": "d", "still_online": True}


@pytest.mark.slow
def test_the_lucene_table_is_the_running_jvms():
    """The Lucene major each Pyserini runs, known before the JVM starts, is what the JVM says."""
    code = """
    from tour_pyserini._java import import_pyserini, lucene_major
    version = import_pyserini("pyserini.pyclass").autoclass("org.apache.lucene.util.Version")
    print(version.LATEST.major, lucene_major())
    """
    running, tabled = run_python(code).stdout.split()[-2:]
    assert running == tabled
    assert lucene_major() in LUCENE_OF_PYSERINI.values()


@pytest.mark.slow
def test_a_bm25_index_records_its_lucene_and_one_too_new_is_one_line(bm25_index, mini_scifact, tmp_path):
    """An index built by a newer Lucene (Pyserini 2.x's, read by 1.6.0) failed deep in Java
    (``indexCreatedVersionMajor is in the future``). Its version is read from the index's own segments file:
    here an index whose header says one major above the running Lucene is refused in one line, by search and
    by the index command that would reuse it, before the JVM starts."""
    assert json.loads((bm25_index / "tour_pyserini.json").read_text())["lucene_major"] == lucene_major()
    assert lucene_created_major(bm25_index) == lucene_major()
    newer = tmp_path / "newer.bm25"
    shutil.copytree(bm25_index, newer)
    segments = max(newer.glob("segments_*"))
    data = bytearray(segments.read_bytes())
    at = data.index(b"segments") + len(b"segments") + 4 + 16  # name, format version, segment id
    at += 1 + data[at] + 3  # the generation suffix; the writer's major, minor and bugfix (one byte each here)
    assert data[at] == lucene_major()
    data[at] += 1
    segments.write_bytes(bytes(data))
    assert lucene_created_major(newer) == lucene_major() + 1
    env = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    for command in (
        ["search", "--index", newer, "--topics", mini_scifact["topics"], "--output", tmp_path / "r.trec"],
        ["index", "--bm25", "--collection", mini_scifact["collection"], "--output", newer],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "tour_pyserini", *map(str, command)],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-2000:]
        assert f"built by Lucene {lucene_major() + 1} (a newer Pyserini)" in lines[0]
    assert not (tmp_path / "r.trec").exists()


def test_a_segments_file_that_is_not_lucenes_reads_as_unknown(tmp_path):
    (tmp_path / "segments_1").write_bytes(b"not a lucene file")
    assert lucene_created_major(tmp_path) is None
    (tmp_path / "segments_2").write_bytes(b"\x3f\xd7\x6c\x17\x08segm")  # a header cut short
    assert lucene_created_major(tmp_path) is None
    assert lucene_created_major(ROOT) is None  # no segments file at all


def test_the_installed_host_is_a_tested_pair():
    """The pins of pyproject.toml: Pyserini 1.6.0 on Python 3.11, Pyserini 2.4.0 on 3.12 and later."""
    expected = "2.4.0" if sys.version_info >= (3, 12) else "1.6.0"
    assert pyserini_version() == expected
