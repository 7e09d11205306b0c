"""python -m tour_pyserini.ttt: TTT-Embed's rewards and states.

``rewards``: a teacher judges the base top candidates of a topics file, as many judgments as a budget
allows (task-balanced water-filling), written as a rewards file. ``recycle``: the judgments a search
already paid for (TOUR's or re-ranking's, from its ``--trace`` file), written as a rewards file at no
teacher cost. ``fit``: rewards files -> a state file for one scope (global, task or query), which
``--rewriter ttt-embed --state FILE`` searches with.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from tour_pyserini.commands.flags import (
    ArgumentParser,
    add_param_flags,
    add_teacher_flags,
    config_from_flags,
    teacher_flags,
)
from tour_pyserini.commands.outputs import locked_output
from tour_pyserini.errors import UserError
from tour_pyserini.numbers import non_negative_int, positive_float
from tour_pyserini.ttt.allocation import JUDGE_DEPTH, MAX_DEPTH
from tour_pyserini.ttt.magnitude import AUTO_SCOPE, CROSS_VALIDATED, RANKING_DEPTH, MagnitudeConfig
from tour_pyserini.ttt.neighbours import NeighbourConfig
from tour_pyserini.ttt.objectives import FitConfig
from tour_pyserini.ttt.state import SCOPES


def parser() -> argparse.ArgumentParser:
    ap = ArgumentParser(
        prog="python -m tour_pyserini.ttt", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = ap.add_subparsers(dest="command", required=True)
    rw = commands.add_parser("rewards", help="teacher judgments of the base top candidates under a budget")
    rw.add_argument("--index", required=True, help="dense index the topics are searched in")
    rw.add_argument("--topics", required=True, help="topics file (its queries get rewards)")
    rw.add_argument("--teacher", required=True, metavar="TEACHER", help="bm25, cross-encoder:PATH, oracle:QRELS, ...")
    rw.add_argument("--budget", type=positive_float, required=True, help="judgments per query (b; b x queries in all)")
    rw.add_argument("--output", required=True, help="rewards file to write")
    rw.add_argument("--task", help="task name (default: the index directory's name)")
    rw.add_argument(
        "--task-index", type=non_negative_int, default=0, help="seeds the query order: 1000 + this (default 0)"
    )
    for option in (JUDGE_DEPTH, MAX_DEPTH):
        rw.add_argument(option.option, type=option.type, default=option.default, help=option.described)
    add_teacher_flags(rw)
    rc = commands.add_parser("recycle", help="rewards from the teacher judgments a search recorded in its trace")
    rc.add_argument("--trace", required=True, nargs="+", help="trace files of searches (search --trace)")
    rc.add_argument("--index", required=True, help="the dense index those searches ran on")
    rc.add_argument("--topics", required=True, help="the topics file they searched")
    rc.add_argument("--task", help="task name (default: the index directory's name)")
    rc.add_argument("--output", required=True, help="rewards file to write")
    ft = commands.add_parser("fit", help="fit a state (v per scope key) from rewards files")
    ft.add_argument("--rewards", required=True, nargs="+", help="rewards files (their tasks are pooled)")
    ft.add_argument("--output", required=True, help="state file to write (safetensors)")
    ft.add_argument(
        "--scope",
        required=True,
        choices=(*SCOPES, AUTO_SCOPE),
        help="the scope of the state; auto: of task, global and neighbours, the one whose cross-validated alpha helps "
        "held-out rewarded queries most (alpha by --alpha-rule cv), else query",
    )
    add_param_flags(ft, FitConfig)
    add_param_flags(ft, MagnitudeConfig)
    add_param_flags(ft, NeighbourConfig)
    ft.add_argument(
        "--init",
        metavar="STATE",
        help="warm start: each residual begins at its value in this "
        "state file (same scope and encoder), e.g. the state fitted before the latest rewards",
    )
    return ap


def command_line() -> str:
    """This command as typed, for the provenance of what it writes."""
    return shlex.join(["python", "-m", "tour_pyserini.ttt", *sys.argv[1:]])


def task_name(args: argparse.Namespace) -> str:
    return args.task or Path(args.index).name


def make_rewards(args: argparse.Namespace) -> None:
    from tour_pyserini.files.topics import read_topics
    from tour_pyserini.index.layout import index_kind
    from tour_pyserini.ttt.allocation import allocate

    if index_kind(args.index) != "dense":
        raise UserError(f"--index {args.index} is a BM25 index; rewards are for the candidates of a dense one")
    with locked_output(args.output):
        topics = read_topics(args.topics)
        # task i's order is seeded 1000 + i
        task_qids: list[list[str]] = [[]] * args.task_index + [[t.qid for t in topics]]
        pairs = allocate(task_qids, args.budget, depth=args.depth, max_depth=args.max_depth)
        judge_rewards(args, topics, pairs)


def judge_rewards(args: argparse.Namespace, topics, pairs) -> None:
    from tour_pyserini.pipeline import SearchSpec, build, plan
    from tour_pyserini.ttt.pipeline import judge_rewards
    from tour_pyserini.ttt.rewards import TaskSource, write_rewards

    # the search command's assembly, asking the teacher here: it shares the searcher's encoder and index
    spec = SearchSpec(
        index=args.index,
        teacher=args.teacher,
        teacher_max_length=args.teacher_max_length,
        teacher_precision=args.teacher_precision,
        teacher_options=teacher_flags(args),
    )
    pipeline = build(plan(spec, asks_teacher=True))
    teacher = pipeline.asked_teacher
    source = TaskSource(task_name(args), args.index, args.topics)
    rewards = judge_rewards(pipeline.searcher, teacher, topics, pairs, source, max_depth=args.max_depth)
    provenance = {
        "teacher": args.teacher + (" (oracle: an upper bound, not a system)" if teacher.oracle else ""),
        "budget": str(args.budget),
        "depth": str(args.depth),
        "command": command_line(),
    }
    write_rewards(args.output, rewards, provenance)
    print(
        f"wrote {args.output}: {rewards.num_pairs} judgments of {len(rewards.judgments[source.name])} of "
        f"{len(topics)} queries ({args.teacher})"
    )


def recycle(args: argparse.Namespace) -> None:
    from tour_pyserini.files.topics import read_topics
    from tour_pyserini.index.layout import index_kind
    from tour_pyserini.ttt.rewards import TaskSource, rewards_from_traces, write_rewards

    if index_kind(args.index) != "dense":
        raise UserError(f"--index {args.index} is not a dense index")
    with locked_output(args.output):
        task = task_name(args)
        rewards, teachers = rewards_from_traces(args.trace, TaskSource(task, args.index, args.topics))
        known = {t.qid for t in read_topics(args.topics)}
        if missing := [q for q in rewards.judgments[task] if q not in known]:
            raise UserError(f"query {missing[0]!r} of the traces is not in {args.topics}")
        provenance = {
            "teacher": " + ".join(sorted(teachers)),
            "recycled from": " ".join(args.trace),
            "command": command_line(),
        }
        write_rewards(args.output, rewards, provenance)
    print(
        f"wrote {args.output}: {rewards.num_pairs} judgments of {len(rewards.judgments[task])} queries, "
        f"recycled from {len(args.trace)} trace file(s)"
    )


def fit_command(args: argparse.Namespace) -> None:
    from tour_pyserini.files.topics import read_topics
    from tour_pyserini.index.layout import index_kind
    from tour_pyserini.ttt.rewards import read_rewards

    config = config_from_flags(FitConfig, args)
    magnitude = config_from_flags(MagnitudeConfig, args)
    mixing = config_from_flags(NeighbourConfig, args)
    if args.scope == AUTO_SCOPE and (args.alpha_rule == "count" or args.init):
        raise UserError(
            "--scope auto chooses the scope and its alpha by cross-validation: it takes neither --alpha-rule count "
            "nor --init (a warm start is of one scope)"
        )
    if args.scope not in ("neighbours", AUTO_SCOPE) and (
        args.neighbours is not None or args.neighbour_temperature is not None
    ):
        raise UserError(
            "--neighbours and --neighbour-temperature set how a neighbours state mixes; this fit is of "
            f"the {args.scope} scope"
        )
    if magnitude.alpha_rule in CROSS_VALIDATED and args.scope == "query":
        raise UserError(
            f"--alpha-rule {magnitude.alpha_rule}: a query state moves only its own query, so held-out queries "
            "cannot judge it; cross-validation is for global, task and neighbours states"
        )
    with locked_output(args.output):
        init = read_init(args.init, args.scope) if args.init else None
        rewards = read_rewards(args.rewards)
        texts: dict[str, dict[str, str]] = {}
        for task in rewards.judgments:
            source = rewards.tasks[task]
            if index_kind(source.index) != "dense":
                raise UserError(f"task {task!r}: {source.index} is not a dense index")
            known = {t.qid: t.text for t in read_topics(source.topics)}
            if missing := [q for q in rewards.judgments[task] if q not in known]:
                raise UserError(f"task {task!r}: query {missing[0]!r} of the rewards is not in {source.topics}")
            texts[task] = known
        run_fit(args, config, magnitude, mixing, rewards, texts, init)


def read_init(path: str, scope: str):
    """The state a warm start begins from, checked against the scope being fitted."""
    from tour_pyserini.ttt.state import State

    state = State.load(path)
    if state.scope != scope:
        raise UserError(f"--init {path} holds a {state.scope} state; this fit is of the {scope} scope")
    return state


def run_fit(
    args: argparse.Namespace,
    config: FitConfig,
    magnitude: MagnitudeConfig,
    mixing: NeighbourConfig,
    rewards,
    texts,
    init=None,
) -> None:
    from tour_pyserini.ttt.pipeline import fit_state

    search = task_search(rewards) if magnitude.alpha_rule == "ranking" else None
    state, seconds = fit_state(
        rewards,
        texts,
        args.scope,
        config,
        init=init,
        init_path=args.init,
        magnitude=magnitude,
        mixing=mixing,
        search=search,
    )
    state.save(args.output)
    for scope, choice in state.provenance.get("scope", {}).items():
        if scope != "chosen":
            print(f"{scope} state by cross-validation over the rewarded queries: {choice['summary']}")
    if "magnitude" in state.provenance:
        print(f"alpha by cross-validation over the rewarded queries: {state.provenance['magnitude']['summary']}")
    queries = sum(len(judged) for judged in rewards.judgments.values())
    print(
        f"wrote {args.output}: {state.scope} state, {len(state.keys)} residual(s) from {queries} rewarded queries "
        f"and {rewards.num_pairs} judgments ({config.objective}, fitted in {seconds:.2f} s)"
    )


def task_search(rewards):
    """What the ranking rule re-searches: each task's own dense index, its top ``RANKING_DEPTH`` docids."""
    from functools import cache

    from tour_pyserini.pipeline import SearchSpec, build, plan

    @cache
    def searcher(task: str):
        return build(plan(SearchSpec(rewards.tasks[task].index))).searcher

    def search(task: str, vectors):
        return [[h.docid for h in hits] for hits in searcher(task).search_vectors(vectors, RANKING_DEPTH)]

    return search


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    if args.command == "rewards":
        make_rewards(args)
    elif args.command == "recycle":
        recycle(args)
    else:
        fit_command(args)
