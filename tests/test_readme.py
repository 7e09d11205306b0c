"""README.md's five commands and five lines of Python run as written and print the table it shows.

The blocks are read from README.md by their fences: the ```bash block of "Five commands" (its commands), the
plain block after it (the table they print) and the ```python block of "Five lines of Python". They run on the
shipped SciFact, as the README says, from a scratch directory that links collections/, qrels/ and models/ (the
dense index is built from the committed prebuilt/ vectors, so the whole run takes about 25 s on 2 cores), in
one worker process, as tests/test_tutorial.py runs the tutorial; every number of the table must be printed as
shown. The Python example must print five hits, in the order the TOUR run file ranks the same query.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT
from test_tutorial import check_output, commands, numbers, run_command

README = ROOT / "README.md"
LINKED = ("collections", "qrels", "models")
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)
EXAMPLE_QUERY = "1"  # the SciFact test query the Python example searches


def blocks(text: str) -> tuple[str, str, str]:
    """README's five commands (a bash block), the table they print (the plain block after it) and the Python
    example (the python block that opens a search)."""
    fenced = [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]
    at = next(i for i, (lang, body) in enumerate(fenced) if lang == "bash" and "tour-pyserini eval" in body)
    table = fenced[at + 1]
    assert table[0] == "", "the five commands' block is not followed by the table they print"
    python = next(body for lang, body in fenced if lang == "python" and "build(plan(" in body)
    return fenced[at][1], table[1], python


def run_all(out_json: str) -> None:
    """Run the commands and the Python example from the working directory; write what each printed."""
    shell, _, python = blocks(README.read_text(encoding="utf-8"))
    printed = "".join(run_command(c) for c in commands(shell))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(python, f"{README}:python", "exec"), {"__name__": "__readme__"})
    Path(out_json).write_text(json.dumps({"commands": printed, "python": out.getvalue()}))


def test_the_readme_blocks_are_found():
    shell, table, python = blocks(README.read_text(encoding="utf-8"))
    assert [c.split()[1] for c in commands(shell)] == ["index", "index", "search", "search", "eval"]
    assert len([line for line in table.splitlines() if line.endswith(".trec") or ".trec " in line]) == 2
    assert sum(not approximate for line in table.splitlines() for approximate, _ in numbers(line)) >= 4
    assert "k=5" in python


@pytest.fixture(scope="module")
def printed(tmp_path_factory) -> dict[str, str]:
    """What the commands and the example printed, run in one worker process from a scratch directory (the JVM
    resolves relative paths against the directory it started in)."""
    work = tmp_path_factory.mktemp("readme")
    for name in LINKED:
        (work / name).symlink_to(ROOT / name)
    (work / "runs").mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), str(ROOT / "tests"), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run([sys.executable, __file__, str(work / "printed.json")], cwd=work, env=env, check=False)
    assert done.returncode == 0, "a README command failed (its traceback is above)"
    return {**json.loads((work / "printed.json").read_text()), "work": str(work)}


@pytest.mark.slow
def test_the_readme_commands_print_its_table(printed):
    _, table, _ = blocks(README.read_text(encoding="utf-8"))
    problems = check_output(table, printed["commands"])
    assert not problems, "\n".join(problems)
    row = next(line for line in table.splitlines() if ".trec " in line)
    value = numbers(row)[-1][1]
    changed = table.replace(row, row.replace(value, value[:-1] + str((int(value[-1]) + 1) % 10)))
    assert check_output(changed, printed["commands"]), f"changing {value} in the table went unnoticed"


@pytest.mark.slow
def test_the_readme_python_example_ranks_as_the_tour_run(printed):
    from tour_pyserini.files.runs import read_run

    lines = printed["python"].splitlines()
    assert len(lines) == 5, printed["python"]
    run = read_run(Path(printed["work"]) / "runs" / "tour.trec")[EXAMPLE_QUERY]
    assert [line.split()[0] for line in lines] == list(run)[:5]


if __name__ == "__main__":
    run_all(sys.argv[1])
