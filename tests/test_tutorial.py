"""docs/tutorial.md runs as written and prints what it shows.

Every ```bash and ```python block of the tutorial is run in order, from a scratch directory that links the
repository's collections/, qrels/ and models/ (indexes/ and runs/ start empty). ``python -m tour_pyserini.X``
and ``tour-pyserini X`` commands run in one worker process (the JVM and the models load once); other shell
commands run in bash; python blocks share one namespace. The ```text block that follows a command block
(before the next command block) is what that block must print on stdout: each of its lines must appear,
in order, in the real output, with every number equal as printed, except numbers written ``~N``
(timings, memory), which are not compared. A line ``...`` stands for lines left out. A block preceded by
``<!-- not run: REASON -->`` is shown, not run.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import ROOT

TUTORIAL = ROOT / "docs" / "tutorial.md"
LINKED = ("collections", "qrels", "models")
FENCE = re.compile(r"^(<!-- not run: [^\n]*-->\n+)?```(\w*)\n(.*?)^```\n", re.M | re.S)
NUMBER = re.compile(r"(~?)(-?\d+(?:\.\d+)?(?:e-?\d+)?)")


@dataclass
class Step:
    line: int  # of the block's fence in tutorial.md
    lang: str  # "bash" or "python"
    code: str
    expected: str | None = None


def parse(text: str) -> list[Step]:
    """The blocks to run, each with the output block that follows it."""
    steps: list[Step] = []
    for m in FENCE.finditer(text):
        not_run, lang, body = m.groups()
        line = text.count("\n", 0, m.start(2)) + 1
        if lang in ("bash", "python"):  # one shown but not run takes the output block after it
            steps.append(Step(line, "shown" if not_run else lang, body))
        elif lang == "text" and steps and steps[-1].expected is None and not not_run:
            steps[-1].expected = body
    return [s for s in steps if s.lang != "shown"]


def template(line: str) -> str:
    return " ".join(NUMBER.sub("#", line).split())


def numbers(line: str) -> list[tuple[bool, str]]:
    return [(bool(tilde), value) for tilde, value in NUMBER.findall(line)]


def check_output(expected: str, actual: str) -> list[str]:
    """What the expected block shows that the real output does not (empty when they agree)."""
    problems = []
    lines, at = actual.splitlines(), 0
    for want in expected.splitlines():
        if not want.strip() or want.strip() == "...":
            continue
        shape = template(want)
        match = next((j for j in range(at, len(lines)) if template(lines[j]) == shape), None)
        if match is None:
            problems.append(f"not printed (in this order): {want.strip()!r}")
            continue
        at = match + 1
        for (approximate, value), (_, got) in zip(numbers(want), numbers(lines[match])):
            if not approximate and value != got:
                problems.append(f"{want.strip()!r}: printed {got} where the tutorial shows {value}")
    return problems


def commands(code: str) -> list[str]:
    """A bash block's commands: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\s*\\\n\s*", " ", code)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def run_command(command: str) -> str:
    argv = shlex.split(command, comments=True)
    if argv[0] == "tour-pyserini" or argv[:3] == ["python", "-m", "tour_pyserini"]:
        from tour_pyserini.commands import main

        args = argv[1:] if argv[0] == "tour-pyserini" else argv[3:]
    elif argv[:2] == ["python", "-m"] and argv[2].startswith("tour_pyserini."):
        name = argv[2]
        spec = importlib.util.find_spec(name)
        module = importlib.import_module(f"{name}.__main__" if spec.submodule_search_locations else name)
        main, args = module.main, argv[3:]
    else:
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"{command!r} failed: {done.stderr}"
        return done.stdout
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(args)
    return out.getvalue()


def run_step(step: Step, namespace: dict) -> str:
    if step.lang == "python":
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(step.code, f"{TUTORIAL}:{step.line}", "exec"), namespace)
        return out.getvalue()
    return "".join(run_command(c) for c in commands(step.code))


def run_all(out_json: str) -> None:
    """Run every step from the working directory and write what each printed (the fixture's worker)."""
    namespace: dict = {"__name__": "__tutorial__"}
    steps = parse(TUTORIAL.read_text(encoding="utf-8"))
    Path(out_json).write_text(json.dumps([run_step(step, namespace) for step in steps]))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> list[tuple[Step, str]]:
    """Every step of the tutorial with what it printed, run from a scratch directory.

    One worker process runs them all: the JVM resolves relative paths against the directory it started
    in, so the steps cannot run in a test process whose JVM already started elsewhere.
    """
    work = tmp_path_factory.mktemp("tutorial")
    for name in LINKED:
        (work / name).symlink_to(ROOT / name)
    (work / "runs").mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, __file__, str(work / "outputs.json")], cwd=work, env=env, check=False)
    assert done.returncode == 0, "a tutorial step failed (its traceback is above)"
    printed = json.loads((work / "outputs.json").read_text())
    return list(zip(parse(TUTORIAL.read_text(encoding="utf-8")), printed))


@pytest.mark.slow
def test_the_tutorial_prints_every_number_it_shows(outputs):
    problems = [
        f"docs/tutorial.md:{step.line}: {p}"
        for step, actual in outputs
        if step.expected
        for p in check_output(step.expected, actual)
    ]
    assert not problems, "\n".join(problems)
    assert sum(step.expected is not None for step, _ in outputs) >= 9


@pytest.mark.slow  # it reads the tutorial's run (about 100 s)
def test_a_changed_number_in_the_tutorial_fails(outputs):
    """Each output block fails the check once any one of its compared numbers is changed."""
    checked = 0
    for step, actual in outputs:
        for i, line in enumerate((step.expected or "").splitlines()):
            for approximate, value in numbers(line):
                if approximate:
                    continue
                changed = value[:-1] + str((int(value[-1]) + 1) % 10)
                lines = step.expected.splitlines()
                lines[i] = line.replace(value, changed, 1)
                assert check_output("\n".join(lines), actual), f"line {step.line}: changing {value} went unnoticed"
                checked += 1
                break
    assert checked >= 10


def test_the_checker_reads_blocks_and_numbers():
    text = (
        "intro\n```bash\npython -m x \\\n    --a 1  # note\n```\nprints\n```text\nnDCG@10 0.6451 ~1.2 s\n```\n"
        "<!-- not run: slow -->\n```bash\nmake bench\n```\n```text\nignored 1\n```\n```python\nprint(2)\n```\n"
    )
    steps = parse(text)
    assert [(s.lang, s.expected) for s in steps] == [("bash", "nDCG@10 0.6451 ~1.2 s\n"), ("python", None)]
    assert commands(steps[0].code) == ["python -m x --a 1  # note"]
    assert check_output("nDCG@10 0.6451 ~1.2 s", "noise\nnDCG@10 0.6451 9.9 s\n") == []
    assert check_output("nDCG@10 0.6451 ~1.2 s", "nDCG@10 0.6452 1.2 s") != []
    assert check_output("a 1\n...\nb 2", "b 2\na 1") != []  # order matters


if __name__ == "__main__":
    run_all(sys.argv[1])
