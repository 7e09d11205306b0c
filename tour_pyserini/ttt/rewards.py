"""Rewards files: teacher judgments of (query, document) pairs, whatever produced them.

One tab-separated judgment per line, ``qid<TAB>docid<TAB>reward<TAB>task``; a reward is any finite
number on the teacher's own scale (fitting maps each query's rewards to [0, 1]). Lines starting with
``#`` are the header: ``# task: NAME<TAB>INDEX<TAB>TOPICS`` declares each task, the dense index whose
vectors the judged documents have and the topics file that holds its queries' texts; every other
``# key: value`` line is provenance (teacher, budget, command) and is copied into fitted states.

    # task: scifact	indexes/scifact.minilm	collections/scifact/topics.test.tsv
    # teacher: bm25
    4983	1234	17.25	scifact

``python -m tour_pyserini.ttt rewards`` writes such files from a teacher, ``ttt recycle`` from the
judgments a search already paid for (its ``--trace`` file); clicks or an external judge only need the
same four columns and the task lines.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.files.lines import parse_finite, text_lines

HEADER = "# ttt-embed rewards: qid<TAB>docid<TAB>reward<TAB>task"


@dataclass(frozen=True)
class TaskSource:
    """Where a task's queries and document vectors are."""

    name: str
    index: str
    topics: str


@dataclass
class Rewards:
    """Judgments by task, then qid, then docid, in file order; declared tasks; provenance by file."""

    tasks: dict[str, TaskSource] = field(default_factory=dict)
    judgments: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    provenance: dict[str, dict[str, str]] = field(default_factory=dict)

    def add(self, task: str, qid: str, docid: str, reward: float) -> None:
        self.judgments.setdefault(task, {}).setdefault(qid, {})[docid] = reward

    @property
    def num_pairs(self) -> int:
        return sum(len(docs) for queries in self.judgments.values() for docs in queries.values())


def read_rewards(paths: list[str | Path]) -> Rewards:
    """The judgments of one or more rewards files; a malformed line raises a UserError naming file and line."""
    rewards = Rewards()
    for path in map(Path, paths):
        if not path.is_file():
            raise UserError(f"rewards file {str(path)!r} does not exist")
        info = rewards.provenance.setdefault(str(path), {})
        seen: set[tuple[str, str, str]] = set()
        for lineno, line in text_lines(path):
            line = line.rstrip("\r\n")
            where = f"{path}:{lineno}"
            if line.startswith("#"):
                key, sep, value = line[1:].partition(":")
                key, value = key.strip(), value.strip()
                if key == "task":
                    declare_task(rewards, value.split("\t"), where)
                elif sep and key:
                    info[key] = value
                continue
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != 4:
                raise UserError(f"{where}: expected 'qid<TAB>docid<TAB>reward<TAB>task', found {len(fields)} fields")
            qid, docid, value, task = fields
            reward = parse_finite(value, where, "reward")
            if task not in rewards.tasks:
                raise UserError(
                    f"{where}: task {task!r} is not declared by a '# task: {task}<TAB>INDEX<TAB>TOPICS' line above it"
                )
            if (task, qid, docid) in seen:
                raise UserError(f"{where}: a second reward for query {qid!r}, document {docid!r}")
            seen.add((task, qid, docid))
            rewards.add(task, qid, docid, reward)
    if not rewards.num_pairs:
        raise UserError(f"no rewards in {', '.join(map(str, paths))}")
    return rewards


def declare_task(rewards: Rewards, fields: list[str], where: str) -> None:
    if len(fields) != 3 or not all(f.strip() for f in fields):
        raise UserError(f"{where}: a task line is '# task: NAME<TAB>INDEX<TAB>TOPICS'")
    source = TaskSource(*(f.strip() for f in fields))
    known = rewards.tasks.get(source.name)
    if known is not None and known != source:
        raise UserError(f"{where}: task {source.name!r} was declared before with another index or topics")
    rewards.tasks[source.name] = source


def write_rewards(path: str | Path, rewards: Rewards, provenance: dict[str, str]) -> None:
    """Write ``rewards`` with ``provenance`` as its header, atomically (nothing is left half-written)."""
    path = Path(path)
    lines = [HEADER]
    lines += [f"# task: {t.name}\t{t.index}\t{t.topics}" for t in rewards.tasks.values()]
    lines += [f"# {key}: {value}" for key, value in provenance.items()]
    for task, queries in rewards.judgments.items():
        for qid, docs in queries.items():
            lines += [f"{qid}\t{docid}\t{float(reward)!r}\t{task}" for docid, reward in docs.items()]
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def rewards_from_traces(paths: list[str | Path], source: TaskSource) -> tuple[Rewards, set[str]]:
    """The teacher judgments recorded in search traces (``--trace`` JSON lines, one query each), as rewards
    of task ``source``, and the teacher labels the traces name. A query found twice keeps every judgment,
    the later score of a repeated pair winning. A malformed line raises a UserError naming file and line."""
    rewards, teachers = Rewards(tasks={source.name: source}), set()
    for path in map(Path, paths):
        if not path.is_file():
            raise UserError(f"trace file {str(path)!r} does not exist")
        for lineno, line in text_lines(path):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                qid, judged = str(record["qid"]), record.get("judgments") or {}
                scores = {str(d): parse_finite(str(v), f"{path}:{lineno}", "judgment") for d, v in judged.items()}
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError):
                raise UserError(f"{path}:{lineno}: not a trace record (a JSON object with a qid)") from None
            for docid, score in scores.items():
                rewards.add(source.name, qid, docid, score)
            if scores:
                teachers.add(str(record.get("teacher")))
    if not rewards.num_pairs:
        raise UserError(
            f"no teacher judgments in {', '.join(map(str, paths))}: only searches whose rewriter asks a "
            "teacher (rerank, tour-*) record them"
        )
    return rewards, teachers
