"""Parameters a user sets, each declared once: its name, type with its range, default and help.

A :class:`Number` is a numeric type that parses its text and knows the range its value must lie in. A
:class:`Param` declares one parameter of a library object (a rewriter, a teacher, a trainer): the command
line's flag, its help (which says the default, read from the declaration) and the range check all derive from
it. A configuration dataclass declares its fields with :func:`param` and is checked by :func:`check_fields`, so
the dataclass is the one declaration of its parameters, as ir_measures declares a measure's parameters as data.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import re
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any

import numpy as np

from tour_pyserini.errors import ParamError, UserError

# a number in ASCII digits: Python's int() and float() read other scripts' digits too
ASCII_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


class Number:
    """A numeric flag's ``type=``: ``kind`` (int or float) parses the text, and :meth:`check` refuses, naming the
    flag, a value that is not finite or not ``rule`` (e.g. "positive", "in [0, 1]")."""

    def __init__(self, kind: type, rule: str, ok: Callable[[float], bool]):
        self.kind, self.rule, self.ok = kind, rule, ok
        self.__name__ = kind.__name__  # the parser's message for text that is no number: "invalid int value: 'x'"

    def __call__(self, text: str) -> int | float:
        return self.kind(text)

    def refusal(self, value: int | float) -> str | None:
        """Why ``value`` is refused ("must be positive, got 0"), or None."""
        if not ((self.kind is int or math.isfinite(value)) and self.ok(value)):
            return f"must be {self.rule}, got {value if self.kind is int else format(value, 'g')}"
        return None

    def check(self, flag: str, value: int | float) -> None:
        if refused := self.refusal(value):
            raise UserError(f"{flag} {refused}")


def at_least(low: int) -> Number:
    return Number(int, f"at least {low}", lambda v: v >= low)


positive_int = Number(int, "positive", lambda v: v > 0)
non_negative_int = at_least(0)
positive_float = Number(float, "positive and finite", lambda v: v > 0)
non_negative_float = Number(float, "at least 0 and finite", lambda v: v >= 0)
finite_float = Number(float, "finite", lambda v: True)
fraction = Number(float, "in (0, 1)", lambda v: 0 < v < 1)
probability = Number(float, "in [0, 1]", lambda v: 0 <= v <= 1)
below_one = Number(float, "in [0, 1)", lambda v: 0 <= v < 1)
mass = Number(float, "in (0, 1]", lambda v: 0 < v <= 1)


class Role(Enum):
    """What a parameter's value is, for the limits that apply to every parameter of that kind whatever its name: a
    new rewriter's option with a role is bounded like the others without a line elsewhere."""

    HITS = "hits"  # results a query gets: a server's --max-hits
    CANDIDATES = "candidates"  # documents searched, judged or fed back per step: the index's size, --max-candidates
    ITERATIONS = "iterations"  # steps per query: a server's --max-iterations
    FILE = "file"  # a path on the machine that searches: never from a request; its content is part of a run's identity
    URL = "url"  # an address the search connects to: never from a request


