"""What the declaration files (collections, regressions, experiments: one YAML file each, found by name) share:
reading one whole and checking its fields, finding one by name, and the command-line flags they hold."""

from __future__ import annotations

import shlex
from pathlib import Path

from tour_pyserini.errors import UserError

SUFFIX = ".yaml"


def shown(path: str | Path) -> str:
    """A path as a user would type it here: relative to the working directory where it lies below it."""
    path = Path(path)
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def declaration_names(directory: Path) -> list[str]:
    return sorted(p.stem for p in directory.glob(f"*{SUFFIX}"))


def find_declaration(name_or_path: str, directory: Path, kind: str) -> Path:
    """The file of a declaration given by file or by name (``DIRECTORY/NAME.yaml``)."""
    path = Path(name_or_path)
    if not path.is_file():
        path = directory / f"{name_or_path}{SUFFIX}"
    if not path.is_file():
        known = ", ".join(declaration_names(directory)) or "none"
        raise UserError(f"unknown {kind} {name_or_path!r}; the {kind}s in {directory}/: {known}")
    return path


def read_declaration(path: Path, fields: set[str]) -> dict:
    """The mapping a declaration file holds (:func:`read_mapping`), with a ``name`` that is its file's."""
    raw = read_mapping(path, fields)
    if raw.get("name") != path.stem:
        raise UserError(f"{path}: name {raw.get('name')!r} is not its file's ({path.stem!r}): a name finds its file")
    return raw


def read_mapping(path: Path, fields: set[str]) -> dict:
    """The mapping a YAML file holds, with only ``fields`` and no key twice in a mapping (YAML would keep the last
    silently); one line naming the file (and the line) where it is not."""
    import yaml

    class UniqueKeys(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                if key in seen:
                    raise yaml.constructor.ConstructorError(None, None, f"key {key!r} given twice", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep)

    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=UniqueKeys)
    except yaml.MarkedYAMLError as e:
        line = f":{e.problem_mark.line + 1}" if e.problem_mark else ""
        raise UserError(f"{path}{line}: {e.problem}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        raise UserError(f"{path}: not a readable YAML file ({type(e).__name__})") from None
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a mapping with {', '.join(sorted(fields))} was expected")
    if unknown := sorted(set(raw) - fields):
        raise UserError(f"{path}: unknown field {unknown[0]!r}")
    return raw


def command_flags(value: object, where: str, given: tuple[str, ...]) -> tuple[str, ...]:
    """The flags of a command line, as typed, without ``given``: those the runner sets itself."""
    if not isinstance(value, str):
        raise UserError(f"{where}: flags are one string, as typed on the command line; got {value!r}")
    try:
        flags = tuple(shlex.split(value))
    except ValueError as e:
        raise UserError(f"{where}: {e}") from None
    if ours := [f for f in flags if f.split("=")[0] in given]:
        raise UserError(f"{where}: {ours[0]} is the runner's to set ({', '.join(given)})")
    return flags


def read_tolerance(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 1:
        raise UserError(f"{where}: tolerance must be a number in [0, 1), got {value!r}")
    return float(value)
