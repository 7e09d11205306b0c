"""The runner's timing mode: every way of a timing file run as a command of its own, side by side in one run.

Each way first runs once untimed (page cache, the JVM's classes, an exported graph). Then ``rounds`` rounds run
every way once under each kernel set, the ways' order reversed every other round, each command in a fresh process
with that kernel set's environment; a way's figures are the medians over rounds. A command during which other
processes kept more than ``SHARED_CORES`` of a core busy is run again (up to ``TRIES`` times) and, if the cores
stay shared, kept and marked: a benchmark's ratios mean something only on idle cores. Beside each encoding, its
floor: the query encoder's FLOPs on the queries' real tokens over the matrix-product peak measured in each round
under the same kernel set (:mod:`tour_pyserini.experiments.floors`).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tour_pyserini.devices import cpu_name, cpu_ticks
from tour_pyserini.files.timings import RUN_OF, Timing, Way
from tour_pyserini.results import PHASES

log = logging.getLogger(__name__)

SHARED_CORES = 0.2  # other processes' mean busy cores above which a command's time is not kept without a try again
TRIES = 3
CHILD_ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


@dataclass(frozen=True)
class Measured:
    """One command's run: its wall and CPU seconds, the cores others kept busy, and (a search) its traced time."""

    seconds: float
    cpu_seconds: float
    others_cores: float
    ms_per_query: float | None = None
    phases: dict[str, float] = field(default_factory=dict)  # ms a query by phase

    @property
    def shared(self) -> bool:
        return self.others_cores > SHARED_CORES


def run_timed(argv: Sequence[str], env: Mapping[str, str]) -> tuple[float, float, float]:
    """Run ``argv`` to its end: (wall seconds, its CPU seconds, the mean cores other processes kept busy meanwhile).
    A command that fails stops the benchmark with its last lines of stderr."""
    ticks_per_second = os.sysconf("SC_CLK_TCK")
    before, start = cpu_ticks(), time.perf_counter()
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            list(argv), env={**os.environ, **CHILD_ENV, **env}, stdout=subprocess.DEVNULL, stderr=err
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            err.seek(0)
            tail = err.read().decode(errors="replace")[-3000:]
            raise RuntimeError(f"a timed command failed ({proc.returncode}): {shlex.join(argv)}\n{tail}")
    after = cpu_ticks()
    cpu = usage.ru_utime + usage.ru_stime
    busy = (after[0] - before[0]) / ticks_per_second if before and after else cpu
    return wall, cpu, max(0.0, busy - cpu) / wall


def traced_ms(trace: Path, skip: int) -> tuple[float, dict[str, float]]:
    """Milliseconds a query (and by phase) from a search's traces, its first ``skip`` queries (a batch) left out."""
    records = [json.loads(line) for line in trace.read_text().splitlines()][skip:] or [{}]
    phases = {p: 1000 * sum(r.get("seconds", {}).get(p, 0.0) for r in records) / len(records) for p in PHASES}
    return sum(phases.values()), phases


class TimingRun:
    """One timing file's commands: their queries written once, their outputs in a scratch directory."""

    def __init__(
        self, timing: Timing, scratch: Path, batch_sizes: Mapping[str, int], threads: int, encoder: str | None = None
    ):
        from tour_pyserini.files import read_topics

        self.timing, self.scratch, self.batch_sizes, self.threads = timing, scratch, batch_sizes, threads
        topics = read_topics(timing.collection.split(timing.split).topics)[: timing.queries]
        self.qids = [t.qid for t in topics]
        self.topics = scratch / "topics.tsv"
        self.topics.write_text("".join(f"{t.qid}\t{t.text}\n" for t in topics))
        self.texts = [t.text for t in topics]
        self.given_encoder = encoder  # what {encoder} stands for, where not the index's (a dry run shows the name)

    @functools.cached_property
    def encoder(self) -> str:
        """The index's query encoder's directory (read from the index: only once it is built)."""
        from tour_pyserini.index.query_side import query_encoder_spec

        return self.given_encoder or str(query_encoder_spec(self.timing.index).path)

    def topics_of(self, path: Path) -> list:
        """The timed queries as ``path`` holds them (with their answer strings, where it has them)."""
        from tour_pyserini.files import read_topics

        qids = set(self.qids)
        return [t for t in read_topics(path) if t.qid in qids]

    def output(self, way: Way, kernels: str) -> Path:
        return self.scratch / f"{way.name}.{kernels}.{'trec' if way.writes_run else 'jsonl'}"

    def argv(self, way: Way, kernels: str, untimed: bool = False) -> list[str]:
        t, out = self.timing, self.output(way, kernels)
        flags = [RUN_OF.sub(lambda m: str(self.scratch / f"{m[1]}.warm.trec"), f) for f in way.flags]
        if any("{encoder}" in f for f in flags):
            flags = [f.replace("{encoder}", self.encoder) for f in flags]
        if untimed:
            out = self.scratch / f"{way.name}.warm.{out.suffix[1:]}"
        out.unlink(missing_ok=True)
        where = ["--index", t.index, "--topics", str(self.topics), "--output", str(out)]
        if way.command == "pyserini":
            return [sys.executable, "-m", "tour_pyserini", "run-pyserini", "pyserini.search.faiss", *where, *flags]
        if way.command == "answer":
            return [sys.executable, "-m", "tour_pyserini.answer", *where, *flags]
        trace = out.with_suffix(".trace")
        trace.unlink(missing_ok=True)
        return [sys.executable, "-m", "tour_pyserini.search", *where, "--trace", str(trace), *t.search, *flags]

    def measure(self, way: Way, kernels: str) -> Measured:
        env = self.timing.kernels[kernels]
        for _ in range(TRIES):
            argv = self.argv(way, kernels)
            seconds, cpu, others = run_timed(argv, env)
            trace = self.output(way, kernels).with_suffix(".trace")
            traced = traced_ms(trace, self.batch_sizes[way.name]) if way.traced else (None, {})
            measured = Measured(seconds, cpu, others, *traced)
            if not measured.shared:
                break
            log.warning("%s (%s): other processes kept %.2f cores busy; timed again", way.name, kernels, others)
        return measured

    def peaks(self, kernels: str) -> dict[str, float]:
        code = (
            f"import json; from tour_pyserini.experiments.floors import peaks; print(json.dumps(peaks({self.threads})))"
        )
        argv = [sys.executable, "-c", code]
        env = {**os.environ, **CHILD_ENV, **self.timing.kernels[kernels]}
        return json.loads(subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout)