@dataclasses.dataclass(frozen=True)
class Param:
    """One parameter: ``name`` (the constructor's or the config field's), parsed by ``type`` (a :class:`Number`
    range-checks), ``default`` (None: not set), ``help`` (the default is added to it), ``flag`` (default
    ``--name-with-dashes``), ``choices``; with ``const`` the flag takes no value and sets ``const``. A ``shared``
    parameter is a limit of the whole search, not of one process (an API teacher's requests in flight: Ray
    workers split it)."""

    name: str
    type: Any = str
    default: Any = None
    help: str = ""
    flag: str | None = None
    choices: tuple | None = None
    const: Any = None
    metavar: str | None = None
    shared: bool = False
    required: bool = False
    default_text: str | None = None  # what an unset (None) default means, for the help: "the preset's"
    aliases: tuple[str, ...] = ()  # old flags (and request parameters) still accepted for one release, with a warning
    role: Role | None = None  # what the value is, for the limits that read it (a server's maxima, the index's size)

    @property
    def option(self) -> str:
        """The command-line flag."""
        return self.flag or f"--{self.name.replace('_', '-')}"

    @property
    def dest(self) -> str:
        return self.option.lstrip("-").replace("-", "_")

    @property
    def default_shown(self) -> str | None:
        """The default as the help says it (None: none to say)."""
        if self.const is not None:
            return None
        return self.default_text if self.default is None else str(self.default)

    @property
    def described(self) -> str:
        """The help text with the default it has when not given."""
        shown = self.default_shown
        return self.help if shown is None else f"{self.help} (default: {shown})"

    def parse(self, raw: Any) -> Any:
        """``raw`` as this parameter's value, checked: text as a query string or a YAML file gives it (numbers in
        ASCII digits; ``true`` or ``false``, any case), or a typed value as Python or JSON gives it (a number of the
        parameter's kind, never a bool; True or False; a string or a path). None stays None (the default applies).
        Anything else is a :class:`~tour_pyserini.errors.ParamError` naming the parameter: one line. The one way a
        parameter's value is read, whoever gives it (a command line's flags through :meth:`parse_flag`)."""
        if raw is None:
            return None
        if isinstance(self.type, Number):
            integral = self.type.kind is int
            what = "an integer" if integral else "a finite number"
            if isinstance(raw, str):
                if not ASCII_NUMBER.fullmatch(raw) or (integral and not raw.lstrip("+-").isdigit()):
                    raise ParamError(self.name, self.option, f"must be {what}, got {raw[:40]!r}")
            elif isinstance(raw, bool | np.bool_) or not isinstance(
                raw, numbers.Integral if integral else numbers.Real
            ):
                raise ParamError(self.name, self.option, f"must be {what}, got {raw!r}")
            return self.check(self.type.kind(raw))
        if self.type is bool:
            return self.check(self.boolean(raw))
        if isinstance(raw, os.PathLike):
            raw = os.fspath(raw)
        if not isinstance(raw, str):
            raise ParamError(self.name, self.option, f"must be a string, got {raw!r}")
        return self.check(raw if self.type is str else self.type(raw))

    def parse_flag(self, raw: Any) -> Any:
        """``raw`` as the flag gives it (a request's parameter named as the flag): a switch (``--no-early-stop``)
        given true sets its value, given false leaves the default; any other flag as :meth:`parse`."""
        if self.const is not None:
            return self.const if self.boolean(raw) else None
        return self.parse(raw)

    def boolean(self, raw: Any) -> bool:
        if isinstance(raw, bool | np.bool_):
            return bool(raw)
        if isinstance(raw, str) and raw.lower() in ("true", "false"):
            return raw.lower() == "true"
        raise ParamError(self.name, self.option, f"must be true or false, got {str(raw)[:40]!r}")

    def check(self, value: Any) -> Any:
        """``value``, or a :class:`~tour_pyserini.errors.ParamError` naming the parameter: out of range, or not
        one of the choices."""
        if value is None:
            return value
        if isinstance(self.type, Number) and (refused := self.type.refusal(value)):
            raise ParamError(self.name, self.option, refused)
        if self.choices is not None and value not in self.choices:
            raise ParamError(
                self.name, self.option, f"must be one of {', '.join(map(str, self.choices))}, got {value!r}"
            )
        return value


def param(default: Any = None, type: Any = str, help: str = "", *, like: Param | None = None, **declared) -> Any:
    """A configuration dataclass's field declared as a :class:`Param` (the field's name is the param's); ``like``:
    a shared declaration (type, help, flag) whose default this field sets."""
    if like is not None:
        type, help = like.type, help or like.help
        declared = {
            "flag": like.flag,
            "choices": like.choices,
            "const": like.const,
            "metavar": like.metavar,
            "aliases": like.aliases,
            "role": like.role,
            **declared,
        }
    return dataclasses.field(default=default, metadata={"param": (type, help, declared)})


def params_of(config_class) -> tuple[Param, ...]:
    """The :class:`Param` of each field of ``config_class`` declared with :func:`param`, in field order."""
    found = []
    for f in dataclasses.fields(config_class):
        if "param" in f.metadata:
            kind, text, declared = f.metadata["param"]
            found.append(Param(f.name, kind, f.default, text, **declared))
    return tuple(found)


def check_fields(config, declared: Iterable[Param] | None = None) -> None:
    """Every declared field of ``config`` in its range and choices, each failure one line naming the flag."""
    for p in params_of(type(config)) if declared is None else declared:
        p.check(getattr(config, p.name))


def configure(config_class, values: dict[str, Any], what: str = "the configuration"):
    """``config_class`` from ``values`` (by field name; None: the default), checked once: a name it does not
    declare, a required one missing, or a value out of range is one line (``what`` says whose)."""
    fields = {f.name for f in dataclasses.fields(config_class)}
    if unknown := sorted(set(values) - fields):
        raise UserError(f"option(s) {', '.join(unknown)} do not apply to {what}")
    if missing := [p.option for p in params_of(config_class) if p.required and values.get(p.name) is None]:
        raise UserError(f"{what} needs {', '.join(missing)}")
    config = config_class(**{k: v for k, v in values.items() if v is not None})
    check_fields(config)
    if hasattr(config, "check"):
        config.check()
    return config
