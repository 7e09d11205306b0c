"""The project's exception for bad input a user can fix, and its warning for input that is likely wrong.

Command-line entry points print a :class:`UserError` as one line (``error: ...``) and exit 2; every
other exception is a bug and keeps its traceback. It subclasses ``ValueError`` so that library callers
who catch ``ValueError`` for bad arguments keep working.
"""

from __future__ import annotations

import functools
import logging


class UserError(ValueError):
    """Bad input (a file, a flag, a spec) that the user can correct; the message names what is wrong."""


class ParamError(UserError):
    """A parameter's value refused. The message names the parameter as Python does (``depth must be positive, got
    0``); a command shows its flag instead and a server its request field (:meth:`naming`)."""

    def __init__(self, name: str, flag: str, text: str):
        super().__init__(f"{name} {text}")
        self.name, self.flag, self.text = name, flag, text

    def naming(self, shown: str) -> str:
        """The message with the parameter called ``shown`` (``--depth``, ``parameter 'depth'``)."""
        return f"{shown} {self.text}"


# errors a user's input causes (a missing file included): one line where a command reports them, a traceback for
# anything else
USER_ERRORS = (UserError, FileNotFoundError)


@functools.cache
def warn_once(logger: str, message: str) -> None:
    """Log ``message`` on ``logger`` as a warning, once per process: a command checks its input in the driver
    and again where it builds, and one warning is enough."""
    logging.getLogger(logger).warning(message)
