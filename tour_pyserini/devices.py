"""Where and how the models compute: the torch device of the query encoder and model-based teachers, their
precision, and the CPU threads a command takes.

Threads: a default that does not collapse when other processes keep cores busy, and that never changes the
arithmetic. Torch and Faiss each run an OpenMP pool (libgomp) with a thread per core whose idle threads spin for
work. When another process keeps a core busy, a spinning thread takes time slices from the thread it waits for:
on 2 cores with one core busy, TOUR with the BM25 teacher ran 3 to 4x slower than alone. So a command that
starts beside busy cores lets idle threads sleep (``OMP_WAIT_POLICY=PASSIVE``): 1.9x instead
(runs/bench-shared-cores.json, docs/benchmarks.md). It keeps the thread count, although one thread fewer would
be about 10% faster there: a matrix product split over another number of threads rounds differently, and a
command's output must not depend on what else the machine runs (a search resumed beside a busy core would
differ from its first half). libgomp reads the policy once, when torch or Faiss is first imported;
``--threads`` sets the thread count.
"""

from __future__ import annotations

import functools
import os
import time

from tour_pyserini.errors import UserError

DEVICES = ("cpu", "cuda")


def check_device(device: str) -> str:
    """``cpu``, ``cuda`` or ``cuda:N``; a GPU that is not there is the user's error, named before any model loads."""
    kind, _, number = device.partition(":")
    if kind not in DEVICES or (number and (kind != "cuda" or not number.isdigit())):
        raise UserError(f"--device must be cpu, cuda or cuda:N, got {device!r}")
    if kind == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise UserError(f"--device {device}: this torch build ({torch.__version__}) sees no CUDA device")
        if number and int(number) >= torch.cuda.device_count():
            raise UserError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) present")
    return device


# fp32: float32 throughout; bf16: a model's matrix products in bfloat16 (autocast), about twice as fast
# where the hardware multiplies in bfloat16; auto: bf16 where torch runs native bfloat16 kernels, else fp32
PRECISIONS = ("auto", "fp32", "bf16")
DEFAULT_PRECISION = "auto"


def check_precision(precision: str, flag: str = "precision") -> str:
    if precision not in PRECISIONS:
        raise UserError(f"{flag} {precision!r}: choose one of {', '.join(PRECISIONS)}")
    return precision


def cpu_kernels() -> str:
    """The CPU kernel set torch dispatches to (``AVX512``, ``AVX2``, ``DEFAULT``, ...), which
    ``ATEN_CPU_CAPABILITY`` can lower below what the processor has."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


def native_bf16(device: str) -> bool:
    """Whether torch multiplies in bfloat16 natively on ``device``: a CUDA GPU that supports it, or a CPU
    whose bfloat16 units (AVX512-BF16 or AMX) torch's dispatched kernels use (the AVX512 set), and on which
    a bfloat16 forward pass runs (:func:`bf16_runs`)."""
    import torch

    if torch.device(device).type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    # the processor's units as torch (cpuinfo) sees them; the kernels must be the set that uses them
    units = any(
        getattr(torch.cpu, name, lambda: False)() for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    )
    return units and cpu_kernels() == "AVX512" and bf16_runs(device)


def exact_int8() -> bool:
    """Whether the CPU sums 8-bit products in 32 bits (VNNI: AVX512-VNNI or AVX-VNNI), as ONNX Runtime's int8
    kernels then do. Without it their AVX2 kernel adds pairs of 8-bit products in 16 bits, which saturate: the
    same int8 graph scores otherwise there (by up to 0.2 of a cross-encoder's logit)."""
    import torch

    capabilities = torch.cpu.get_capabilities()  # the processor as CPUID describes it (cpuinfo)
    return bool(capabilities.get("avx512_vnni") or capabilities.get("avx_vnni"))


@functools.cache
def bf16_runs(device: str) -> bool:
    """A tiny probe: a linear layer and attention under bfloat16 autocast, forward and backward. Torch's
    lower kernel sets fail on some bfloat16 paths of processors with AMX (``pack_vnni2 is only supported
    when avx512 is supported``), so what runs is asked of torch, not read from the processor's flags."""
    import torch

    kind = torch.device(device).type
    try:
        rng = torch.Generator(device).manual_seed(0)  # the global generator (a seeded training's) is left alone
        x = torch.randn(2, 4, 80, 64, generator=rng, device=device, requires_grad=True)
        weight = torch.randn(64, 64, generator=rng, device=device)
        with torch.autocast(kind, dtype=torch.bfloat16):
            h = torch.nn.functional.linear(x, weight)
            out = torch.nn.functional.scaled_dot_product_attention(h, h, h)
        out.float().sum().backward()
    except RuntimeError:
        return False
    return True


def resolve_precision(precision: str, device: str, flag: str = "precision") -> str:
    """The arithmetic a precision setting means on ``device``: ``auto`` becomes bf16 or fp32; an explicit
    bf16 that torch cannot run natively there is the user's error, in one line, before any model loads."""
    if check_precision(precision, flag) == "auto":
        return "bf16" if native_bf16(device) else "fp32"
    if precision == "bf16" and not native_bf16(device):
        where = f"{device}" if device != "cpu" else f"this CPU (torch runs its {cpu_kernels()} kernels here)"
        raise UserError(
            f"{flag} bf16: torch has no native bfloat16 arithmetic on {where}; emulated it is "
            "slower than fp32 and some kernels fail: use fp32 or auto"
        )
    return precision


BUSY_CORE = 0.5  # other processes using at least half a core in total make the cores shared


@functools.cache
def cpu_name() -> str:
    """The CPU's model name and the widest matrix-product instructions it has (machines sold under one name differ:
    a speed figure is the CPU's it was measured on)."""
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return "unknown"
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), "unknown")
    flags = set(next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), []))
    units = (("amx_bf16", "AMX"), ("avx512_bf16", "AVX512-BF16"), ("avx512f", "AVX512"), ("avx2", "AVX2"))
    return f"{name}, {next((label for flag, label in units if flag in flags), 'no AVX2')}"


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
    """Where other processes keep at least half a core busy and the user has not set the wait policy: OpenMP
    threads that sleep as they wait, as many as on idle cores. Call before torch or Faiss is imported (every
    command does); returns the variables set."""
    if "OMP_WAIT_POLICY" in os.environ or busy_cores() < BUSY_CORE:
        return {}
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return {"OMP_WAIT_POLICY": "PASSIVE"}
