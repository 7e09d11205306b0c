"""A torch model through ONNX Runtime: exported once, cached beside its weights, run with the process's threads.

The graph of a model directory lives in ``<model>/tour_pyserini_onnx/<weights SHA-256, 16
digits>-<precision>-<recipe>/`` (``model.onnx`` and ``graph.json``, the versions that wrote it), or under
``$XDG_CACHE_HOME/tour_pyserini/tour_pyserini_onnx/`` (by default ``~/.cache``) where the model's directory is
read-only (a model installed as a package): written whole or not at all (staged, then renamed), read on later runs;
weights that change get a new folder. The fp32 graph is the model exported with eager attention, then rewritten by
ONNX Runtime's transformer fusions (each attention layer one ``Attention`` kernel, layer norms and GELUs fused),
kept only where its outputs on the export's examples match the plain graph's. ``int8`` is the fp32 graph with its
matrix products' weights quantised to signed 8 bits (per output column) and their inputs quantised as they arrive
(dynamic quantisation): see docs/algorithms.md. ONNX Runtime runs as many threads as torch was given (the command's
``--threads``, else torch's default), so what else runs on the machine does not change its arithmetic.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from tour_pyserini.files.staging import staged_directory
from tour_pyserini.runtime.choice import INT8

log = logging.getLogger(__name__)

CACHE = "tour_pyserini_onnx"
OPSET = 17
RECIPE = "fused"  # names the export's steps in the cache folder: graphs made another way are never read back
PLAIN = "plain"  # the graph as traced, for runtimes that fuse it themselves (OpenVINO)
FUSED_TOLERANCE = 1e-4  # the most a fused graph's output may differ from the plain graph's on the examples


def graph_path(model_dir: str | Path, weights_sha256: str, precision: str, recipe: str = RECIPE) -> Path:
    """Where the graph of the model in ``model_dir`` with these weights is cached at ``precision``: beside the
    weights, or in the user's cache where their directory is read-only (the weights' hash keys both)."""
    model_dir = Path(model_dir)
    beside = model_dir / CACHE
    if beside.is_dir() or os.access(model_dir, os.W_OK | os.X_OK):
        root = beside
    else:
        root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tour_pyserini" / CACHE
    return root / f"{weights_sha256[:16]}-{precision}-{recipe}" / "model.onnx"


def traceable(model, names: list[str], output: str):
    """``model`` (a HuggingFace model, or a module returning a dict) as the exporter traces it: inputs by position,
    in the order of ``names``, and one output, ``output`` (a model's output is no tensor)."""
    import torch

    class Traced(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *tensors):
            return self.model(**dict(zip(names, tensors)))[output]

    # in eval mode: the exporter restores the mode it found, which would otherwise switch the model's dropout on
    return Traced().eval()


def export_graph(model, inputs: Mapping, output: str, path: Path) -> None:
    """Export ``model`` (a HuggingFace encoder in eval mode, loaded with eager attention) called on ``inputs``
    (name -> tensor, padded examples of a batch) to an ONNX graph at ``path`` whose batch and sequence axes are
    free, with one output ``output`` (:func:`trace_graph`), then fused (:func:`fuse_graph`)."""
    trace_graph(model, inputs, output, path)
    fuse_graph(path, model.config.num_attention_heads, model.config.hidden_size, inputs)


def trace_graph(model, inputs: Mapping, output: str, path: Path) -> None:
    """The plain ONNX graph of ``model`` traced on ``inputs`` at ``path``, as :func:`export_graph` describes."""
    import torch

    names = list(inputs)
    axes = {name: {0: "batch", 1: "sequence"} for name in names} | {output: {0: "batch"}}
    with warnings.catch_warnings():  # the tracer's notes on Python branches, which the examples' padding settles
        warnings.simplefilter("ignore")
        torch.onnx.export(traceable(model, names, output), tuple(inputs[n] for n in names), str(path),
                          input_names=names, output_names=[output], dynamic_axes=axes, opset_version=OPSET,
                          dynamo=False)  # fmt: skip


def fuse_graph(path: Path, heads: int, hidden: int, inputs: Mapping) -> bool:
    """Rewrite the graph at ``path`` with ONNX Runtime's BERT fusions (``heads`` attention heads of a ``hidden``
    wide model), unless the fused graph's output on ``inputs`` differs from the plain one's by more than
    :data:`FUSED_TOLERANCE` (a model the fusions misread). Whether it was rewritten."""
    from onnxruntime.transformers.optimizer import optimize_model

    fused = path.with_name("fused.onnx")
    with quiet_root_logger():  # the optimiser reports each fusion it tries
        optimize_model(str(path), model_type="bert", num_heads=heads, hidden_size=hidden).save_model_to_file(
            str(fused))
    plain, candidate = OnnxModel(path)(inputs), OnnxModel(fused)(inputs)
    if np.abs(plain - candidate).max() > FUSED_TOLERANCE:
        log.warning("ONNX Runtime's fusions change this model's output; keeping its unfused graph")
        fused.unlink()
        return False
    fused.replace(path)
    return True


@contextlib.contextmanager
def quiet_root_logger():
    """The root logger at ERROR for the block: ONNX Runtime's tools advise and note each tensor on it."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        root.setLevel(level)


def quantize_graph(fp32: Path, path: Path) -> None:
    """The int8 graph of ``fp32``: its matrix products' weights as signed 8-bit integers with one scale per
    output column, inputs quantised as they arrive. Per column, not per matrix: a fused attention's weight is
    its three projections side by side, and one scale for all three cost SciFact training claims 0.0034
    nDCG@10 at rerank@20 (per column: 0.0000; docs/benchmarks.md)."""
    from onnx import TensorProto
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with quiet_root_logger():  # the fused kernels' outputs have no types shape inference knows: they are floats
        quantize_dynamic(str(fp32), str(path), weight_type=QuantType.QInt8, per_channel=True,
                         extra_options={"DefaultTensorType": TensorProto.FLOAT})


def cached_graph(model_dir: str | Path, weights_sha256: str, precision: str, export: Callable[[Path], None],
                 recipe: str = RECIPE) -> Path:  # fmt: skip
    """The graph at ``precision`` (fp32 or int8) of the model in ``model_dir``: read from the cache, else made
    there once: ``export(path)`` writes the fp32 graph, int8 quantises it. ``recipe`` names how ``export``
    makes it (:data:`RECIPE`, or :data:`PLAIN` for the graph as traced)."""
    path = graph_path(model_dir, weights_sha256, precision, recipe)
    if path.is_file():
        return path
    source = cached_graph(model_dir, weights_sha256, "fp32", export, recipe) if precision == INT8 else None
    log.info("exporting %s to ONNX (%s), once: %s", model_dir, precision, path.parent)
    with staged_directory(path.parent, "the ONNX graph cache") as staged:
        if source is None:
            export(staged / path.name)
        else:
            quantize_graph(source, staged / path.name)
        record = graph_record(weights_sha256, precision, recipe)
        (staged / "graph.json").write_text(json.dumps(record, indent=2) + "\n")
    return path


def graph_record(weights_sha256: str, precision: str, recipe: str) -> dict:
    """What made a cached graph: the weights, the precision, the recipe and the versions of the tools that made
    it (ONNX Runtime's only where it fused or quantised the graph: a plain graph needs no ONNX Runtime)."""
    import onnx
    import torch

    record = {"weights_sha256": weights_sha256, "precision": precision, "recipe": recipe, "opset": OPSET,
              "torch": torch.__version__, "onnx": onnx.__version__}  # fmt: skip
    if recipe != PLAIN:
        import onnxruntime

        record["onnxruntime"] = onnxruntime.__version__
    return record


class OnnxModel:
    """An ONNX graph run by ONNX Runtime on the CPU with torch's thread count; idle threads sleep where the
    command found the cores shared (``OMP_WAIT_POLICY=PASSIVE``), as torch's do."""

    def __init__(self, path: Path):
        import onnxruntime as ort
        import torch

        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        if os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE":
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.path = path
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]

    def __call__(self, inputs: Mapping) -> np.ndarray:
        """The graph's first output for ``inputs`` (name -> integer array or tensor; names it lacks are left)."""
        return self.session.run(None, {name: np.asarray(inputs[name], dtype=np.int64) for name in self.inputs})[0]