def encoder_floor(index: str, texts: Sequence[str]) -> dict:
    """The index's query encoder's mean GFLOP and real tokens a query over ``texts``."""
    from transformers import AutoConfig, AutoTokenizer

    from tour_pyserini.index.query_side import query_encoder_spec

    path = query_encoder_spec(index).path
    config, tokenizer = AutoConfig.from_pretrained(path), AutoTokenizer.from_pretrained(path)
    from tour_pyserini.experiments.floors import encoder_gflop

    tokens = [len(ids) for ids in tokenizer(list(texts), truncation=True)["input_ids"]]
    layers, hidden, inner = config.num_hidden_layers, config.hidden_size, config.intermediate_size
    return {
        "gflop_per_query": encoder_gflop(layers, hidden, inner, tokens),
        "tokens_per_query": sum(tokens) / len(tokens),
    }


def run_timing(timing: Timing, scratch: Path, batch_sizes: Mapping[str, int], threads: int) -> dict:
    """Every way of ``timing`` untimed once, then ``timing.rounds`` rounds; the report's figures (:func:`summarise`)."""
    from tqdm import tqdm

    run = TimingRun(timing, scratch, batch_sizes, threads)
    first = next(iter(timing.kernels))
    pairs = [(k, w) for k in timing.kernels for w in timing.ways.values() if k in w.kernels]
    measured: dict[tuple[str, str], list[Measured]] = {(k, w.name): [] for k, w in pairs}
    peaks: dict[str, list[dict[str, float]]] = {k: [] for k in timing.kernels}
    with tqdm(total=len(timing.ways) + timing.rounds * len(pairs), desc=timing.name, unit="command") as bar:
        for way in timing.ways.values():
            bar.set_postfix_str(f"{way.name} (untimed)")
            run_timed(run.argv(way, first, untimed=True), timing.kernels[first])
            bar.update()
        for i in range(timing.rounds):
            for kernels in timing.kernels:
                peaks[kernels].append(run.peaks(kernels))
            for kernels, way in pairs if i % 2 == 0 else pairs[::-1]:
                bar.set_postfix_str(f"round {i + 1}: {way.name} ({kernels})")
                measured[kernels, way.name].append(run.measure(way, kernels))
                bar.update()
    return summarise(timing, run, measured, peaks)


