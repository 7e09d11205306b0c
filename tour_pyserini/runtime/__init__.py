"""Inference runtimes besides torch: a model the user gives, exported once to an ONNX graph (int8: its weights
quantised) and fused, cached beside its weights and run by ONNX Runtime on the CPU (``onnx``)."""

from tour_pyserini.runtime.onnx import (
    INT8,
    ONNX_AUTO,
    RECIPE,
    RUNTIME_PRECISIONS,
    RUNTIMES,
    OnnxModel,
    cached_graph,
    export_graph,
    resolve_runtime_precision,
)

__all__ = ["INT8", "ONNX_AUTO", "RECIPE", "RUNTIMES", "RUNTIME_PRECISIONS", "OnnxModel", "cached_graph", "export_graph",
           "resolve_runtime_precision"]  # fmt: skip
