"""A model the user gave, through the runtime a flag chose: the graph each runtime reads, from the cache or
exported there once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tour_pyserini.errors import UserError
from tour_pyserini.runtime.onnx import PLAIN, RECIPE, OnnxModel, cached_graph, export_graph, trace_graph
from tour_pyserini.runtime.openvino import OpenVinoModel

Writer = Callable[..., None]  # export_graph or trace_graph: (model, inputs, output, path)


def exported_model(
    model_dir: str | Path,
    weights_sha256: str | None,
    precision: str,
    runtime: str,
    export: Callable[[Writer, Path], None],
    what: str,
):
    """The model in ``model_dir`` (weights hashed ``weights_sha256``; None: no weight files, one line naming
    ``what``) through ``runtime`` (onnx or openvino) at ``precision``: a callable from input arrays by name to the
    graph's output. ONNX Runtime reads its fused graph (int8 quantised from it), OpenVINO the graph as traced (it
    fuses for itself). ``export(write, path)`` loads the torch model and calls ``write(model, examples, output,
    path)``, only when the cache lacks the graph."""
    if runtime not in ("onnx", "openvino"):  # a caller's bug: auto is resolved before any model loads
        raise ValueError(f"runtime {runtime!r}: onnx or openvino (resolve auto with resolve_runtime first)")
    if weights_sha256 is None:
        raise UserError(f"{what} has no weight files to export")
    if runtime == "onnx":
        return OnnxModel(cached_graph(model_dir, weights_sha256, precision, lambda p: export(export_graph, p), RECIPE))
    graph = cached_graph(model_dir, weights_sha256, "fp32", lambda p: export(trace_graph, p), PLAIN)
    return OpenVinoModel(graph, precision)
