"""Speed through torch and the inference runtimes, side by side: each way timed in a process of its own, under each
kernel set, rounds alternating them, each way's best round kept; and each CPU's figures kept apart in a report,
so that a run on one kind of machine does not replace another's.

Kernel sets: "native", the machine's own; "avx2", the variables that lower torch's kernels and OpenVINO's oneDNN
ones (partly): ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2`` (ONNX Runtime's
MLAS kernels pick their instruction set from the processor and have no such switch); and "avx2-cpu", where the
processor can fault on CPUID: every library is told it runs on an AVX2-only CPU (bench/avx2_cpu.c, preloaded), so
each dispatches to the kernels it would run there, ONNX Runtime's included.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


@functools.cache
def cpu_info() -> tuple[str, frozenset[str]]:
    """The processor's model name and its flags, as the kernel lists them."""
    with open("/proc/cpuinfo") as f:
        lines = f.read().splitlines()
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown")
    return name, frozenset(next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), []))


def avx2_cpu_library() -> str | None:
    """bench/avx2_cpu.c built (once, into build/), or None where the processor cannot fault on CPUID."""
    if "cpuid_fault" not in cpu_info()[1]:
        return None
    source, library = ROOT / "bench" / "avx2_cpu.c", ROOT / "build" / "avx2_cpu.so"
    if not library.is_file() or library.stat().st_mtime < source.stat().st_mtime:
        library.parent.mkdir(exist_ok=True)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    return str(library)


def avx2_cpu_preload(library: str) -> str:
    """``LD_PRELOAD`` for an AVX2-only CPU: the JVM's signal-chaining library first (without it, a CPUID run
    after the JVM has taken SIGSEGV over crashed the search command), then ``library``; ``library`` alone where
    no Java 21+ is found (what needs no JVM still runs)."""
    from tour_pyserini._java import JavaNotFoundError, find_java

    try:
        jsig = find_java().home / "lib" / "libjsig.so"
    except JavaNotFoundError:
        return library
    return f"{jsig} {library}" if jsig.is_file() else library


def kernel_sets() -> list[tuple[str, dict]]:
    """(name, environment) of each kernel set this machine can run."""
    library = avx2_cpu_library()
    sets = [("native", {}), ("avx2", AVX2)]
    return sets + ([("avx2-cpu", {"LD_PRELOAD": avx2_cpu_preload(library)})] if library else [])


def best_rounds(
    script: str, ways: Mapping[str, Sequence[str]], rounds: int, metric: str
) -> dict[tuple[str, str], dict]:
    """``python script *ways[way]`` for each way under each kernel set, ``rounds`` times alternating them; the row
    (the child's last line of JSON) with the lowest ``metric`` of each (kernel set, way). A bf16 way runs only
    where the CPU multiplies in bfloat16 natively, and only under its own kernels."""
    from tour_pyserini.devices import native_bf16

    ways = {way: args for way, args in ways.items() if not way.endswith("bf16") or native_bf16("cpu")}
    sets = kernel_sets()
    best: dict[tuple[str, str], dict] = {}
    for _ in range(rounds):
        for kernels, env in sets:
            for way, args in ways.items():
                if kernels != "native" and way.endswith("bf16"):
                    continue
                row = child_row([script, *args], env)
                if (kernels, way) not in best or row[metric] < best[kernels, way][metric]:
                    best[kernels, way] = row
    return best


def child_row(args: Sequence[str], env: Mapping[str, str]) -> dict:
    """``python *args`` in a process of its own under ``env`` (a kernel set's): the last line it prints, as JSON."""
    proc = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, check=True, cwd=ROOT, env={**os.environ, **env}
    )
    return json.loads(proc.stdout.splitlines()[-1])


def each_kernel_set(args: Sequence[str]) -> dict[str, dict]:
    """``python *args`` under each kernel set (:func:`child_row`): kernel set -> the child's row."""
    return {kernels: child_row(args, env) for kernels, env in kernel_sets()}


def peaks_by_kernel_set(threads: int) -> dict[str, dict[str, float]]:
    """bench/peaks.py under each kernel set: kernel set -> arithmetic -> GFLOPS."""
    return each_kernel_set([str(ROOT / "bench" / "peaks.py"), "--threads", str(threads)])


def cpu_name() -> str:
    """The CPU's model name and the widest matrix-product instructions it has: machines sold under one name differ."""
    name, flags = cpu_info()
    isa = next(
        (
            label
            for flag, label in (
                ("amx_bf16", "AMX"),
                ("avx512_bf16", "AVX512-BF16"),
                ("avx512f", "AVX512"),
                ("avx2", "AVX2"),
            )
            if flag in flags
        ),
        "no AVX2",
    )
    return f"{name}, {isa}"


def keep_speed(report: dict, speed: dict) -> None:
    """``speed`` (with its ``cpu``) into ``report["speed"]``, beside the other CPUs' figures, replacing this CPU's."""
    report["speed"] = {**report.get("speed", {}), speed["cpu"]: speed}
