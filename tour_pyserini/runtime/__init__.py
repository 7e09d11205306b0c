"""Inference runtimes besides torch: a model the user gives, exported once to an ONNX graph, cached beside its
weights, and run on the CPU by ONNX Runtime (``onnx``: fused, fp32 or int8) or OpenVINO (``openvino``: fp32 or
bf16); which runtime and precision a flag means is checked first (:mod:`.choice`)."""

from tour_pyserini.runtime.choice import (
    AUTO,
    INT8,
    ONNX_AUTO,
    RUNTIME_CHOICES,
    RUNTIME_PRECISIONS,
    RUNTIMES,
    check_model_directory,
    missing_auto_modules,
    resolve_runtime,
    resolve_runtime_precision,
)
from tour_pyserini.runtime.exported import exported_model
from tour_pyserini.runtime.onnx import RECIPE, OnnxModel
from tour_pyserini.runtime.openvino import OpenVinoModel

__all__ = [
    "AUTO",
    "INT8",
    "ONNX_AUTO",
    "RECIPE",
    "RUNTIMES",
    "RUNTIME_CHOICES",
    "RUNTIME_PRECISIONS",
    "OnnxModel",
    "OpenVinoModel",
    "check_model_directory",
    "exported_model",
    "missing_auto_modules",
    "resolve_runtime",
    "resolve_runtime_precision",
]
