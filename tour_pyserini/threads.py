"""How many OpenMP threads, and how they wait: a default that does not collapse when other processes keep cores
busy.

Torch and Faiss each run an OpenMP pool (libgomp) with a thread per core whose idle threads spin for work.
When another process keeps a core busy, a spinning thread takes time slices from the thread it waits for,
and each parallel region waits for its slowest thread: on 2 cores with one core busy, TOUR with the BM25
teacher ran 3.4x slower than alone. So a command that starts beside busy cores uses the cores left
(``OMP_NUM_THREADS``) and lets idle threads sleep (``OMP_WAIT_POLICY=PASSIVE``); on idle cores it keeps
OpenMP's defaults, the faster there (``make bench``: runs/bench-shared-cores.json, docs/benchmarks.md).
libgomp reads both once, when torch or Faiss is first imported; ``--threads`` still sets the thread count.
"""

from __future__ import annotations

import os
import time

BUSY_CORE = 0.5  # other processes using at least half a core in total make the cores shared


def cpu_ticks() -> tuple[int, int] | None:
    """(busy, total) clock ticks of all cores since boot, from /proc/stat; None where there is none."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def busy_cores(interval: float = 0.05) -> float:
    """Cores other processes kept busy over ``interval`` seconds, which this process sleeps through; 0.0
    where the kernel does not say."""
    before = cpu_ticks()
    time.sleep(interval)
    after = cpu_ticks()
    if before is None or after is None or after[1] == before[1]:
        return 0.0
    return (after[0] - before[0]) / (after[1] - before[1]) * (os.cpu_count() or 1)


def share_cores() -> dict[str, str]:
    """Where other processes keep at least half a core busy and the user has set neither variable: OpenMP
    threads for the cores left, sleeping as they wait. Call before torch or Faiss is imported (every command
    does); returns the variables set."""
    if "OMP_WAIT_POLICY" in os.environ or "OMP_NUM_THREADS" in os.environ:
        return {}
    busy = busy_cores()
    if busy < BUSY_CORE:
        return {}
    cores = os.cpu_count() or 1
    chosen = {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": str(max(1, cores - round(busy)))}
    os.environ.update(chosen)
    return chosen
