"""What every command-line entry point shares: one-line errors instead of tracebacks, threads that share cores."""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

from tour_pyserini.devices import share_cores
from tour_pyserini.errors import USER_ERRORS, ParamError


class TerminalFormatter(logging.Formatter):
    """The library's log records as a command shows them: ``warning: ...`` (errors likewise), others as they are."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        return f"{record.levelname.lower()}: {message}" if record.levelno >= logging.WARNING else message


class StderrHandler(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is when a record comes (a test's capture, a redirect)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # StreamHandler sets it once; the current one is read instead
        pass


def show_library_log() -> None:
    """Send the package's log records of level INFO and above to stderr, once per process, and only there: Pyserini
    configures the root logger when it is imported (``logging.basicConfig``), which would print each record again."""
    logger = logging.getLogger("tour_pyserini")
    if not any(isinstance(h, StderrHandler) for h in logger.handlers):
        handler = StderrHandler()
        handler.setFormatter(TerminalFormatter())
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    logger.propagate = False


def run_cli(main: Callable[[list[str] | None], None], argv: list[str] | None = None) -> None:
    """Run a command's ``main``: user errors as one line and exit 2; Ctrl-C (130) and SIGTERM (143) alike.

    SIGTERM (``kill``, ``timeout``, a scheduler ending a job) is raised as ``KeyboardInterrupt`` so that
    it unwinds like Ctrl-C: staged outputs are removed, a search keeps its finished queries. Before the
    command imports torch or Faiss, where other processes keep cores busy, their idle threads are set to sleep
    as they wait (:func:`share_cores`; the thread count, and with it the arithmetic, stays as on idle cores).
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # transformers' and the hub's bars say how a model's weights load, which tells a user nothing
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    show_library_log()
    share_cores()
    terminated: list[int] = []

    def on_sigterm(signum, frame):
        terminated.append(signum)
        raise KeyboardInterrupt

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        main(argv)
    except USER_ERRORS as e:  # a parameter is named by its flag here
        print(f"error: {e.naming(e.flag) if isinstance(e, ParamError) else e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt as e:
        print(f"{'terminated' if terminated else 'interrupted'}{f': {e}' if e.args else ''}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        # every file is closed by now; tearing down the interpreter (torch, the JVM) would take seconds more
        os._exit(143 if terminated else 130)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
