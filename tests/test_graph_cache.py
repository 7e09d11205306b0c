"""The exported graph cache, through both runtimes: a graph is read only if its bytes are the SHA-256 recorded when
it was written (a corrupt, truncated or emptied graph, or one without its record, is exported again with a
warning), processes exporting one graph take turns and a crash leaves no half graph, and a read-only cache folder
beside the weights sends the export to the user's cache."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_reader import tiny_qa_model
from test_reader_runtime import windows

from tour_pyserini.answer import Reader, ReaderOptions
from tour_pyserini.files.digest import file_sha256
from tour_pyserini.runtime.onnx import CACHE


def reader(model: Path, runtime: str) -> Reader:
    return Reader(str(model), ReaderOptions(max_length=96, stride=24, runtime=runtime, precision="fp32"))


@pytest.fixture
def model(tmp_path) -> Path:
    return tiny_qa_model(tmp_path / "tiny")


def flip(graph: Path) -> None:
    """Bytes of the weights (the graph's second half) changed in place: the graph still parses."""
    data = bytearray(graph.read_bytes())
    middle = len(data) * 3 // 4
    data[middle : middle + 64] = bytes(b ^ 0x40 for b in data[middle : middle + 64])
    graph.write_bytes(bytes(data))


def earlier_record(record: Path) -> None:
    """The record as a version that did not hash its graph wrote it."""
    fields = json.loads(record.read_text())
    fields.pop("graph_sha256", None)
    record.write_text(json.dumps(fields))


DAMAGES = {
    "corrupted": flip,
    "truncated": lambda graph: graph.write_bytes(graph.read_bytes()[: graph.stat().st_size // 2]),
    "emptied": lambda graph: graph.write_bytes(b""),
    "record lost": lambda graph: (graph.parent / "graph.json").unlink(),
    "record garbled": lambda graph: (graph.parent / "graph.json").write_text("{"),
    "record without its hash": lambda graph: earlier_record(graph.parent / "graph.json"),
}


def runtime_records(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("tour_pyserini.runtime")]


def cache_entries(model: Path) -> list[str]:
    return sorted(p.name for p in (model / CACHE).iterdir())


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("runtime", ["onnx", "openvino"])
def test_a_damaged_cached_graph_is_exported_again_with_a_one_line_warning(runtime, damage, model, caplog):
    first = reader(model, runtime)
    graph = first.graph.path
    whole = graph.read_bytes()
    DAMAGES[damage](graph)
    caplog.set_level(logging.INFO, logger="tour_pyserini.runtime")
    again = reader(model, runtime)
    assert again.graph.path == graph and graph.read_bytes() == whole and "exporting" in caplog.text
    warnings = [r.getMessage() for r in runtime_records(caplog) if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and str(graph.parent) in warnings[0] and "\n" not in warnings[0]
    ws = windows(first)
    assert all(np.array_equal(a, b) for x, y in zip(first.logits(ws), again.logits(ws)) for a, b in zip(x, y))
    assert cache_entries(model) == sorted([graph.parent.name, f".{graph.parent.name}.lock"])
    caplog.clear()
    assert reader(model, runtime).graph.path == graph and not runtime_records(caplog)  # checked, whole: read as it is


LOGGER = "INFO:tour_pyserini.runtime.onnx"  # the export's log lines, as logging.basicConfig writes them
EXPORT = """
import hashlib, logging, sys, time
from pathlib import Path
from tour_pyserini.answer import Reader, ReaderOptions
logging.basicConfig(level=logging.INFO)
model, barrier = sys.argv[1], Path(sys.argv[2])
(barrier / sys.argv[3]).touch()
while len(list(barrier.iterdir())) < 2:  # both processes loaded: they ask for the graph at once
    time.sleep(0.01)
graph = Reader(model, ReaderOptions(runtime="onnx", precision="fp32")).graph.path
print(graph, hashlib.sha256(graph.read_bytes()).hexdigest())
"""


@pytest.mark.slow
def test_two_processes_exporting_one_graph_at_once_take_turns(model, tmp_path):
    """Started together, each asks for the graph at the same moment: one exports it, the other waits for it and
    reads it, checked; both end well with the same graph, and the cache holds only it and its lock file."""
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    children = [
        subprocess.Popen(
            [sys.executable, "-c", EXPORT, str(model), str(barrier), str(i)],
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for i in range(2)
    ]
    outputs = [child.communicate(timeout=300) for child in children]
    assert [child.returncode for child in children] == [0, 0], [err for _, err in outputs]
    assert outputs[0][0] == outputs[1][0] and sum(f"{LOGGER}:exporting" in err for _, err in outputs) == 1
    graph, sha = outputs[0][0].split()
    assert file_sha256(graph) == sha and Path(graph).is_relative_to(model / CACHE)
    folder = Path(graph).parent.name
    assert cache_entries(model) == sorted([folder, f".{folder}.lock"])


CRASH = """
import os, signal, sys
from tour_pyserini.encoders.spec import weights_sha256
from tour_pyserini.runtime.onnx import cached_graph

def crash(graph):
    graph.write_bytes(b"half a graph")
    os.kill(os.getpid(), signal.SIGKILL)

cached_graph(sys.argv[1], weights_sha256(sys.argv[1]), "fp32", crash)
"""


def test_an_export_killed_halfway_leaves_no_graph_and_the_next_one_cleans_up(model):
    killed = subprocess.run([sys.executable, "-c", CRASH, str(model)], capture_output=True, text=True)
    assert killed.returncode == -9, killed.stderr
    left = cache_entries(model)
    graph = reader(model, "onnx").graph.path
    assert graph.parent.name not in left  # nothing under the graph's own name
    assert cache_entries(model) == sorted([graph.parent.name, f".{graph.parent.name}.lock"])


@pytest.fixture
def read_only_beside(model, monkeypatch):
    """Makes the cache folder beside the weights read-only, as an earlier export left it before permissions
    changed; for root, whom mode bits do not stop, access answers as for anyone else."""
    folder = model / CACHE
    access = os.access

    def make() -> Path:
        folder.mkdir(exist_ok=True)
        folder.chmod(0o555)
        monkeypatch.setattr(os, "access", lambda p, m: access(p, m) and not (m & os.W_OK and Path(p) == folder))
        return folder

    yield make
    if folder.exists():
        folder.chmod(0o755)


@pytest.mark.parametrize("beside", ["empty", "corrupted", "whole"])
def test_a_read_only_cache_folder_beside_the_weights_sends_the_export_to_the_users_cache(
    beside, model, tmp_path, read_only_beside, monkeypatch
):
    """Empty or holding a damaged graph, it cannot take the export: the user's cache does, the folder left as it
    is. A whole graph in it is read from there."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    if beside != "empty":
        exported = reader(model, "openvino").graph.path
        if beside == "corrupted":
            flip(exported)
    folder = read_only_beside()
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    graph = reader(model, "openvino").graph.path
    users = tmp_path / "cache" / "tour_pyserini" / CACHE
    assert graph.is_relative_to(folder if beside == "whole" else users)
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    assert users.exists() == (beside != "whole")