def encoder_precision(way: Way) -> str:
    """The query encoder's precision a search way asks for (``auto`` means float32 for the encoder)."""
    flags = list(way.flags)
    return flags[flags.index("--encoder-precision") + 1] if "--encoder-precision" in flags else "fp32"


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def summarise(
    timing: Timing, run: TimingRun, measured: dict[tuple[str, str], list[Measured]], peaks: dict[str, list[dict]]
) -> dict:
    """The report: each way's medians under each kernel set, its encoding against the floor, each comparison."""
    peak = {k: {a: max(p[a] for p in ps) for a in ps[0]} for k, ps in peaks.items()}
    floor = encoder_floor(timing.index, run.texts)
    floor_ms = {k: {a: floor["gflop_per_query"] / g * 1000 for a, g in at.items()} for k, at in peak.items()}
    metrics = way_metrics(timing, run, [key for key in measured if timing.ways[key[1]].writes_run])
    metrics |= answer_metrics(timing, run, [key for key in measured if not timing.ways[key[1]].writes_run])
    ways = []
    for (kernels, name), ms in measured.items():
        way = timing.ways[name]
        row: dict = {
            "kernels": kernels,
            "way": name,
            "command": shlex.join(["tour-pyserini" if way.command != "pyserini" else "run-pyserini", *way.flags]),
            "seconds": median([m.seconds for m in ms]),
            "cpu_seconds": median([m.cpu_seconds for m in ms]),
            "shared": sum(m.shared for m in ms),
            "metrics": metrics.get((kernels, name), {}),
        }
        if way.traced:
            row["ms_per_query"] = median([m.ms_per_query or 0.0 for m in ms])
            row["phases"] = {p: median([m.phases[p] for m in ms]) for p in PHASES}
            arithmetic = "bf16" if encoder_precision(way) == "bf16" and "bf16" in floor_ms[kernels] else "fp32"
            row["encode_times_floor"] = row["phases"]["encode"] / floor_ms[kernels][arithmetic]
        ways.append(row)
    return {
        "cpu": cpu_name(),
        "title": timing.title,
        "collection": timing.collection.name,
        "queries": len(run.qids),
        "rounds": timing.rounds,
        "threads": run.threads,
        "peak_gflops": peak,
        "floor": {**floor, "ms_per_query": floor_ms},
        "ways": ways,
        "compare": compare(timing, run, ways),
    }


def way_metrics(timing: Timing, run: TimingRun, keys: list[tuple[str, str]]) -> dict[tuple[str, str], dict]:
    """Each run-writing way's metrics, from the run its last round wrote, over the timed queries."""
    from tour_pyserini.experiments.runner import split_judge
    from tour_pyserini.files import read_qrels
    from tour_pyserini.files.runs import read_run
    from tour_pyserini.index.docstore import DocStore
    from tour_pyserini.index.layout import DOCSTORE_FILE

    files = timing.collection.split(timing.split)
    qrels = read_qrels(files.qrels) if files.qrels else None
    docstore = None if qrels else DocStore(Path(timing.index) / DOCSTORE_FILE)  # where answers are looked for
    judge = split_judge(qrels, list(timing.collection.metrics), run.topics_of(files.topics), docstore)
    out = {}
    for kernels, name in keys:
        per_query = judge.per_query(read_run(run.output(timing.ways[name], kernels)))
        out[kernels, name] = {m: sum(v.values()) / len(v) for m, v in per_query.items()}
    return out


def answer_metrics(timing: Timing, run: TimingRun, keys: list[tuple[str, str]]) -> dict[tuple[str, str], dict]:
    """Each answer way's exact match and token F1, from the predictions its last round wrote."""
    from tour_pyserini.eval.exact_match import evaluate_predictions
    from tour_pyserini.files.predictions import read_predictions

    if not keys:
        return {}
    topics = run.topics_of(timing.collection.split(timing.split).topics)
    out = {}
    for kernels, name in keys:
        evaluation = evaluate_predictions(read_predictions(run.output(timing.ways[name], kernels)), topics)
        out[kernels, name] = dict(evaluation.means)
    return out


def compare(timing: Timing, run: TimingRun, ways: list[dict]) -> list[dict]:
    """Each comparison under each kernel set both its ways ran under: its ratio, runs and metrics, checked."""
    from tour_pyserini.files.runs import read_run
    from tour_pyserini.files.sameness import diff_runs

    rows = {(r["kernels"], r["way"]): r for r in ways}
    out = []
    for c in timing.compare.values():
        for kernels in timing.kernels:
            if (kernels, c.way) not in rows or (kernels, c.against) not in rows:
                continue
            a, b = rows[kernels, c.way], rows[kernels, c.against]
            key = "ms_per_query" if c.time == "query" else "seconds"
            entry: dict = {"name": c.name, "kernels": kernels, "way": c.way, "against": c.against, "time": c.time}
            entry["ratio"] = a[key] / b[key]
            checks = []
            if c.at_most is not None:
                entry["at_most"] = c.at_most
                checks.append(entry["ratio"] <= c.at_most)
            if c.same_run:
                diff = diff_runs(
                    read_run(run.output(timing.ways[c.way], kernels)),
                    read_run(run.output(timing.ways[c.against], kernels)),
                )
                entry["same_run"] = diff.summary()
                checks.append(diff.same)
            if c.metric is not None and c.within is not None:
                entry["metric"], entry["within"] = c.metric, c.within
                entry["difference"] = a["metrics"][c.metric] - b["metrics"][c.metric]
                checks.append(abs(entry["difference"]) <= c.within)
            entry["ok"] = all(checks)
            out.append(entry)
    return out
