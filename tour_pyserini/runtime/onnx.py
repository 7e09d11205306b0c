"""A torch model through ONNX Runtime: exported once, cached beside its weights, run with the process's threads.

The graph of a model directory lives in
``<model>/tour_pyserini_onnx/<weights SHA-256, 16 digits>-<precision>-<recipe>/`` (``model.onnx`` and
``graph.json``, the versions that wrote it): written whole or not at all (staged, then renamed), read on later
runs; weights that change get a new folder. The fp32 graph is the model exported with eager attention, then
rewritten by ONNX Runtime's transformer fusions (each attention layer one ``Attention`` kernel, layer norms and
GELUs fused), kept only where its outputs on the export's examples match the plain graph's. ``int8`` is the fp32
graph with its matrix products' weights quantised to signed 8 bits (per output column) and their inputs quantised
as they arrive (dynamic quantisation): see docs/algorithms.md. ONNX Runtime runs as many threads as torch was given
(the command's ``--threads``, else torch's default), so what else runs on the machine does not change its
arithmetic.
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

from tour_pyserini.devices import PRECISIONS, resolve_precision
from tour_pyserini.errors import UserError
from tour_pyserini.files.staging import staged_directory

log = logging.getLogger(__name__)

RUNTIMES = ("torch", "onnx")
INT8 = "int8"
RUNTIME_PRECISIONS = (*PRECISIONS, INT8)  # int8 runs through ONNX Runtime only
# what auto means through ONNX Runtime: the fastest precision within the ranking bounds. int8 (per output column)
# re-ranks the dense top 20 within 0.002 of float32: SciFact test nDCG@10 -0.0002, nq-oracle test Acc@1 -0.0020,
# at 1.6x float32's pairs per second (docs/benchmarks.md)
ONNX_AUTO = INT8
CACHE = "tour_pyserini_onnx"
OPSET = 17
RECIPE = "fused"  # names the export's steps in the cache folder: graphs made another way are never read back
FUSED_TOLERANCE = 1e-4  # the most a fused graph's output may differ from the plain graph's on the examples
INSTALL = "pip install 'tour-pyserini[runtime]'"


def require_onnxruntime(runtime_flag: str) -> None:
    """ONNX Runtime and onnx importable, or one line naming the extra that installs them."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as e:
        raise UserError(f"{runtime_flag} onnx needs the runtime extra ({e.name} is not installed): {INSTALL}") from None


def resolve_runtime_precision(precision: str, runtime: str, device: str, flag: str, runtime_flag: str) -> str:
    """The arithmetic ``precision`` means through ``runtime`` on ``device`` (``flag`` and ``runtime_flag`` name
    them in errors): torch's as :func:`~tour_pyserini.devices.resolve_precision` says; ONNX Runtime runs fp32 or
    int8 on the CPU, auto being :data:`ONNX_AUTO`. Everything refused is one line, before any model loads."""
    if runtime not in RUNTIMES:
        raise UserError(f"{runtime_flag} must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
    if precision not in RUNTIME_PRECISIONS:
        raise UserError(f"{flag} {precision!r}: choose one of {', '.join(RUNTIME_PRECISIONS)}")
    if runtime == "torch":
        if precision == INT8:
            raise UserError(f"{flag} int8 runs through ONNX Runtime only ({runtime_flag} onnx)")
        return resolve_precision(precision, device, flag)
    if device != "cpu":
        raise UserError(f"{runtime_flag} onnx runs on the CPU (the onnxruntime wheel has no GPU kernels), "
                        f"not on {device}")  # fmt: skip
    if precision == "bf16":
        raise UserError(f"{flag} bf16: ONNX Runtime's CPU kernels have no bfloat16 matrix products; "
                        "use fp32, int8 or auto")  # fmt: skip
    require_onnxruntime(runtime_flag)
    return ONNX_AUTO if precision == "auto" else precision


def graph_path(model_dir: str | Path, weights_sha256: str, precision: str) -> Path:
    """Where the graph of the model in ``model_dir`` with these weights is cached at ``precision``."""
    return Path(model_dir) / CACHE / f"{weights_sha256[:16]}-{precision}-{RECIPE}" / "model.onnx"


def traceable(model, names: list[str], output: str):
    """``model`` (a HuggingFace model) as the exporter traces it: inputs by position, in the order of ``names``,
    and one output, ``output`` (a model's output is no tensor)."""
    import torch

    class Traced(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *tensors):
            return getattr(self.model(**dict(zip(names, tensors))), output)

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


def cached_graph(model_dir: str | Path, weights_sha256: str, precision: str, export: Callable[[Path], None]) -> Path:
    """The graph at ``precision`` (fp32 or int8) of the model in ``model_dir``: read from the cache, else made
    there once: ``export(path)`` writes the fp32 graph, int8 quantises it."""
    path = graph_path(model_dir, weights_sha256, precision)
    if path.is_file():
        return path
    source = cached_graph(model_dir, weights_sha256, "fp32", export) if precision == INT8 else None
    log.info("exporting %s to ONNX (%s), once: %s", model_dir, precision, path.parent)
    with staged_directory(path.parent, "the ONNX graph cache") as staged:
        if source is None:
            export(staged / path.name)
        else:
            quantize_graph(source, staged / path.name)
        (staged / "graph.json").write_text(json.dumps(graph_record(weights_sha256, precision), indent=2) + "\n")
    return path


def graph_record(weights_sha256: str, precision: str) -> dict:
    """What made a cached graph: the weights, the precision and the versions of the tools."""
    import onnx
    import onnxruntime
    import torch

    return {"weights_sha256": weights_sha256, "precision": precision, "recipe": RECIPE, "opset": OPSET,
            "torch": torch.__version__,
            "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__}  # fmt: skip


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
