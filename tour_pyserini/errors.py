"""The project's exception for bad input a user can fix.

Command-line entry points print a :class:`UserError` as one line (``error: ...``) and exit 2; every
other exception is a bug and keeps its traceback. It subclasses ``ValueError`` so that library callers
who catch ``ValueError`` for bad arguments keep working.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input (a file, a flag, a spec) that the user can correct; the message names what is wrong."""
