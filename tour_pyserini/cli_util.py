"""What every command-line entry point shares: one-line errors instead of tracebacks."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from tour_pyserini._java import JavaNotFoundError
from tour_pyserini.errors import UserError

# Errors a user can cause with bad input (a missing file included); anything else is a bug and keeps
# its traceback.
USER_ERRORS = (UserError, FileNotFoundError, JavaNotFoundError)


def run_cli(main: Callable[[list[str] | None], None], argv: list[str] | None = None) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        main(argv)
    except USER_ERRORS as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt as e:
        print(f"interrupted{f': {e}' if e.args else ''}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        # every file is closed by now; tearing down the interpreter (torch, the JVM) would take seconds more
        os._exit(130)
