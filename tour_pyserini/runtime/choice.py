"""Which runtime runs a model, and what a precision means through it: checked in one line before any model loads.

torch runs fp32 or bf16 (where the device multiplies in bfloat16 natively); ONNX Runtime runs fp32 or int8 on the
CPU, int8 exactly where the CPU has VNNI; OpenVINO runs fp32 or bf16 on the CPU, bf16 where the CPU multiplies in
bfloat16 natively, as torch's rule.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from pathlib import Path

from tour_pyserini.devices import PRECISIONS, exact_int8, resolve_precision
from tour_pyserini.errors import UserError, warn_once

RUNTIMES = ("torch", "onnx", "openvino")
AUTO = "auto"
RUNTIME_CHOICES = (AUTO, *RUNTIMES)  # what a --*-runtime flag takes; auto is the default
# what auto means on the CPU for a local model directory where the runtime extra is installed: OpenVINO was the
# fastest way within every ranking bound measured (the cross-encoder, the query encoder and the reader) on each CPU
# kind measured (AMX, AVX512-BF16, AVX2 only; docs/benchmarks.md)
AUTO_RUNTIME = "openvino"
INT8 = "int8"
RUNTIME_PRECISIONS = (*PRECISIONS, INT8)  # int8 runs through ONNX Runtime only
# what auto means through ONNX Runtime where the CPU has VNNI: the fastest precision within the ranking bounds.
# int8 (per output column) re-ranks the dense top 20 within 0.002 of float32 there: SciFact test nDCG@10 -0.0002,
# nq-oracle test Acc@1 -0.0020, at 1.6x float32's pairs per second. Without VNNI its sums saturate and nq-oracle's
# Acc@1 fell by 0.003, outside the bound, so auto is fp32 there (docs/benchmarks.md)
ONNX_AUTO = INT8
INSTALL = "pip install 'tour-pyserini[runtime]'"
MODULES = {"onnx": ("onnx", "onnxruntime"), "openvino": ("onnx", "openvino")}  # onnx: torch's exporter needs it


def require_runtime(runtime: str, runtime_flag: str) -> None:
    """The packages ``runtime`` needs importable, or one line naming the extra that installs them."""
    import importlib

    try:
        for module in MODULES[runtime]:
            importlib.import_module(module)
    except ImportError as e:
        raise UserError(
            f"{runtime_flag} {runtime} needs the runtime extra ({e.name} is not installed): {INSTALL}"
        ) from None


def check_model_directory(path: str | Path, runtime: str, runtime_flag: str, what: str) -> None:
    """A model ``runtime`` runs (other than torch) must be a local directory: its exported graph is cached by its
    weights' hash beside them. One line naming ``what`` otherwise."""
    if runtime != "torch" and not Path(path).expanduser().is_dir():
        raise UserError(
            f"{what}: {runtime_flag} {runtime} caches the exported model beside its weights; give a "
            "local model directory"
        )


def missing_auto_modules() -> list[str]:
    """The modules :data:`AUTO_RUNTIME` needs that are not installed (found, not imported: importing OpenVINO
    takes a second): with the device and the model's path, what auto resolves from."""
    return [m for m in MODULES[AUTO_RUNTIME] if importlib.util.find_spec(m) is None]


def resolve_runtime(
    runtime: str, device: str, model: str | Path, runtime_flag: str, what: str, exportable: bool = True
) -> str:
    """The runtime ``runtime`` means for ``what`` (the model at ``model``) on ``device``: itself, or for auto
    :data:`AUTO_RUNTIME` where it can run the model (the CPU, an ``exportable`` model in a local directory, the
    runtime extra installed), else torch. A missing extra is said once, since installing it is the user's choice;
    the other cases are where torch is the better or the only way (a GPU, a hub id, a class no runtime runs)."""
    if runtime != AUTO:
        return runtime
    if device != "cpu" or not exportable or not Path(model).expanduser().is_dir():
        return "torch"
    missing = missing_auto_modules()
    if missing:
        warn_once(
            __name__,
            f"{runtime_flag} auto: torch runs {what}, since the runtime extra is not "
            f"installed ({missing[0]}); {INSTALL} runs it through OpenVINO, faster within the "
            "same bounds",
        )
        return "torch"
    return AUTO_RUNTIME


def resolve_runtime_precision(
    precision: str, runtime: str, device: str, flag: str, runtime_flag: str, auto: Mapping[str, str] | None = None
) -> str:
    """The arithmetic ``precision`` means through ``runtime`` on ``device`` (``flag`` and ``runtime_flag`` name
    them in errors): torch's and OpenVINO's as :func:`~tour_pyserini.devices.resolve_precision` says (OpenVINO on
    the CPU only); ONNX Runtime runs fp32 or int8 on the CPU, auto being :data:`ONNX_AUTO` where the CPU has VNNI
    (:func:`~tour_pyserini.devices.exact_int8`), else fp32. ``auto``: what auto means through a runtime for a
    model whose measured bounds chose otherwise (a query encoder, a reader), by runtime. Everything refused is one
    line, before any model loads."""
    if precision == "auto" and auto and runtime in auto:
        precision = auto[runtime]
    if runtime not in RUNTIME_CHOICES:
        raise UserError(f"{runtime_flag} must be one of {', '.join(RUNTIME_CHOICES)}, got {runtime!r}")
    if precision not in RUNTIME_PRECISIONS:
        raise UserError(f"{flag} {precision!r}: choose one of {', '.join(RUNTIME_PRECISIONS)}")
    if runtime != "onnx" and precision == INT8:
        raise UserError(f"{flag} int8 runs through ONNX Runtime only ({runtime_flag} onnx)")
    if runtime in ("torch", AUTO):  # auto is torch or OpenVINO, whose precisions resolve alike
        return resolve_precision(precision, device, flag)
    if device != "cpu":
        raise UserError(
            f"{runtime_flag} {runtime} runs on the CPU here (its wheel's GPU support is not used), not on {device}"
        )
    if runtime == "openvino":
        require_runtime(runtime, runtime_flag)
        return resolve_precision(precision, device, flag)
    if precision == "bf16":
        raise UserError(
            f"{flag} bf16: ONNX Runtime's CPU kernels have no bfloat16 matrix products; use fp32, int8 or auto"
        )
    require_runtime(runtime, runtime_flag)
    if precision == "auto":
        return ONNX_AUTO if exact_int8() else "fp32"
    if precision == INT8 and not exact_int8():
        warn_once(
            __name__,
            f"{flag} int8 on a CPU without VNNI: ONNX Runtime's int8 sums saturate here, so "
            "its scores differ from a VNNI CPU's and fell outside the ranking bound (auto is fp32 "
            "here)",
        )
    return precision
